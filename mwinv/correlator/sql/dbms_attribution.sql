-- dbms_attribution: a top-level statement's wall time from its DBMS's own account, for statements
-- the kernel trace does not cover (an Oracle 10046 trace without a kernel capture of its host).
--
-- builds:  dbms_attribution
-- inputs:  statement_clean (start_ns, end_ns, cpu_user_ns, client_wait_ns), dbms_call (its file),
--          dbms_wait,
--          traced_statement
-- columns: node, statement_id, query_id, pid, leader_pid, parent_statement_id, wall_ns, component, ns
--
-- CPU is the calls' c= (user and system together: Oracle does not split them); a wait inside one of
-- the statement's calls, at any depth, counts once, in its engine-given component; waits between
-- its calls count by time; the client's share (its waits, and other cursors' calls in the window) is
-- the reader's client_wait_ns. not_allocated is what is left: e - c - waits inside calls plus the
-- unexplained gaps between them. It may be negative (c= is quantised, e= and ela= are measured
-- apart) and is kept so, never hidden: the components always sum to the wall time.
CREATE TABLE dbms_attribution AS
WITH stmt AS (
    SELECT s.node, s.statement_id, s.query_id, s.pid, s.leader_pid, s.parent_statement_id, s.start_ns, s.end_ns,
           s.end_ns - s.start_ns AS wall_ns, coalesce(s.cpu_user_ns, 0) AS cpu_ns,
           coalesce(s.client_wait_ns, 0) AS client_ns, f.file
    FROM statement_clean s LEFT JOIN traced_statement t USING (node, statement_id)
         LEFT JOIN (SELECT node, statement_id, any_value(file) AS file FROM dbms_call GROUP BY ALL) f
         USING (node, statement_id)
    WHERE coalesce(s.nesting_level, 0) = 0
      AND t.statement_id IS NULL
      AND EXISTS (SELECT 1 FROM dbms_call c WHERE c.node = s.node AND c.statement_id = s.statement_id)),
in_call AS (
    SELECT w.node, w.top_statement_id AS statement_id, w.component, sum(w.ela_ns) AS ns
    FROM dbms_wait w WHERE w.in_call AND w.top_statement_id IS NOT NULL GROUP BY ALL),
between_calls AS (
    SELECT s.node, s.statement_id, w.component, sum(w.ela_ns) AS ns
    FROM stmt s JOIN dbms_wait w ON w.node = s.node AND w.pid = s.pid AND w.file IS NOT DISTINCT FROM s.file
         AND w.end_ns > s.start_ns AND w.end_ns <= s.end_ns
    WHERE NOT w.in_call AND w.component <> 'client_wait' GROUP BY ALL),
parts AS (
    SELECT node, statement_id, 'cpu_user' AS component, cpu_ns AS ns FROM stmt
    UNION ALL SELECT node, statement_id, 'client_wait', client_ns FROM stmt
    UNION ALL SELECT * FROM in_call WHERE (node, statement_id) IN (SELECT (node, statement_id) FROM stmt)
    UNION ALL SELECT * FROM between_calls),
summed AS (
    SELECT node, statement_id, component, sum(ns) AS ns FROM parts GROUP BY ALL),
closed AS (
    SELECT node, statement_id, component, ns FROM summed
    UNION ALL
    SELECT s.node, s.statement_id, 'not_allocated', s.wall_ns - coalesce(sum(m.ns), 0)
    FROM stmt s LEFT JOIN summed m USING (node, statement_id) GROUP BY s.node, s.statement_id, s.wall_ns)
SELECT s.node, s.statement_id, s.query_id, s.pid, s.leader_pid, s.parent_statement_id, s.wall_ns, c.component,
       CAST(c.ns AS BIGINT) AS ns
FROM stmt s JOIN closed c USING (node, statement_id);
