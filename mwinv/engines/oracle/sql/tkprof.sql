-- tkprof: tkprof's per-statement table from the same calls, grouped by query id (literals folded,
-- where tkprof lists each literal apart): count, cpu, elapsed, disk (p), query (cr), current (cu),
-- rows and library cache misses per call type, recursive statements (dep > 0) apart.
--
-- inputs:  dbms_call, statement, statement_text
-- columns: query_id, text, recursive, call, count, cpu_ns, elapsed_ns, disk, query, current, rows, misses
CREATE OR REPLACE TABLE tkprof AS
SELECT s.query_id, any_value(t.text) AS text, c.dep > 0 AS recursive,
       CASE c.call WHEN 'PARSE' THEN 'Parse' WHEN 'EXEC' THEN 'Execute' ELSE 'Fetch' END AS call,
       count(*) AS count, sum(c.c_ns) AS cpu_ns, sum(c.e_ns) AS elapsed_ns, sum(c.p) AS disk, sum(c.cr) AS query,
       sum(c.cu) AS current, sum(c.r) AS rows, sum(c.mis) AS misses
FROM dbms_call c
JOIN statement s ON s.node = c.node AND s.statement_id = c.statement_id
LEFT JOIN (SELECT DISTINCT query_text_hash, text FROM statement_text) t ON t.query_text_hash = s.query_text_hash
WHERE c.call IN ('PARSE', 'EXEC', 'FETCH')
GROUP BY ALL;
