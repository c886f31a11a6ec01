-- advice_node_part: each advised coordinator statement's part on each data node (nodes.py's docstring
-- has why): the remote statements linked to it (statement_link), their execution summed by component
-- on that node, their count, fetches, rows and the bytes the node's backends sent, when its first
-- part began and its last FETCH ended on the coordinator's clock (CLOSE and COMMIT come with the
-- coordinator's end, on all nodes), its idle time between them (not executing: waiting for the
-- coordinator), and the critical node: the one that ended last (ties: the first by name).
--
-- builds:  advice_node_part
-- inputs:  statement_link, statement_clean, statement_text, statement_attribution, kernel_event;
--          the variables advice_ids, net_tx_syscalls
-- scope:   request
-- columns: statement_node_part's (SCHEMAS)
CREATE TABLE advice_node_part AS
WITH r AS (
    SELECT l.parent_statement_id AS sid, l.node, s.statement_id, s.pid, s.start_ns AS node_start,
           s.end_ns AS node_end, s.start_ns - l.offset_ns - p.start_ns AS rel_start,
           s.end_ns - l.offset_ns - p.start_ns AS rel_end, coalesce(s.rows, 0) AS rows,
           coalesce(t.text, '') ILIKE 'FETCH%' AS is_fetch,
           regexp_matches(coalesce(t.text, ''), '^ *(START TRANSACTION|COMMIT|ABORT|ROLLBACK)', 'i') AS xact
    FROM statement_link l JOIN statement_clean s USING (node, statement_id)
    JOIN statement_clean p ON p.node = l.parent_node AND p.statement_id = l.parent_statement_id
    LEFT JOIN (SELECT DISTINCT query_text_hash, text FROM statement_text) t
        ON t.query_text_hash = s.query_text_hash
    WHERE list_contains(getvariable('advice_ids'), l.parent_statement_id)),
a AS (
    SELECT r.sid, r.node,
           coalesce(sum(a.ns) FILTER (WHERE a.component = 'cpu_user'), 0) AS cpu_user_ns,
           coalesce(sum(a.ns) FILTER (WHERE a.component = 'cpu_sys'), 0) AS cpu_sys_ns,
           coalesce(sum(a.ns) FILTER (WHERE a.component = 'disk_seq'), 0) AS disk_seq_ns,
           coalesce(sum(a.ns) FILTER (WHERE a.component = 'disk_random'), 0) AS disk_random_ns,
           coalesce(sum(a.ns) FILTER (WHERE a.component = 'network'), 0) AS network_ns,
           coalesce(sum(a.ns) FILTER (WHERE a.component = 'remote_wait'), 0) AS remote_wait_ns,
           coalesce(sum(a.ns) FILTER (WHERE a.component = 'lock_wait'), 0) AS lock_wait_ns,
           coalesce(sum(a.ns) FILTER (WHERE a.component = 'run_queue'), 0) AS run_queue_ns,
           coalesce(sum(a.ns) FILTER (WHERE a.component = 'other_wait'), 0) AS other_wait_ns,
           coalesce(sum(a.ns) FILTER (WHERE a.component = 'client_wait'), 0) AS client_wait_ns,
           coalesce(sum(a.ns) FILTER (WHERE a.component = 'not_allocated'), 0) AS not_allocated_ns
    FROM r JOIN statement_attribution a USING (node, statement_id) GROUP BY r.sid, r.node),
-- a backend flushes a result when its output buffer fills (8 KiB) and when the message is done,
-- after the FETCH's record ended: its sends are counted from its first to its last part
span AS (SELECT sid, node, pid, min(node_start) AS lo, max(node_end) AS hi FROM r GROUP BY ALL),
io AS (
    SELECT span.sid, span.node, coalesce(sum(k.syscall_ret), 0) AS sent FROM span
    LEFT JOIN kernel_event k ON k.node = span.node AND k.pid = span.pid AND k.ts_ns BETWEEN span.lo AND span.hi
         AND starts_with(k.event, 'sys_exit') AND list_contains(getvariable('net_tx_syscalls'), k.syscall_nr)
         AND k.syscall_ret > 0
    GROUP BY span.sid, span.node),
per_node AS (
    SELECT r.sid AS statement_id, r.node, count(*) AS statements, count(*) FILTER (WHERE is_fetch) AS fetches,
           coalesce(sum(rows), 0) AS rows, coalesce(any_value(io.sent), 0) AS sent_bytes,
           min(rel_start) AS first_start_ns,
           coalesce(max(rel_end) FILTER (WHERE is_fetch), max(rel_end) FILTER (WHERE NOT xact), max(rel_end))
               AS last_end_ns,
           coalesce(any_value(a.cpu_user_ns), 0) AS cpu_user_ns,
           coalesce(any_value(a.cpu_sys_ns), 0) AS cpu_sys_ns,
           coalesce(any_value(a.disk_seq_ns), 0) AS disk_seq_ns,
           coalesce(any_value(a.disk_random_ns), 0) AS disk_random_ns,
           coalesce(any_value(a.network_ns), 0) AS network_ns,
           coalesce(any_value(a.remote_wait_ns), 0) AS remote_wait_ns,
           coalesce(any_value(a.lock_wait_ns), 0) AS lock_wait_ns,
           coalesce(any_value(a.run_queue_ns), 0) AS run_queue_ns,
           coalesce(any_value(a.other_wait_ns), 0) AS other_wait_ns,
           coalesce(any_value(a.client_wait_ns), 0) AS client_wait_ns,
           coalesce(any_value(a.not_allocated_ns), 0) AS not_allocated_ns
    FROM r LEFT JOIN a USING (sid, node) LEFT JOIN io USING (sid, node) GROUP BY r.sid, r.node),
timed AS (
    SELECT *, cpu_user_ns + cpu_sys_ns + disk_seq_ns + disk_random_ns + network_ns + remote_wait_ns + lock_wait_ns
              + run_queue_ns + other_wait_ns + not_allocated_ns AS execution_ns
    FROM per_node)
SELECT statement_id, node, statements, fetches, rows, sent_bytes, execution_ns,
       greatest(0, last_end_ns - first_start_ns - execution_ns) AS idle_ns, first_start_ns, last_end_ns,
       row_number() OVER (PARTITION BY statement_id ORDER BY last_end_ns DESC, node) = 1 AS critical,
       cpu_user_ns, cpu_sys_ns, disk_seq_ns, disk_random_ns, network_ns, remote_wait_ns,
       lock_wait_ns, run_queue_ns, other_wait_ns, client_wait_ns, not_allocated_ns
FROM timed;
