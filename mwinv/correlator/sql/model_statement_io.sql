-- model_statement_io: each statement's I/O as the model reads it (statement_io). On a cluster, a remote
-- statement's network bytes are what its backend sent and received until its next statement began (a
-- FETCH's result is flushed after its record ends), and a coordinator statement with remote parts
-- counts no received bytes of its own: they crossed the nodes' links and are counted there. A table:
-- the remote bytes come from a scan of the kernel events.
--
-- builds:  model_statement_io
-- inputs:  statement_clean, statement_link, statement_io, kernel_event; the variables net_tx_syscalls,
--          net_rx_syscalls
-- columns: statement_io's
CREATE TABLE model_statement_io AS
WITH remote AS (
    SELECT s.node, s.statement_id, s.pid, s.start_ns,
           coalesce(lead(s.start_ns) OVER (PARTITION BY s.node, s.pid ORDER BY s.start_ns), s.end_ns) AS until
    FROM statement_clean s JOIN statement_link l USING (node, statement_id)),
-- each send or receive to the remote statement begun last before it on its pid (they do not
-- overlap): an ASOF join, where a range join on the pid compared every statement with every
-- event of its backend (a data node's thousands of FETCHes at SF 1: over ten minutes a cell)
io AS (
    SELECT r.node, r.statement_id, k.syscall_nr, k.syscall_ret
    FROM (SELECT node, pid, ts_ns, syscall_nr, syscall_ret FROM kernel_event
          WHERE EXISTS (SELECT 1 FROM statement_link) AND starts_with(event, 'sys_exit') AND syscall_ret > 0
            AND (list_contains(getvariable('net_tx_syscalls'), syscall_nr)
                 OR list_contains(getvariable('net_rx_syscalls'), syscall_nr))) k
    ASOF JOIN remote r ON k.node = r.node AND k.pid = r.pid AND k.ts_ns >= r.start_ns
    WHERE k.ts_ns < r.until),
sent AS (
    SELECT r.node, r.statement_id,
           coalesce(sum(k.syscall_ret) FILTER (WHERE list_contains(getvariable('net_tx_syscalls'), k.syscall_nr)), 0) AS tx,
           coalesce(sum(k.syscall_ret) FILTER (WHERE list_contains(getvariable('net_rx_syscalls'), k.syscall_nr)), 0) AS rx
    FROM remote r LEFT JOIN io k USING (node, statement_id)
    GROUP BY ALL),
parents AS (SELECT DISTINCT parent_node AS node, parent_statement_id AS statement_id FROM statement_link)
SELECT i.* REPLACE (
           CASE WHEN sent.statement_id IS NOT NULL THEN sent.rx
                WHEN p.statement_id IS NOT NULL THEN 0 ELSE i.net_rx_bytes END::BIGINT AS net_rx_bytes,
           CASE WHEN sent.statement_id IS NOT NULL THEN sent.tx ELSE i.net_tx_bytes END::BIGINT AS net_tx_bytes)
FROM statement_io i LEFT JOIN sent USING (node, statement_id) LEFT JOIN parents p USING (node, statement_id);
