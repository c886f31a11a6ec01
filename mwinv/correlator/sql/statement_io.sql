-- statement_io: the model's inputs per statement: its own block requests and the bytes its network
-- syscalls moved (seg_io). A row for each statement the trace saw I/O of, or that a trace window
-- covers whole (traced: its zeros are measured); none for the others, whose I/O no trace saw (readers
-- sum it as zero): in a duty-cycled capture ~93 % of the statements, where their zero rows were
-- 11.1 M of a 120 s capture's 11.25 M. Over the statements' range at once: its join holds the rows of
-- seg_io (DuckDB spills them past its limit), nothing per statement of slice_statement it streams (a
-- 600 s capture's 3.26 M rows: 1.4-1.8 s, against 2.7 s in its 19 statement slices).
--
-- builds:  statement_io
-- inputs:  slice_statement, seg_io, in_slice; the variables slice_lo, slice_hi
-- slice:   range
-- columns: node, statement_id, seq_bytes, seq_reqs, random_reqs, random_bytes, net_rx_bytes, net_tx_bytes
CREATE TABLE statement_io AS
SELECT s.node, s.statement_id, coalesce(seq_bytes, 0) AS seq_bytes, coalesce(seq_reqs, 0) AS seq_reqs,
       coalesce(random_reqs, 0) AS random_reqs, coalesce(random_bytes, 0) AS random_bytes,
       coalesce(net_rx_bytes, 0) AS net_rx_bytes, coalesce(net_tx_bytes, 0) AS net_tx_bytes
FROM slice_statement s LEFT JOIN (SELECT * FROM seg_io WHERE in_slice(key_ns)) i USING (node, statement_id)
WHERE in_slice(s.key_ns) AND (s.traced OR i.statement_id IS NOT NULL);
