-- statement_trip: per execution, its client round trips (client_trip) priced as its node's trips are
-- (trip_cost): what the fetch what-if of a query (fetch_trips) and of an advised statement (the advice's
-- DBMS evidence) sum.
--
-- inputs:  client_trip, trip_cost
-- columns: node, statement_id, trips, cost_ns (their sum), bytes (their sum), base_ns (the node's, at
--          least 0), ns_per_byte (the node's; NULL: not measurable)
CREATE OR REPLACE TABLE statement_trip AS
SELECT t.node, t.statement_id, count(*) AS trips, sum(t.cost_ns) AS cost_ns, sum(t.bytes) AS bytes,
       any_value(greatest(k.base_ns, 0)) AS base_ns, any_value(k.ns_per_byte) AS ns_per_byte
FROM client_trip t JOIN trip_cost k USING (node) GROUP BY t.node, t.statement_id;
