-- advice_lock_wakeup: the wake-ups of the pids whose statements waited for a lock (they name the
-- blocker: statement_blocker).
--
-- builds:  advice_lock_wakeup
-- inputs:  kernel_event, advice_statement, advice_attribution
-- scope:   request
-- columns: kernel_event's
CREATE TABLE advice_lock_wakeup AS
SELECT k.* FROM kernel_event k
WHERE (k.event LIKE '%sched_waking' OR k.event LIKE '%sched_wakeup') AND k.target_pid IN (
    SELECT s.pid FROM advice_statement s JOIN advice_attribution a USING (statement_id)
    WHERE a.component = 'lock_wait' AND a.ns > 0);
