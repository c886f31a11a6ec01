-- client_rtt: each traced server process's network round trip to its client. Measured where a kernel
-- capture of the database host sampled the process's connections (tcp_sample): the least round trip
-- the kernel measured on the connections it accepted, the handshake's included (the smoothed round
-- trip is no measure here: the client acknowledges a result with its next call, so each sample holds
-- its think time, up to the delayed-ACK timer). The round trip given (`--rtt`, the variable
-- client_rtt_ns) is taken instead where there is one.
--
-- inputs:  dbms_wait, tcp_sample; the variable client_rtt_ns
-- columns: node, pid, rtt_ns, source ('given' | 'kernel'; NULL: unknown)
CREATE OR REPLACE TABLE client_rtt AS
WITH measured AS (
    SELECT node, pid, min(min_rtt_ns) AS rtt_ns FROM tcp_sample WHERE accepted AND min_rtt_ns > 0 GROUP BY ALL)
SELECT s.node, s.pid, coalesce(getvariable('client_rtt_ns'), m.rtt_ns) AS rtt_ns,
       CASE WHEN getvariable('client_rtt_ns') IS NOT NULL THEN 'given'
            WHEN m.rtt_ns IS NOT NULL THEN 'kernel' END AS source
FROM (SELECT DISTINCT node, pid FROM dbms_wait) s LEFT JOIN measured m USING (node, pid);
