-- seg_io: per statement its own block requests and network bytes (the sum over the time slices), with
-- the statement's slice key (slice_statement) and ordered by it: statement_io and summed_statement read
-- it one statement slice at a time.
--
-- builds:  seg_io
-- inputs:  seg_io_part, dbms_node, slice_statement
-- columns: key_ns, node, statement_id, seq_bytes, seq_reqs, random_reqs, random_bytes, net_rx_bytes,
--          net_tx_bytes
CREATE TABLE seg_io AS
SELECT s.key_ns, i.* FROM (
    SELECT n.node, p.statement_id, sum(seq_bytes)::BIGINT AS seq_bytes, sum(seq_reqs)::BIGINT AS seq_reqs,
           sum(random_reqs)::BIGINT AS random_reqs, sum(random_bytes)::BIGINT AS random_bytes,
           sum(net_rx_bytes)::BIGINT AS net_rx_bytes, sum(net_tx_bytes)::BIGINT AS net_tx_bytes
    FROM seg_io_part p JOIN dbms_node n ON n.code = p.node GROUP BY ALL) i
JOIN slice_statement s USING (node, statement_id)
ORDER BY s.key_ns;
