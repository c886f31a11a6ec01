-- page_read: the pages a task added to the page cache inside one of its read syscalls (its own
-- context, also for readahead and when blk-throttle dispatches the bios from a kworker), grouped into
-- runs of adjacent pages: one disk read each.
--
-- builds:  page_read
-- inputs:  kernel_event (mm_filemap_add_to_page_cache, the read syscalls' entries and exits);
--          the variable read_syscalls (attribution.READ_SYSCALLS)
-- columns: node, pid, dev, ino (unsigned: GlusterFS's exceed 2^63), sector, nr_bytes, rwbs ('R'), issue_ns,
--          complete_ns (NULL)
CREATE TABLE page_read AS
WITH added AS (
    SELECT node, ts_ns, pid, dev, CAST(regexp_extract(fields, 'ino=(\d+)', 1) AS UBIGINT) AS ino,
           sector, nr_bytes
    FROM kernel_event WHERE event = 'mm_filemap_add_to_page_cache'),
-- a task is in one syscall at a time: when its last read-syscall event is an entry, it is
-- inside that read (the other syscalls' events need not be sorted for the join)
calls AS (
    SELECT node, pid, ts_ns, starts_with(event, 'sys_enter') AS is_enter
    FROM kernel_event WHERE (starts_with(event, 'sys_enter') OR starts_with(event, 'sys_exit'))
                            AND list_contains(getvariable('read_syscalls'), syscall_nr)),
in_read AS (
    SELECT a.*, c.ts_ns AS call_ns FROM added a
    ASOF JOIN calls c ON a.node = c.node AND a.pid = c.pid AND a.ts_ns >= c.ts_ns
    WHERE c.is_enter),
marked AS (
    SELECT *, CASE WHEN lag(call_ns) OVER w = call_ns AND lag(ino) OVER w = ino AND lag(dev) OVER w = dev
                        AND lag(sector + nr_bytes // 512) OVER w = sector THEN 0 ELSE 1 END AS new_run
    FROM in_read WINDOW w AS (PARTITION BY node, pid ORDER BY ts_ns)),
runs AS (SELECT *, sum(new_run) OVER (PARTITION BY node, pid ORDER BY ts_ns) AS run FROM marked)
SELECT node, pid, dev, ino, min(sector) AS sector, sum(nr_bytes) AS nr_bytes, 'R' AS rwbs,
       min(ts_ns) AS issue_ns, NULL::BIGINT AS complete_ns
FROM runs GROUP BY node, pid, dev, ino, run;
