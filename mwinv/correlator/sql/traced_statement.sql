-- traced_statement: the top-level statements the kernel trace covers whole, attributed from its
-- events (the others from what their DBMS or the extension's rusage reported). A statement is
-- covered when it lies inside one of its node's trace windows (traced_window: every event on); in a
-- window after the first (a duty-cycled capture), only from its pid's first scheduler event in that
-- window on: until then the task's state is what it carried in from the gap, not what it was.
--
-- Each window is cut into its 100 ms buckets and a statement or a switch joined with the windows
-- whose bucket holds its start, by equality: a join on the node alone compared every statement with
-- every window of its node (60 M statements, 57 windows: 4.6 s of the 600 s capture's opening). The
-- pids' first switches in a window: 1.5 s where grouping a row per pid of each switch took 1.9 (6.6 M).
--
-- builds:  traced_statement
-- inputs:  statement_clean, traced_window, kernel_event
-- columns: node, statement_id
CREATE TABLE traced_statement AS
WITH win AS (
    SELECT node, lo, hi, row_number() OVER (PARTITION BY node ORDER BY lo) AS n FROM traced_window),
bucket AS (SELECT *, unnest(range(lo // 100000000, hi // 100000000 + 1)) AS b FROM win),
-- each pair of pids a switch joins, first: a grouping of few rows, not of two per switch
switched AS (
    SELECT w.node, w.n, e.prev_pid, e.next_pid, min(e.ts_ns) AS ts_ns
    FROM bucket w JOIN kernel_event e ON e.node = w.node AND e.ts_ns // 100000000 = w.b AND e.ts_ns BETWEEN w.lo AND w.hi
    WHERE w.n > 1 AND e.event = 'sched_switch' GROUP BY ALL),
known_from AS (
    SELECT node, n, pid, min(ts_ns) AS ts
    FROM (SELECT node, n, unnest([prev_pid, next_pid]) AS pid, ts_ns FROM switched) GROUP BY ALL)
SELECT s.node, s.statement_id
FROM statement_clean s
JOIN bucket w ON w.node = s.node AND w.b = s.start_ns // 100000000 AND s.start_ns >= w.lo AND s.end_ns <= w.hi
LEFT JOIN known_from k ON k.node = s.node AND k.n = w.n AND k.pid = s.pid
WHERE coalesce(s.nesting_level, 0) = 0 AND (w.n = 1 OR k.ts <= s.start_ns);
