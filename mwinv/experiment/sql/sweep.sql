-- sweep: one-factor sweeps ([Zhang]): per factor, each query's wall time at every level of that
-- factor with all the others fixed; the report reads the best level and the knee from it. Factors
-- with one level in a group are left out.
--
-- inputs:  cell_query, cell_others
-- columns: factor, others, query, level, cell, wall_ns, timed_out
CREATE OR REPLACE TABLE sweep AS
WITH x AS (
    SELECT o.factor, o.others, q.query, o.level, q.cell, q.wall_ns, q.timed_out
    FROM cell_others o JOIN cell_query q ON q.cell = o.cell
    WHERE o.factor NOT IN ('nodes', 'scheme'))
SELECT * FROM x
WHERE (factor, others, query) IN (SELECT (factor, others, query) FROM x GROUP BY ALL HAVING count(*) > 1)
ORDER BY factor, others, query, TRY_CAST(level AS DOUBLE) NULLS LAST, level;

-- sweep_past_best: the levels above a sweep's best one at which the query took a tenth longer or more
-- (more of the resource made it slower: [Zhang]'s "contention in the middleware and OS" when the factor
-- is CPUs), with the component that grew the most from the best level's cell to this one, on the
-- coordinator or summed over the data nodes. The coordinator's wait for the nodes (remote_wait) is
-- left out: it grows with whatever slowed the nodes, which the nodes' own components name.
--
-- inputs:  sweep, cell_query
-- columns: factor, others, query, level, best_level, wall_ns, best_ns, grew (side and component),
--          grew_ns
CREATE OR REPLACE TABLE sweep_past_best AS
WITH best AS (
    SELECT factor, others, query, arg_min(level, wall_ns) AS best_level, arg_min(cell, wall_ns) AS best_cell,
           min(wall_ns) AS best_ns
    FROM sweep WHERE wall_ns IS NOT NULL GROUP BY ALL),
past AS (
    SELECT s.*, b.best_level, b.best_cell, b.best_ns
    FROM sweep s JOIN best b USING (factor, others, query)
    WHERE s.wall_ns >= 1.10 * b.best_ns AND TRY_CAST(s.level AS DOUBLE) > TRY_CAST(b.best_level AS DOUBLE)),
comp AS (
    UNPIVOT (SELECT cell, query, COLUMNS(c -> regexp_matches(c, '^[cn]_') AND c <> 'c_remote_wait') FROM cell_query)
    ON COLUMNS('^[cn]_') INTO NAME component VALUE ns),
grew AS (
SELECT p.factor, p.others, p.query, p.level, p.best_level, p.wall_ns, p.best_ns,
       arg_max(CASE WHEN starts_with(c.component, 'c_') THEN 'coordinator ' ELSE 'data nodes ' END
               || substr(c.component, 3), c.ns - b.ns) AS grew,
       max(c.ns - b.ns) AS grew_ns
FROM past p JOIN comp c ON c.cell = p.cell AND c.query = p.query
JOIN comp b ON b.cell = p.best_cell AND b.query = p.query AND b.component = c.component
GROUP BY ALL)
SELECT * FROM grew ORDER BY factor, others, query, TRY_CAST(level AS DOUBLE);
