-- slice_statement: every statement as the per-statement modules read it, one slice at a time (`slice:
-- statement`), with its slice key: its start, a parallel worker's its leader statement's (the leader's
-- attribution adds its workers' time: both fall in one slice). Ordered by the key: a slice's scan
-- reads its own row groups only (DuckDB's zone maps), so the slices' passes read it about once. The
-- statements are read once, the workers' leaders looked up from the workers (a CTE of every statement
-- read twice was materialized, and the leaders' join hashed every statement: 60 s at 60 M).
--
-- builds:  slice_statement
-- inputs:  statement_clean, traced_statement
-- columns: key_ns, node, statement_id, query_id, query_text_hash, pid, leader_pid, parent_statement_id,
--          start_ns, end_ns, cpu_user_ns, cpu_sys_ns, client_wait_ns, nesting_level, worker, traced
CREATE TABLE slice_statement AS
WITH leader AS (
    SELECT w.node, w.statement_id, l.start_ns AS key_ns
    FROM (SELECT node, statement_id, parent_statement_id FROM statement_clean
          WHERE leader_pid IS NOT NULL AND leader_pid <> pid AND parent_statement_id IS NOT NULL) w
    JOIN statement_clean l ON l.node = w.node AND l.statement_id = w.parent_statement_id)
SELECT coalesce(leader.key_ns, s.start_ns) AS key_ns, s.node, s.statement_id, s.query_id, s.query_text_hash, s.pid,
       s.leader_pid, s.parent_statement_id, s.start_ns, s.end_ns, s.cpu_user_ns, s.cpu_sys_ns, s.client_wait_ns,
       s.nesting_level,
       (s.leader_pid IS NOT NULL AND s.leader_pid <> s.pid AND s.parent_statement_id IS NOT NULL) AS worker,
       t.statement_id IS NOT NULL AS traced
FROM statement_clean s LEFT JOIN leader USING (node, statement_id) LEFT JOIN traced_statement t USING (node, statement_id)
ORDER BY key_ns;
