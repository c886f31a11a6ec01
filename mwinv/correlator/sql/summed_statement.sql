-- summed_statement: per top-level statement (not a parallel worker) whose own rows are summed (not
-- rusage_only: slice_statement) its time per component, a list in the order of the variable components:
-- its own time (ns), which sums to its wall time — not_allocated closes it (a DBMS's own account brings
-- its own not_allocated, possibly negative: its unaccounted-for time) — and its parallel workers' time
-- per component (from_workers_ns; NULL: it had none), apart. summed_attribution is its row per component.
-- One statement slice at a time: a statement's own rows (and its workers', in its slice) are gathered
-- into one list per statement, and its list per component made from it. Within a slice the lists fit in
-- memory; over the capture a list or map per statement ran out of DuckDB's 768 MB (1.5 M pgbench
-- statements), and the cross join of every statement with the components, then three joins per
-- component, took 9.3 s per million statements on one core where this takes 3.5-4 s. One row a
-- statement, not one per component: a 600 s capture's 3.26 M summed statements took 13.3-16.7 s as 35.8 M
-- rows (their node's and component's text stored in each), 7.6-9.7 s as this.
--
-- builds:  summed_statement
-- inputs:  slice_statement, own_attribution, in_slice; the variables components (ATTRIBUTION_COMPONENTS,
--          in order), slice_lo, slice_hi
-- slice:   statement
-- columns: node, statement_id, query_id, ns (BIGINT[], per component), from_workers_ns (BIGINT[] or NULL)
CREATE TABLE summed_statement AS
WITH comps AS (SELECT getvariable('components') AS names, list_position(getvariable('components'), 'not_allocated') AS na),
stmts AS (
    SELECT node, statement_id, query_id, end_ns - start_ns AS wall_ns, worker, parent_statement_id
    FROM slice_statement WHERE coalesce(nesting_level, 0) = 0 AND NOT rusage_only AND in_slice(key_ns)),
-- each own row with its component's position, a worker's under its leader
own AS (
    SELECT s.node, CASE WHEN s.worker THEN s.parent_statement_id ELSE s.statement_id END AS statement_id, s.worker,
           list_position(c.names, o.component) AS i, o.ns
    FROM own_attribution o JOIN stmts s USING (node, statement_id), comps c
    WHERE in_slice(o.key_ns) AND s.worker IS NOT NULL),
per AS (
    SELECT node, statement_id,
           list({'i': i, 'ns': ns}) FILTER (WHERE NOT worker) AS own, list({'i': i, 'ns': ns}) FILTER (WHERE worker) AS w,
           coalesce(sum(ns) FILTER (WHERE NOT worker AND i <> c.na), 0) AS allocated,
           coalesce(sum(ns) FILTER (WHERE NOT worker AND i = c.na), 0) AS not_allocated
    FROM own, comps c WHERE i IS NOT NULL GROUP BY node, statement_id)
SELECT s.node, s.statement_id, s.query_id,
       list_transform(range(1, len(c.names) + 1), k ->
           CASE WHEN k = c.na THEN coalesce(p.not_allocated, 0)
                                   + greatest(0, s.wall_ns - coalesce(p.allocated, 0) - coalesce(p.not_allocated, 0))
                ELSE coalesce(list_sum(list_transform(list_filter(p.own, x -> x.i = k), x -> x.ns)), 0) END::BIGINT)
           AS ns,
       CASE WHEN p.w IS NOT NULL THEN list_transform(range(1, len(c.names) + 1), k ->
                coalesce(list_sum(list_transform(list_filter(p.w, x -> x.i = k), x -> x.ns)), 0)::BIGINT) END
           AS from_workers_ns
FROM stmts s LEFT JOIN per p USING (node, statement_id), comps c WHERE NOT s.worker;
