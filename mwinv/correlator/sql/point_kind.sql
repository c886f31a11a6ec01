-- point_kind: what the segment walk makes of a kernel event (attribution.py's module docstring), as two
-- scalar macros: event_kind(event), its kind of point ('switch' gives two: the task switched out, 'off',
-- and the one switched in, 'on'; NULL: it changes no task's state), and point_ord(kind), the order of
-- points of one pid at one instant. kernel_points.py reads every row group's event names through
-- them; derived_point.sql orders its points by point_ord.
--
-- builds:  event_kind, point_ord
-- inputs:  (none)
-- columns: (scalar macros: VARCHAR, INTEGER)
CREATE MACRO event_kind(event) AS
    CASE WHEN event = 'sched_switch' THEN 'switch'
         WHEN event IN ('sched_wakeup', 'sched_wakeup_new') THEN 'wake'
         -- positional reads come with their access pattern from file_read (derived_point.sql)
         WHEN event IN ('sys_enter_pread64', 'sys_enter_preadv') THEN NULL
         WHEN event = 'sys_enter' OR event LIKE 'sys\_enter\_%' ESCAPE '\' THEN 'enter'
         WHEN event = 'sys_exit' OR event LIKE 'sys\_exit\_%' ESCAPE '\' THEN 'exit'
         -- heavyweight and LWLock waits apart: the deadlock check a heavyweight wait runs
         -- after deadlock_timeout can wait for an LWLock, whose end is not the row lock's
         WHEN starts_with(event, 'pg_lock_wait_start') THEN 'lock_start'
         WHEN starts_with(event, 'pg_lock_wait_done') THEN 'lock_done'
         WHEN starts_with(event, 'pg_lwlock_wait_start') THEN 'lwlock_start'
         WHEN starts_with(event, 'pg_lwlock_wait_done') THEN 'lwlock_done'
    END;
-- at one instant: a statement's end, then its start, what ends (exits, done waits, completions), the
-- switch out, the switch in, wakeups, what begins (entries, waits, requests), a trace window's end
CREATE MACRO point_ord(kind) AS
    CASE kind WHEN 'stmt_end' THEN -2 WHEN 'stmt_start' THEN -1 WHEN 'off' THEN 1 WHEN 'on' THEN 2
              WHEN 'wake' THEN 3 WHEN 'enter' THEN 4 WHEN 'lock_start' THEN 5 WHEN 'lwlock_start' THEN 5
              WHEN 'io_start' THEN 6 WHEN 'gap' THEN 9 ELSE 0 END;
