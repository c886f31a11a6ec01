-- fetch_trips: per query id, the client round trips its executions made (FETCH calls) and what a
-- trip cost in client waits (SQL*Net message from/to client between and inside its calls): the
-- inputs of the fetch array size what-if.
--
-- inputs:  statement, dbms_call, dbms_wait, client_rtt
-- columns: query_id, executions, fetches, rows, rows_per_fetch (array of per-execution row counts),
--          trip_wait_ns (mean SQL*Net client wait per round trip), rtt_ns (the sessions' mean network
--          round trip, NULL: unknown)
CREATE OR REPLACE TABLE fetch_trips AS
WITH per_exec AS (
    SELECT s.query_id, c.statement_id, count(*) FILTER (WHERE c.call = 'FETCH') AS fetches,
           sum(c.r) FILTER (WHERE c.call = 'FETCH') AS rows
    FROM dbms_call c JOIN statement s ON s.node = c.node AND s.statement_id = c.statement_id
    WHERE coalesce(s.nesting_level, 0) = 0 GROUP BY ALL),
trip AS (
    SELECT s.query_id, sum(w.ela_ns) AS ns
    FROM dbms_wait w JOIN statement s ON s.node = w.node AND s.statement_id = w.statement_id
    WHERE w.event IN ('SQL*Net message from client', 'SQL*Net message to client')
      AND w.end_ns <= s.end_ns AND w.end_ns > s.start_ns
    GROUP BY ALL),
rtt AS (
    SELECT s.query_id, CAST(avg(r.rtt_ns) AS BIGINT) AS rtt_ns
    FROM statement s JOIN client_rtt r ON r.node = s.node AND r.pid = s.pid
    WHERE coalesce(s.nesting_level, 0) = 0 GROUP BY ALL)
SELECT e.query_id, count(*) AS executions, sum(e.fetches) AS fetches, sum(e.rows) AS rows,
       list(e.rows) AS rows_per_execution,
       CAST(coalesce(any_value(t.ns), 0) / greatest(sum(e.fetches) - count(*), 1) AS BIGINT) AS trip_wait_ns,
       any_value(r.rtt_ns) AS rtt_ns
FROM per_exec e LEFT JOIN trip t USING (query_id) LEFT JOIN rtt r USING (query_id)
WHERE e.fetches > 0
GROUP BY e.query_id;
