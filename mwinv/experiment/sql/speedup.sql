-- speedup: per query, its speed-up over node counts against the ideal, within each group of cells
-- that differ only in their node count ([Taufer] Fig. 1): base = the group's smallest node count;
-- a speed-up under 1 is a slow-down, a timeout or failure has none.
--
-- inputs:  cell_query, cell_others
-- columns: grp (the other levels), scheme, query, nodes, base_nodes, wall_ns, base_wall_ns, speedup,
--          ideal, slowdown, timed_out, failed
CREATE OR REPLACE TABLE speedup AS
WITH g AS (
    SELECT q.*, o.others AS grp FROM cell_query q JOIN cell_others o ON o.cell = q.cell AND o.factor = 'nodes'),
base AS (
    SELECT grp, query, min(nodes) AS base_nodes, arg_min(wall_ns, nodes) AS base_wall_ns FROM g GROUP BY ALL)
SELECT g.grp, g.scheme, g.query, g.nodes, b.base_nodes, g.wall_ns, b.base_wall_ns,
       b.base_wall_ns / nullif(g.wall_ns, 0) AS speedup, g.nodes / b.base_nodes AS ideal,
       coalesce(b.base_wall_ns / nullif(g.wall_ns, 0) < 1, false) AS slowdown, g.timed_out, g.failed
FROM g JOIN base b USING (grp, query)
ORDER BY g.grp, g.query, g.nodes;
