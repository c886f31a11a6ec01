-- seg_io_part: one time slice's model inputs per statement from the segment walk's codes: its own block
-- requests (sequential bytes and requests, random requests and bytes) and the bytes its network
-- syscalls moved. A statement with none has no row (statement_io's zeros): outside the windows of a
-- duty-cycled capture, most; 60 M of them made seg_io's join and sort run out of DuckDB's 768 MiB.
--
-- builds:  seg_io_part
-- inputs:  segment_code; the variables segment_codes, net_rx_syscalls, net_tx_syscalls
-- slice:   pid
-- columns: node (its dbms_node code), statement_id, seq_bytes, seq_reqs, random_reqs, random_bytes,
--          net_rx_bytes, net_tx_bytes
CREATE TABLE seg_io_part AS
WITH c AS (SELECT getvariable('segment_codes').kind AS k)
SELECT node, sid AS statement_id,
       coalesce(sum(ret) FILTER (WHERE kind = k.io_start AND nr = 1), 0)::BIGINT AS seq_bytes,
       count(*) FILTER (WHERE kind = k.io_start AND nr = 1)::BIGINT AS seq_reqs,
       count(*) FILTER (WHERE kind = k.io_start AND nr = 2)::BIGINT AS random_reqs,
       coalesce(sum(ret) FILTER (WHERE kind = k.io_start AND nr = 2), 0)::BIGINT AS random_bytes,
       coalesce(sum(ret) FILTER (WHERE kind = k.exit AND list_contains(getvariable('net_rx_syscalls'), nr)
                                       AND ret > 0), 0)::BIGINT AS net_rx_bytes,
       coalesce(sum(ret) FILTER (WHERE kind = k.exit AND list_contains(getvariable('net_tx_syscalls'), nr)
                                       AND ret > 0), 0)::BIGINT AS net_tx_bytes
-- only the rows a sum counts go to the grouping: its six filters over every segment took 2.8 of the
-- 600 s capture's walk's 30 s, on the walk's critical path
FROM segment_code, c WHERE (kind = k.io_start OR (kind = k.exit AND ret > 0)) GROUP BY ALL
HAVING seq_reqs > 0 OR random_reqs > 0 OR net_rx_bytes > 0 OR net_tx_bytes > 0;
