-- statement_attribution: per top-level statement (not a parallel worker) one row per component: its
-- own time (ns), which sums to its wall time — not_allocated closes it (a DBMS's own account brings
-- its own not_allocated, possibly negative: its unaccounted-for time) — and its parallel workers'
-- time in that component (from_workers_ns), apart.
--
-- inputs:  statement_clean, own_attribution; the variable components (ATTRIBUTION_COMPONENTS, in order)
-- columns: node, statement_id, query_id, component, ns, from_workers_ns
CREATE OR REPLACE TABLE statement_attribution AS
WITH comps AS (SELECT unnest(getvariable('components')) AS component),
stmts AS (
    SELECT node, statement_id, query_id, end_ns - start_ns AS wall_ns,
           (leader_pid IS NOT NULL AND leader_pid <> pid AND parent_statement_id IS NOT NULL) AS worker,
           parent_statement_id
    FROM statement_clean WHERE coalesce(nesting_level, 0) = 0),
own_rows AS (
    SELECT node, statement_id, component, sum(ns) AS ns
    FROM own_attribution JOIN comps USING (component) GROUP BY ALL),
-- one row per statement, its components in a map (a wide row, as few rows as statements)
own AS (
    SELECT node, statement_id, map(list(component), list(ns)) AS ns,
           coalesce(sum(ns) FILTER (WHERE component <> 'not_allocated'), 0) AS allocated,
           coalesce(sum(ns) FILTER (WHERE component = 'not_allocated'), 0) AS not_allocated
    FROM own_rows GROUP BY ALL),
workers AS (
    SELECT node, statement_id, map(list(component), list(ns)) AS ns
    FROM (SELECT s.node, s.parent_statement_id AS statement_id, o.component, sum(o.ns) AS ns
          FROM stmts s JOIN own_rows o USING (node, statement_id) WHERE s.worker GROUP BY ALL)
    GROUP BY ALL)
SELECT s.node, s.statement_id, s.query_id, c.component,
       CASE WHEN c.component = 'not_allocated'
            THEN coalesce(o.not_allocated, 0) + greatest(0, s.wall_ns - coalesce(o.allocated, 0)
                                                             - coalesce(o.not_allocated, 0))
            ELSE coalesce(map_extract_value(o.ns, c.component), 0) END::BIGINT AS ns,
       coalesce(map_extract_value(w.ns, c.component), 0)::BIGINT AS from_workers_ns
FROM stmts s LEFT JOIN own o USING (node, statement_id) LEFT JOIN workers w USING (node, statement_id)
     CROSS JOIN comps c
WHERE NOT s.worker;
