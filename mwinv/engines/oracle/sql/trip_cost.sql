-- trip_cost: per node, what a client round trip costs as it grows with the bytes it carries: the least
-- squares line cost_ns = base_ns + ns_per_byte x bytes over the node's client_trip rows. The base is
-- what a trip costs whatever it carries (the network round trip and the client's fixed work per call):
-- the part a larger fetch array saves. The per-byte part (sending the rows and the client's work on
-- them) stays, as the same bytes still flow. Where the trips' bytes do not vary (a trace whose replies
-- all fit one packet) there is no slope: ns_per_byte is NULL and the base is their mean cost.
--
-- inputs:  client_trip
-- columns: node, trips, bytes (their sum), cost_ns (their sum), base_ns, ns_per_byte (NULL: not
--          measurable), r2 (the share of the cost's variance the line explains; NULL without a slope)
CREATE OR REPLACE TABLE trip_cost AS
SELECT node, count(*) AS trips, sum(bytes) AS bytes, sum(cost_ns) AS cost_ns,
       CAST(CASE WHEN var_pop(bytes) > 0 THEN regr_intercept(cost_ns, bytes) ELSE avg(cost_ns) END AS BIGINT) AS base_ns,
       CASE WHEN var_pop(bytes) > 0 THEN regr_slope(cost_ns, bytes) END AS ns_per_byte,
       CASE WHEN var_pop(bytes) > 0 THEN regr_r2(cost_ns, bytes) END AS r2
FROM client_trip GROUP BY node;
