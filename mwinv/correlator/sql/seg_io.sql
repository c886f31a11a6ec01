-- seg_io: per statement its own block requests and network bytes (the sum over the time slices).
--
-- builds:  seg_io
-- inputs:  seg_io_part, dbms_node
-- columns: node, statement_id, seq_bytes, seq_reqs, random_reqs, random_bytes, net_rx_bytes, net_tx_bytes
CREATE TABLE seg_io AS
SELECT n.node, p.statement_id, sum(seq_bytes)::BIGINT AS seq_bytes, sum(seq_reqs)::BIGINT AS seq_reqs,
       sum(random_reqs)::BIGINT AS random_reqs, sum(random_bytes)::BIGINT AS random_bytes,
       sum(net_rx_bytes)::BIGINT AS net_rx_bytes, sum(net_tx_bytes)::BIGINT AS net_tx_bytes
FROM seg_io_part p JOIN dbms_node n ON n.code = p.node GROUP BY ALL;
