-- tkprof_waits: tkprof's "Elapsed times include waiting on following events": per query id (recursive
-- statements apart) and event, the waits of its executions — inside their calls and, between calls,
-- on their cursor (SQL*Net message from client included, as tkprof lists it) — with how many, the
-- longest and the total. Waits on no statement's cursor (cursor #0) count in the overall totals only.
--
-- inputs:  dbms_wait, statement
-- columns: query_id (NULL: no statement), recursive, event, waits, max_ns, total_ns
CREATE OR REPLACE TABLE tkprof_waits AS
SELECT s.query_id, coalesce(s.nesting_level, w.call_dep, 0) > 0 AS recursive, w.event,
       count(*) AS waits, max(w.ela_ns) AS max_ns, sum(w.ela_ns) AS total_ns
FROM dbms_wait w LEFT JOIN statement s ON s.node = w.node AND s.statement_id = w.statement_id
GROUP BY ALL;
