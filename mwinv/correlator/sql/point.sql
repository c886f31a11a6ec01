-- point: the state-changing points of every DBMS pid (attribution.py's module docstring): the kernel's
-- from one scan of kernel_event (a sched_switch gives two: the task switched out and the one switched
-- in), positional reads with their access pattern, disk requests issued and completed, the boundaries
-- of the statements the walk can tell anything of (walked_statement), and per pid a 'gap' at each trace
-- window's end (after its points at that instant): what the trace showed of a task's state holds up to
-- there, not across the stretch no window covers. A view: the segment walk reads it one time slice at
-- a time, sorted; a table of it would be one more copy.
--
-- builds:  point
-- inputs:  kernel_event, file_read, disk_request, walked_statement, dbms_pid, traced_window
-- columns: node, pid, ts, ord (order of points at one instant), kind (attribution.POINT_KINDS), info,
--          stack_id, nr, ret, sid (statement id), io_seq, io_rand (in-flight request count changes)
CREATE VIEW point AS
WITH ev AS (
    SELECT node, ts_ns, pid, prev_pid, prev_state, next_pid, target_pid, stack_id, syscall_nr, syscall_ret,
        CASE WHEN event = 'sched_switch' THEN 'switch'
             WHEN event IN ('sched_wakeup', 'sched_wakeup_new') THEN 'wake'
             -- positional reads come with their access pattern from file_read (below)
             WHEN event IN ('sys_enter_pread64', 'sys_enter_preadv') THEN NULL
             WHEN event = 'sys_enter' OR event LIKE 'sys\_enter\_%' ESCAPE '\' THEN 'enter'
             WHEN event = 'sys_exit' OR event LIKE 'sys\_exit\_%' ESCAPE '\' THEN 'exit'
             -- heavyweight and LWLock waits apart: the deadlock check a heavyweight wait runs
             -- after deadlock_timeout can wait for an LWLock, whose end is not the row lock's
             WHEN starts_with(event, 'pg_lock_wait_start') THEN 'lock_start'
             WHEN starts_with(event, 'pg_lock_wait_done') THEN 'lock_done'
             WHEN starts_with(event, 'pg_lwlock_wait_start') THEN 'lwlock_start'
             WHEN starts_with(event, 'pg_lwlock_wait_done') THEN 'lwlock_done'
        END AS k
    FROM kernel_event),
kernel_point AS (
    SELECT node,
           CASE WHEN half = 2 THEN next_pid WHEN k = 'switch' THEN prev_pid WHEN k = 'wake' THEN target_pid
                ELSE pid END AS pid,
           ts_ns AS ts,
           CASE WHEN half = 2 THEN 2 ELSE CASE k WHEN 'switch' THEN 1 WHEN 'wake' THEN 3 WHEN 'enter' THEN 4
                                                 WHEN 'lock_start' THEN 5 WHEN 'lwlock_start' THEN 5
                                                 ELSE 0 END END AS ord,
           CASE WHEN half = 2 THEN 'on' WHEN k = 'switch' THEN 'off' ELSE k END AS kind,
           CASE WHEN half = 1 AND k = 'switch' THEN prev_state END AS info,
           CASE WHEN half = 1 AND k = 'switch' THEN stack_id END AS stack_id,
           CASE WHEN k IN ('enter', 'exit') THEN syscall_nr END AS nr,
           CASE WHEN k = 'exit' THEN syscall_ret END AS ret
    FROM ev, range(1, 3) AS h(half)
    WHERE k IS NOT NULL AND (half = 1 OR k = 'switch'))
SELECT p.* FROM (
    SELECT node, pid, ts, ord, kind, info, stack_id, nr, ret, NULL::BIGINT AS sid, 0 AS io_seq, 0 AS io_rand
    FROM kernel_point
    UNION ALL
    SELECT node, pid, ts_ns, 4, 'enter', CASE WHEN sequential THEN 'seq' ELSE 'rand' END, NULL, syscall_nr,
           NULL, NULL, 0, 0
    FROM file_read
    UNION ALL
    -- nr: 1 sequential, 2 random; in-flight counts only for requests whose completion is known
    SELECT node, pid, issue_ns, 6, 'io_start', NULL, NULL, CASE WHEN sequential THEN 1 ELSE 2 END,
           nr_bytes, NULL,
           CASE WHEN sequential AND complete_ns IS NOT NULL THEN 1 ELSE 0 END,
           CASE WHEN NOT sequential AND complete_ns IS NOT NULL THEN 1 ELSE 0 END
    FROM disk_request
    UNION ALL
    SELECT node, pid, complete_ns, 0, 'io_done', NULL, NULL, NULL, NULL, NULL,
           CASE WHEN sequential THEN -1 ELSE 0 END, CASE WHEN sequential THEN 0 ELSE -1 END
    FROM disk_request WHERE complete_ns IS NOT NULL
    UNION ALL
    SELECT node, pid, start_ns, -1, 'stmt_start', NULL, NULL, NULL, NULL, statement_id, 0, 0
    FROM walked_statement
    UNION ALL
    SELECT node, pid, end_ns, -2, 'stmt_end', NULL, NULL, NULL, NULL, statement_id, 0, 0
    FROM walked_statement
    UNION ALL
    SELECT node, pid, hi, 9, 'gap', NULL, NULL, NULL, NULL, NULL, 0, 0
    FROM traced_window JOIN dbms_pid USING (node)
) p JOIN dbms_pid USING (node, pid);
