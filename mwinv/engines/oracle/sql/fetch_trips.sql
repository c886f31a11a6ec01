-- fetch_trips: per query id, the client round trips its executions made (FETCH calls), the bytes they
-- carried and what a trip costs: the inputs of the fetch array size what-if. A larger array makes fewer
-- trips that carry the same bytes, so what it saves is each trip's base cost (trip_cost), not the
-- per-byte part. The base is at most the query's own mean cost per trip.
--
-- inputs:  statement, dbms_call, statement_trip, client_rtt
-- columns: query_id, executions, fetches, rows, rows_per_execution (array of per-execution row counts),
--          trips (its client_trip rows), bytes (theirs), trip_wait_ns (their mean cost: SQL*Net waits to
--          and from the client per trip), base_ns (its node's trip_cost base, at most trip_wait_ns),
--          ns_per_byte (its node's; NULL: not measurable), rtt_ns (the sessions' mean network round trip,
--          NULL: unknown)
CREATE OR REPLACE TABLE fetch_trips AS
WITH per_exec AS (
    SELECT s.query_id, c.statement_id, count(*) FILTER (WHERE c.call = 'FETCH') AS fetches,
           sum(c.r) FILTER (WHERE c.call = 'FETCH') AS rows
    FROM dbms_call c JOIN statement s ON s.node = c.node AND s.statement_id = c.statement_id
    WHERE coalesce(s.nesting_level, 0) = 0 GROUP BY ALL),
trip AS (  -- the node's figures weighed by the trips
    SELECT s.query_id, sum(t.trips) AS trips, sum(t.bytes) AS bytes, CAST(sum(t.cost_ns) / sum(t.trips) AS BIGINT) AS trip_wait_ns,
           sum(t.base_ns * t.trips) / sum(t.trips) AS base_ns, sum(t.ns_per_byte * t.trips) / sum(t.trips) FILTER (WHERE t.ns_per_byte IS NOT NULL) AS ns_per_byte
    FROM statement_trip t JOIN statement s ON s.node = t.node AND s.statement_id = t.statement_id
    GROUP BY ALL),
rtt AS (
    SELECT s.query_id, CAST(avg(r.rtt_ns) AS BIGINT) AS rtt_ns
    FROM statement s JOIN client_rtt r ON r.node = s.node AND r.pid = s.pid
    WHERE coalesce(s.nesting_level, 0) = 0 GROUP BY ALL)
SELECT e.query_id, count(*) AS executions, sum(e.fetches) AS fetches, sum(e.rows) AS rows,
       list(e.rows) AS rows_per_execution, coalesce(any_value(t.trips), 0) AS trips,
       coalesce(any_value(t.bytes), 0) AS bytes, coalesce(any_value(t.trip_wait_ns), 0) AS trip_wait_ns,
       CAST(least(coalesce(any_value(t.base_ns), 0), coalesce(any_value(t.trip_wait_ns), 0)) AS BIGINT) AS base_ns,
       any_value(t.ns_per_byte) AS ns_per_byte, any_value(r.rtt_ns) AS rtt_ns
FROM per_exec e LEFT JOIN trip t USING (query_id) LEFT JOIN rtt r USING (query_id)
WHERE e.fetches > 0
GROUP BY e.query_id;
