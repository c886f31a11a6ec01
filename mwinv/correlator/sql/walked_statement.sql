-- walked_statement: the top-level statements whose boundaries are points of the segment walk
-- (sql/point.sql), ordered by start: those a trace window of their node overlaps, or that hold a kernel
-- point outside every window which their sums count (a syscall's exit: network bytes; a request's
-- start: seg_io_part), as at a window's opening and closing. Another statement has nothing the walk
-- could give it: no such point lies within it and its pid's state there is unknown (segment_walk); its
-- time comes from its rusage (slice_statement). In a duty-cycled capture ~93 % of the statements are
-- such, and walking their boundaries took most of the walk's time.
-- A statement shorter than 100 ms overlaps a span only in its start's or its end's 100 ms bucket: the
-- buckets' hash joins leave the ASOF join (the last span from before its end) a few candidates (on
-- 11.3 M statements: 0.4 s; the ASOF join of them all, 2.6 s; a range join of them all did not end).
--
-- builds:  walked_statement
-- inputs:  statement_clean, traced_window, kernel_event, disk_request
-- columns: node, pid, statement_id, start_ns, end_ns
CREATE TABLE walked_statement AS
WITH span AS (
    SELECT node, lo, hi FROM traced_window
    UNION ALL
    SELECT p.node, p.ts, p.ts FROM (
        SELECT node, ts_ns AS ts FROM kernel_event WHERE event = 'sys_exit' OR event LIKE 'sys\_exit\_%' ESCAPE '\'
        UNION ALL
        SELECT node, issue_ns FROM disk_request) p
    ASOF LEFT JOIN traced_window w ON w.node = p.node AND p.ts >= w.lo
    WHERE w.hi IS NULL OR p.ts > w.hi),
bucket AS (SELECT DISTINCT node, unnest(range(lo // 100000000, hi // 100000000 + 1)) AS b FROM span),
candidate AS (
    SELECT node, pid, statement_id, start_ns, end_ns FROM statement_clean
    WHERE coalesce(nesting_level, 0) = 0 AND (end_ns - start_ns >= 100000000
        OR (node, start_ns // 100000000) IN (SELECT (node, b) FROM bucket)
        OR (node, end_ns // 100000000) IN (SELECT (node, b) FROM bucket)))
SELECT s.node, s.pid, s.statement_id, s.start_ns, s.end_ns
FROM candidate s ASOF JOIN span w ON w.node = s.node AND s.end_ns >= w.lo
WHERE w.hi >= s.start_ns
ORDER BY s.start_ns;
