-- scheme_diff: the same query on two schemes with every other level equal ([Taufer]'s 1-part vs
-- 2-part): wall time, bytes the data nodes shipped, and the component of the coordinator's time that
-- moved the most.
--
-- inputs:  cell_query, cell_others
-- columns: others, nodes, query, scheme_a, scheme_b, cell_a, cell_b, wall_a, wall_b, net_a, net_b, moved,
--          moved_ns (b - a)
CREATE OR REPLACE TABLE scheme_diff AS
WITH s AS (
    SELECT q.*, o.others FROM cell_query q JOIN cell_others o ON o.cell = q.cell AND o.factor = 'scheme'),
comp AS (
    UNPIVOT (SELECT cell, query, COLUMNS('^c_') FROM cell_query) ON COLUMNS('^c_') INTO NAME component VALUE ns),
pair AS (
    SELECT a.others, a.nodes, a.query, a.scheme AS scheme_a, b.scheme AS scheme_b, a.cell AS cell_a, b.cell AS cell_b,
           a.wall_ns AS wall_a, b.wall_ns AS wall_b, a.net_bytes AS net_a, b.net_bytes AS net_b
    FROM s a JOIN s b ON a.others = b.others AND a.query = b.query AND a.scheme < b.scheme),
moved AS (
    SELECT p.others, p.query, p.scheme_a, p.scheme_b,
           arg_max(substr(ca.component, 3), abs(cb.ns - ca.ns)) AS moved,
           arg_max(cb.ns - ca.ns, abs(cb.ns - ca.ns)) AS moved_ns
    FROM pair p JOIN comp ca ON ca.cell = p.cell_a AND ca.query = p.query
    JOIN comp cb ON cb.cell = p.cell_b AND cb.query = p.query AND cb.component = ca.component
    GROUP BY ALL)
SELECT p.others, p.nodes, p.query, p.scheme_a, p.scheme_b, p.cell_a, p.cell_b, p.wall_a, p.wall_b, p.net_a, p.net_b,
       m.moved, m.moved_ns
FROM pair p LEFT JOIN moved m USING (others, query, scheme_a, scheme_b)
ORDER BY p.query, p.nodes;
