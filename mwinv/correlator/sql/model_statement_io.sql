-- model_statement_io: each statement's I/O as the model reads it (statement_io). On a cluster, a remote
-- statement's network bytes are what its backend sent and received (model_remote_io), and a coordinator
-- statement with remote parts counts no received bytes of its own: they crossed the nodes' links and
-- are counted there. A view: a table of it copied statement_io's rows (1.0 s for a 600 s pgbench
-- capture's 3.26 M, nearly all of it writing them) in every correlation, read or not.
--
-- builds:  model_statement_io
-- inputs:  statement_link, statement_io, model_remote_io
-- columns: statement_io's
CREATE VIEW model_statement_io AS
WITH parents AS (SELECT DISTINCT parent_node AS node, parent_statement_id AS statement_id FROM statement_link)
SELECT i.* REPLACE (
           CASE WHEN sent.statement_id IS NOT NULL THEN sent.rx
                WHEN p.statement_id IS NOT NULL THEN 0 ELSE i.net_rx_bytes END::BIGINT AS net_rx_bytes,
           CASE WHEN sent.statement_id IS NOT NULL THEN sent.tx ELSE i.net_tx_bytes END::BIGINT AS net_tx_bytes)
FROM statement_io i LEFT JOIN model_remote_io sent USING (node, statement_id)
     LEFT JOIN parents p USING (node, statement_id);
