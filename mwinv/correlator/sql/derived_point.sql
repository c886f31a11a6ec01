-- derived_point: the segment walk's points that come from derived tables, not straight from
-- kernel_event (kernel_points.py streams those): positional reads with their access pattern, disk
-- requests issued and completed, the boundaries of the statements the walk can tell anything of
-- (walked_statement), and per pid a 'gap' at each trace window's end (after its points at that
-- instant): what the trace showed of a task's state holds up to there, not across the stretch no
-- window covers. A view: the walk reads it one time slice at a time.
--
-- builds:  derived_point
-- inputs:  file_read, disk_request, walked_statement, dbms_pid, traced_window, point_ord
-- columns: node, pid, ts, ord (point_ord), kind (attribution.POINT_KINDS), info, nr, ret (a request's
--          bytes), sid (statement id), io_seq, io_rand (in-flight request count changes)
CREATE VIEW derived_point AS
SELECT p.* FROM (
    SELECT node, pid, ts_ns AS ts, point_ord('enter') AS ord, 'enter' AS kind,
           CASE WHEN sequential THEN 'seq' ELSE 'rand' END AS info, syscall_nr AS nr, NULL::BIGINT AS ret,
           NULL::BIGINT AS sid, 0 AS io_seq, 0 AS io_rand
    FROM file_read
    UNION ALL
    -- nr: 1 sequential, 2 random; in-flight counts only for requests whose completion is known
    SELECT node, pid, issue_ns, point_ord('io_start'), 'io_start', NULL, CASE WHEN sequential THEN 1 ELSE 2 END,
           nr_bytes, NULL, CASE WHEN sequential AND complete_ns IS NOT NULL THEN 1 ELSE 0 END,
           CASE WHEN NOT sequential AND complete_ns IS NOT NULL THEN 1 ELSE 0 END
    FROM disk_request
    UNION ALL
    SELECT node, pid, complete_ns, point_ord('io_done'), 'io_done', NULL, NULL, NULL, NULL,
           CASE WHEN sequential THEN -1 ELSE 0 END, CASE WHEN sequential THEN 0 ELSE -1 END
    FROM disk_request WHERE complete_ns IS NOT NULL
    UNION ALL
    SELECT node, pid, start_ns, point_ord('stmt_start'), 'stmt_start', NULL, NULL, NULL, statement_id, 0, 0
    FROM walked_statement
    UNION ALL
    SELECT node, pid, end_ns, point_ord('stmt_end'), 'stmt_end', NULL, NULL, NULL, statement_id, 0, 0
    FROM walked_statement
    UNION ALL
    SELECT node, pid, hi, point_ord('gap'), 'gap', NULL, NULL, NULL, NULL, 0, 0
    FROM traced_window JOIN dbms_pid USING (node)
) p JOIN dbms_pid USING (node, pid);
