-- model_remote_io: per remote statement of a cluster (statement_link) the network bytes its backend sent
-- (tx) and received (rx) until its next statement began (a FETCH's result is flushed after its record
-- ends), from a scan of the kernel events; no rows without links. model_statement_io reads it.
--
-- builds:  model_remote_io
-- inputs:  statement_clean, statement_link, kernel_event; the variables net_tx_syscalls, net_rx_syscalls
-- columns: node, statement_id, tx, rx
CREATE TABLE model_remote_io AS
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
    GROUP BY ALL)
SELECT * FROM sent;
