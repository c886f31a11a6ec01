-- statement_blocker: for each single execution of a model's inputs, who held the lock it waited for
-- (advice.blocking_statement words it): the backend that woke it last (sched_waking, in the waker's
-- context; else sched_wakeup, whose pid is the waker's only when both ran on one CPU; wake-ups from
-- other contexts, pid 0: interrupts, timers such as deadlock_timeout's, are not lock releases), with
-- that backend's last statement begun before the wait (it took the lock, or an earlier one of its
-- transaction did) and the last begun during it up to the wake-up (COMMIT, ROLLBACK: PostgreSQL
-- releases the locks just after the statement's own end); and the statement of another backend that
-- began before and, of those, ended last (what is said without a wake-up). A statement is a struct of
-- statement_id, query_id, query_text_hash, pid. Ties go to the first by statement_id.
-- A table macro over a model's inputs, read as query_table(inputs || '_statement') etc.: inputs 'model'
-- (the capture's: model_statement, ...) or 'advice' (the advice's examples: advice_statement, ...).
--
-- builds:  statement_blocker
-- inputs:  model_statement, model_lock_wakeup; the variable blocker_lookback_ns
-- columns: statement_id, waker_pid, waker_ns, taken_by, released_with, overlapping
CREATE MACRO statement_blocker(inputs) AS TABLE
WITH st AS (SELECT * FROM query_table(inputs || '_statement')),
waiter AS (SELECT statement_id, node, pid, start_ns, end_ns FROM st WHERE coalesce(executions, 1) = 1),
others AS (
    SELECT w.statement_id AS waiter_id, o.statement_id, o.query_id, o.query_text_hash, o.pid, o.start_ns, o.end_ns
    FROM waiter w JOIN st o ON o.node = w.node AND o.pid <> w.pid AND o.start_ns < w.end_ns
         AND o.end_ns > w.start_ns - getvariable('blocker_lookback_ns')),
wakes AS (
    SELECT w.statement_id AS waiter_id, arg_max(k.pid, k.ts_ns) AS waker_pid, max(k.ts_ns) AS waker_ns
    FROM waiter w JOIN query_table(inputs || '_lock_wakeup') k
         ON k.node = w.node AND k.target_pid = w.pid AND k.ts_ns BETWEEN w.start_ns AND w.end_ns
    WHERE (k.event LIKE '%sched_waking' OR k.event LIKE '%sched_wakeup')
      AND k.pid IN (SELECT o.pid FROM st o WHERE o.node = w.node AND o.pid <> w.pid)
    GROUP BY w.statement_id),
named AS (
    SELECT *, {'statement_id': statement_id, 'query_id': query_id, 'query_text_hash': query_text_hash,
               'pid': pid} AS s
    FROM others)
SELECT w.statement_id, k.waker_pid, k.waker_ns,
       (SELECT arg_max(n.s, (n.start_ns, -n.statement_id)) FROM named n WHERE n.waiter_id = w.statement_id
        AND n.pid = k.waker_pid AND n.start_ns <= w.start_ns) AS taken_by,
       (SELECT arg_max(n.s, (n.start_ns, -n.statement_id)) FROM named n WHERE n.waiter_id = w.statement_id
        AND n.pid = k.waker_pid AND n.start_ns > w.start_ns AND n.start_ns <= k.waker_ns) AS released_with,
       (SELECT arg_max(n.s, (n.end_ns, -n.statement_id)) FROM named n WHERE n.waiter_id = w.statement_id
        AND n.start_ns <= w.start_ns) AS overlapping
FROM waiter w LEFT JOIN wakes k ON k.waiter_id = w.statement_id;
