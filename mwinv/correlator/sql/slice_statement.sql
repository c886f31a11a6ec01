-- slice_statement: every statement as the per-statement modules read it, one slice at a time (`slice:
-- statement`), with its slice key: its start, a parallel worker's its leader statement's (the leader's
-- attribution adds its workers' time: both fall in one slice). Ordered by the key: a slice's scan
-- reads its own row groups only (DuckDB's zone maps), so the slices' passes read it about once.
--
-- builds:  slice_statement
-- inputs:  statement_clean, traced_statement
-- columns: key_ns, node, statement_id, query_id, query_text_hash, pid, leader_pid, parent_statement_id,
--          start_ns, end_ns, cpu_user_ns, cpu_sys_ns, client_wait_ns, nesting_level, worker, traced
CREATE TABLE slice_statement AS
WITH s AS (
    SELECT node, statement_id, query_id, query_text_hash, pid, leader_pid, parent_statement_id, start_ns, end_ns,
           cpu_user_ns, cpu_sys_ns, client_wait_ns, nesting_level,
           (leader_pid IS NOT NULL AND leader_pid <> pid AND parent_statement_id IS NOT NULL) AS worker
    FROM statement_clean),
leader AS (
    SELECT w.node, w.statement_id, l.start_ns AS key_ns
    FROM s w JOIN statement_clean l ON l.node = w.node AND l.statement_id = w.parent_statement_id
    WHERE w.worker)
SELECT coalesce(leader.key_ns, s.start_ns) AS key_ns, s.*, t.statement_id IS NOT NULL AS traced
FROM s LEFT JOIN leader USING (node, statement_id) LEFT JOIN traced_statement t USING (node, statement_id)
ORDER BY key_ns;
