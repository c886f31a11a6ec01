-- response_item: a trace file's response time, each microsecond counted once (Method R's rule):
-- the CPU of top-level calls (c= includes their recursive calls'; a recursive call that ran between
-- its parent's calls is top-level here), every wait once, what the calls'
-- e= leave unexplained ("unaccounted-for within calls", possibly negative), and the gaps between
-- top-level calls that no wait explains ("unaccounted-for between calls").
--
-- With the session's network round trip (client_rtt: measured by the host's kernel, or given), each
-- `SQL*Net message from client` is two items: the round trip (at most the wait) and the client's
-- think time (the rest). The server's trace alone cannot tell them apart.
--
-- inputs:  dbms_call, dbms_wait, statement, statement_text, client_rtt
-- columns: node, pid, file, line, statement_id (top-level execution), query_id, text, kind (cpu,
--          wait, unaccounted), name, call, dep, dur_ns, obj
CREATE OR REPLACE TABLE response_item AS
WITH top_call AS (   -- calls in no other call: dep 0, and recursive calls that ran between their parent's
    SELECT * FROM dbms_call c WHERE e_ns IS NOT NULL AND call NOT IN ('XCTEND', 'ERROR')
      AND (dep = 0 OR NOT EXISTS (SELECT 1 FROM dbms_call p WHERE p.file = c.file AND p.dep = c.dep - 1
                                  AND p.start_ns <= c.end_ns AND p.end_ns >= c.end_ns))),
in_top AS (   -- waits inside each top-level call, at any depth
    SELECT c.file, c.line, sum(w.ela_ns) AS ns
    FROM top_call c JOIN dbms_wait w ON w.file = c.file AND w.in_call
         AND w.end_ns > c.start_ns AND w.end_ns <= c.end_ns
    GROUP BY ALL),
span AS (
    SELECT file, min(t0) AS t0, max(t1) AS t1 FROM (
        SELECT file, start_ns AS t0, end_ns AS t1 FROM top_call
        UNION ALL SELECT file, end_ns - ela_ns, end_ns FROM dbms_wait) GROUP BY file),
client_wait AS (
    SELECT w.*, r.rtt_ns AS rtt,
           w.event IN ('SQL*Net message from client', 'SQL*Net vector message from client')
           AND coalesce(r.rtt_ns, 0) > 0 AS split
    FROM dbms_wait w LEFT JOIN client_rtt r USING (node, pid)),
items AS (
    SELECT node, pid, file, line, top_statement_id AS statement_id, 'cpu' AS kind, 'CPU: ' || call AS name,
           call, dep, c_ns AS dur_ns, CAST(NULL AS BIGINT) AS obj
    FROM top_call
    UNION ALL
    SELECT w.node, w.pid, w.file, w.line, coalesce(w.top_statement_id, w.statement_id), 'wait',
           w.event || CASE WHEN split THEN ': round trip' ELSE '' END,
           CAST(NULL AS VARCHAR), w.call_dep, CASE WHEN split THEN least(w.ela_ns, rtt) ELSE w.ela_ns END, w.obj
    FROM client_wait w
    UNION ALL
    SELECT w.node, w.pid, w.file, w.line, coalesce(w.top_statement_id, w.statement_id), 'wait',
           w.event || ': client think time', CAST(NULL AS VARCHAR), w.call_dep, w.ela_ns - least(w.ela_ns, rtt), w.obj
    FROM client_wait w WHERE split
    UNION ALL
    SELECT c.node, c.pid, c.file, c.line, c.top_statement_id, 'unaccounted', 'unaccounted-for within calls',
           c.call, c.dep, c.e_ns - c.c_ns - coalesce(i.ns, 0), NULL
    FROM top_call c LEFT JOIN in_top i USING (file, line)),
top_sum AS (SELECT file, any_value(node) AS node, any_value(pid) AS pid, sum(e_ns) AS e FROM top_call GROUP BY file),
idle_sum AS (SELECT file, sum(ela_ns) AS ns FROM dbms_wait WHERE NOT in_call GROUP BY file),
between AS (
    SELECT coalesce(t.node, w.node) AS node, coalesce(t.pid, w.pid) AS pid, s.file, CAST(NULL AS BIGINT) AS line,
           CAST(NULL AS BIGINT) AS statement_id, 'unaccounted' AS kind, 'unaccounted-for between calls' AS name,
           CAST(NULL AS VARCHAR) AS call, 0 AS dep,
           s.t1 - s.t0 - coalesce(t.e, 0) - coalesce(i.ns, 0) AS dur_ns, CAST(NULL AS BIGINT) AS obj
    FROM span s LEFT JOIN top_sum t USING (file) LEFT JOIN idle_sum i USING (file)
         LEFT JOIN (SELECT file, any_value(node) AS node, any_value(pid) AS pid FROM dbms_wait GROUP BY file) w
         USING (file))
SELECT i.*, s.query_id, t.text
FROM (SELECT * FROM items UNION ALL SELECT * FROM between) i
LEFT JOIN statement s ON s.node = i.node AND s.statement_id = i.statement_id
LEFT JOIN (SELECT DISTINCT query_text_hash, text FROM statement_text) t ON t.query_text_hash = s.query_text_hash;
