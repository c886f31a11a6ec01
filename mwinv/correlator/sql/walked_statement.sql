-- walked_statement: the top-level statements whose boundaries are points of the segment walk
-- (sql/derived_point.sql), ordered by start: those a trace window of their node overlaps, or that hold
-- a kernel point outside every window which their sums count (a syscall's exit: network bytes; a request's
-- start: seg_io_part), as at a window's opening and closing. Another statement has nothing the walk
-- could give it: no such point lies within it and its pid's state there is unknown (segment_walk); its
-- time comes from its rusage (slice_statement). In a duty-cycled capture ~93 % of the statements are
-- such, and walking their boundaries took most of the walk's time.
-- A statement shorter than 100 ms overlaps a span only in its start's or its end's 100 ms bucket, and a
-- syscall's exit lies in a window only in one of the window's buckets: semi and anti joins on the
-- buckets, the ranges their condition (on a 600 s capture, 23 M statements and 7.3 M exits: 3.3 s, where
-- ASOF joins of the exits with the windows and of the statements with the spans took 5.2 s; a range
-- join of them all did not end). A node's windows are disjoint (its recorder's, one after another), so no
-- span overlaps another and a longer statement (few) takes the last span from before its end (an ASOF join).
--
-- builds:  walked_statement
-- inputs:  statement_clean, traced_window, kernel_event, disk_request
-- columns: node, pid, statement_id, start_ns, end_ns
CREATE TABLE walked_statement AS
WITH window_bucket AS (SELECT node, lo, hi, unnest(range(lo // 100000000, hi // 100000000 + 1)) AS b FROM traced_window),
span AS (
    SELECT node, lo, hi FROM traced_window
    UNION ALL
    SELECT p.node, p.ts, p.ts FROM (
        SELECT node, ts_ns AS ts FROM kernel_event WHERE event = 'sys_exit' OR event LIKE 'sys\_exit\_%' ESCAPE '\'
        UNION ALL
        SELECT node, issue_ns FROM disk_request) p
    ANTI JOIN window_bucket w ON w.node = p.node AND w.b = p.ts // 100000000 AND p.ts BETWEEN w.lo AND w.hi),
bucket AS (SELECT node, lo, hi, unnest(range(lo // 100000000, hi // 100000000 + 1)) AS b FROM span)
SELECT * FROM (
    -- a span in its start's bucket
    SELECT s.node, s.pid, s.statement_id, s.start_ns, s.end_ns FROM statement_clean s
    SEMI JOIN bucket w ON w.node = s.node AND w.b = s.start_ns // 100000000 AND w.lo <= s.end_ns AND w.hi >= s.start_ns
    WHERE coalesce(s.nesting_level, 0) = 0 AND s.end_ns - s.start_ns < 100000000
    UNION ALL
    -- else in its end's, another
    SELECT s.node, s.pid, s.statement_id, s.start_ns, s.end_ns FROM statement_clean s
    SEMI JOIN bucket w ON w.node = s.node AND w.b = s.end_ns // 100000000 AND w.lo <= s.end_ns AND w.hi >= s.start_ns
    ANTI JOIN bucket v ON v.node = s.node AND v.b = s.start_ns // 100000000 AND v.lo <= s.end_ns AND v.hi >= s.start_ns
    WHERE coalesce(s.nesting_level, 0) = 0 AND s.end_ns - s.start_ns < 100000000
      AND s.end_ns // 100000000 <> s.start_ns // 100000000
    UNION ALL
    SELECT s.node, s.pid, s.statement_id, s.start_ns, s.end_ns
    FROM statement_clean s ASOF JOIN span w ON w.node = s.node AND s.end_ns >= w.lo
    WHERE coalesce(s.nesting_level, 0) = 0 AND s.end_ns - s.start_ns >= 100000000 AND w.hi >= s.start_ns)
ORDER BY start_ns;
