-- advice_statement_io: each example's requests and network bytes, its executions' summed, and its
-- workers' and remote parts' as they are.
--
-- builds:  advice_statement_io
-- inputs:  statement_io, advice_member, advice_statement
-- scope:   request
-- columns: statement_io's
CREATE TABLE advice_statement_io AS
SELECT i.node, m.key AS statement_id, sum(seq_bytes)::BIGINT AS seq_bytes, sum(seq_reqs)::BIGINT AS seq_reqs,
       sum(random_reqs)::BIGINT AS random_reqs, sum(random_bytes)::BIGINT AS random_bytes,
       sum(net_rx_bytes)::BIGINT AS net_rx_bytes, sum(net_tx_bytes)::BIGINT AS net_tx_bytes
FROM statement_io i JOIN advice_member m USING (statement_id) GROUP BY i.node, m.key
UNION ALL BY NAME
SELECT i.* FROM statement_io i JOIN advice_statement s USING (statement_id)
WHERE s.parent_statement_id IN (SELECT key FROM advice_member);
