-- file_read: positional reads (pread64/preadv) with a sequential flag from the file-offset stride per
-- (pid, fd): decides seq vs random for disk waits whose block requests are not the task's own.
--
-- builds:  file_read
-- inputs:  kernel_event (sys_enter_pread64, sys_enter_preadv: fd=, pos=, count= or vlen=);
--          the variable seq_gap_sectors
-- columns: node, pid, ts_ns, syscall_nr, sequential
CREATE TABLE file_read AS
WITH r AS (
    -- the fields by name ("fd=9 buf=... count=8192 pos=24576"): splitting is 2.5x faster than a regexp
    SELECT node, pid, ts_ns, syscall_nr,
           TRY_CAST(split_part(split_part(' ' || fields, ' fd=', 2), ' ', 1) AS BIGINT) AS fd,
           TRY_CAST(split_part(split_part(' ' || fields, ' pos=', 2), ' ', 1) AS BIGINT) AS pos,
           coalesce(TRY_CAST(split_part(split_part(' ' || fields, ' count=', 2), ' ', 1) AS BIGINT),
                    TRY_CAST(split_part(split_part(' ' || fields, ' vlen=', 2), ' ', 1) AS BIGINT), 8192) AS len
    FROM kernel_event WHERE event IN ('sys_enter_pread64', 'sys_enter_preadv'))
SELECT node, pid, ts_ns, syscall_nr,
       coalesce(abs(pos - lag(pos + len) OVER (PARTITION BY node, pid, fd ORDER BY ts_ns))
                <= getvariable('seq_gap_sectors') * 512, false) AS sequential
FROM r WHERE pos IS NOT NULL;
