-- statement_thread: the OS thread that ran a statement, where its record names its connection's socket
-- (statement_stat socket_fd): the thread of the server that last read from that socket before the
-- statement began (its clock mapping's error allowed, never after its end). A pool of threads serving
-- connections (MariaDB's thread pool) moves a connection between workers, and performance_schema's
-- THREAD_OS_ID names only the worker it last ran on; with a thread per connection both agree.
--
-- builds:  statement_thread
-- inputs:  statement_typed, statement_stat, kernel_event (sys_enter of the read syscalls: fd=);
--          the variable thread_slack_ns
-- columns: node, statement_id, pid
CREATE TABLE statement_thread AS
WITH sock AS (
    SELECT s.node, s.statement_id, t.value AS fd,
           least(s.start_ns + getvariable('thread_slack_ns'), s.end_ns) AS bound
    FROM statement_typed s JOIN statement_stat t USING (node, statement_id)
    WHERE t.name = 'socket_fd' AND s.start_ns IS NOT NULL AND s.end_ns IS NOT NULL),
reads AS (
    SELECT node, pid, ts_ns, TRY_CAST(regexp_extract(fields, '(?:^| )fd=(\d+)', 1) AS BIGINT) AS fd
    FROM kernel_event
    WHERE event IN ('sys_enter_recvfrom', 'sys_enter_read', 'sys_enter_recvmsg', 'sys_enter_readv'))
SELECT sock.node, sock.statement_id, reads.pid
FROM sock ASOF JOIN reads ON reads.node = sock.node AND reads.fd = sock.fd AND reads.ts_ns <= sock.bound;
