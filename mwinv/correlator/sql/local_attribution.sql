-- local_attribution: per top-level statement (not a parallel worker) one row per component: its
-- own time (ns), which sums to its wall time — not_allocated closes it (a DBMS's own account brings
-- its own not_allocated, possibly negative: its unaccounted-for time) — and its parallel workers'
-- time in that component (from_workers_ns), apart. One statement slice at a time: the cross join with
-- the components holds a slice's statements.
--
-- builds:  local_attribution
-- inputs:  slice_statement, own_attribution, in_slice; the variables components (ATTRIBUTION_COMPONENTS,
--          in order), slice_lo, slice_hi
-- slice:   statement
-- columns: node, statement_id, query_id, component, ns, from_workers_ns
CREATE TABLE local_attribution AS
WITH comps AS (SELECT unnest(getvariable('components')) AS component),
stmts AS (
    SELECT node, statement_id, query_id, end_ns - start_ns AS wall_ns,
           worker, parent_statement_id
    FROM slice_statement WHERE coalesce(nesting_level, 0) = 0 AND in_slice(key_ns)),
own_rows AS (
    SELECT node, statement_id, component, sum(ns) AS ns
    FROM own_attribution JOIN comps USING (component) WHERE in_slice(key_ns) GROUP BY ALL),
-- joins and plain sums, no per-statement lists or maps: DuckDB spills those (a map per statement ran
-- out of its 768 MB on 1.5 million pgbench statements)
totals AS (
    SELECT node, statement_id,
           coalesce(sum(ns) FILTER (WHERE component <> 'not_allocated'), 0) AS allocated,
           coalesce(sum(ns) FILTER (WHERE component = 'not_allocated'), 0) AS not_allocated
    FROM own_rows GROUP BY ALL),
workers AS (
    SELECT s.node, s.parent_statement_id AS statement_id, o.component, sum(o.ns) AS ns
    FROM stmts s JOIN own_rows o USING (node, statement_id) WHERE s.worker GROUP BY ALL)
SELECT s.node, s.statement_id, s.query_id, c.component,
       CASE WHEN c.component = 'not_allocated'
            THEN coalesce(t.not_allocated, 0) + greatest(0, s.wall_ns - coalesce(t.allocated, 0)
                                                             - coalesce(t.not_allocated, 0))
            ELSE coalesce(o.ns, 0) END::BIGINT AS ns,
       coalesce(w.ns, 0)::BIGINT AS from_workers_ns
FROM stmts s CROSS JOIN comps c
     LEFT JOIN own_rows o ON o.node = s.node AND o.statement_id = s.statement_id AND o.component = c.component
     LEFT JOIN totals t ON t.node = s.node AND t.statement_id = s.statement_id
     LEFT JOIN workers w ON w.node = s.node AND w.statement_id = s.statement_id AND w.component = c.component
WHERE NOT s.worker;
