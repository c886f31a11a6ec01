-- sweep: one-factor sweeps ([Zhang]): per factor, each query's wall time at every level of that
-- factor with all the others fixed; the report reads the best level and the knee from it. Factors
-- with one level in a group are left out.
--
-- inputs:  cell_query, cell_others
-- columns: factor, others, query, level, wall_ns, timed_out
CREATE OR REPLACE TABLE sweep AS
WITH x AS (
    SELECT o.factor, o.others, q.query, o.level, q.wall_ns, q.timed_out
    FROM cell_others o JOIN cell_query q ON q.cell = o.cell
    WHERE o.factor NOT IN ('nodes', 'scheme'))
SELECT * FROM x
WHERE (factor, others, query) IN (SELECT (factor, others, query) FROM x GROUP BY ALL HAVING count(*) > 1)
ORDER BY factor, others, query, TRY_CAST(level AS DOUBLE) NULLS LAST, level;
