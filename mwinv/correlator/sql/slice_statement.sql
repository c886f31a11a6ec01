-- slice_statement: every statement as the per-statement modules read it, one slice at a time (`slice:
-- statement`), with its slice key: its start, a parallel worker's its leader statement's (the leader's
-- attribution adds its workers' time: both fall in one slice). In the statements' order, not sorted:
-- a statement is recorded as it ends, so a row lies out of key order by about its own wall time, and a
-- slice's scan still reads about its own row groups only (DuckDB's zone maps) where statements are short
-- (OLTP, where there are many). Sorting a 600 s capture's 23 M statements took 5.3 s of 6.4. The
-- statements are read once, the workers' leaders looked up from the workers (a CTE of every statement
-- read twice was materialized, and the leaders' join hashed every statement: 60 s at 60 M).
-- rusage_only: a top-level statement whose time is its rusage alone (no trace window covers it, no
-- parallel worker, no DBMS account): summed_statement has no row for it, rusage_attribution takes
-- its components from these columns directly (in a duty-cycled capture, ~93 % of the statements).
-- A column of one value (the variable one_valued) is left out, as in statement_varying: the view
-- slice_statement (load.slice_statement) adds it back as a constant.
--
-- builds:  slice_varying
-- inputs:  statement_clean, traced_statement, dbms_attribution; the variable one_valued
-- columns: key_ns, node, statement_id, query_id, query_text_hash, pid, leader_pid, parent_statement_id,
--          start_ns, end_ns, cpu_user_ns, cpu_sys_ns, client_wait_ns, nesting_level, worker, traced, rusage_only
--          (those of the variable one_valued left out)
CREATE TABLE slice_varying AS
SELECT COLUMNS(c -> NOT list_contains(getvariable('one_valued')::VARCHAR[], c)) FROM (
WITH workers AS NOT MATERIALIZED (
    SELECT node, statement_id, parent_statement_id FROM statement_clean
    WHERE leader_pid IS NOT NULL AND leader_pid <> pid AND parent_statement_id IS NOT NULL),
leader AS (
    SELECT w.node, w.statement_id, l.start_ns AS key_ns
    FROM workers w JOIN statement_clean l ON l.node = w.node AND l.statement_id = w.parent_statement_id),
-- the parallel workers' leaders and the statements their DBMS accounted for: few, their own rows are
-- summed (a worker's are too); inlined, not materialized: the workers are found by a second scan
own_rows AS (
    SELECT node, parent_statement_id AS statement_id FROM workers UNION SELECT node, statement_id FROM dbms_attribution)
SELECT coalesce(leader.key_ns, s.start_ns) AS key_ns, s.node, s.statement_id, s.query_id, s.query_text_hash, s.pid,
       s.leader_pid, s.parent_statement_id, s.start_ns, s.end_ns, s.cpu_user_ns, s.cpu_sys_ns, s.client_wait_ns,
       s.nesting_level,
       (s.leader_pid IS NOT NULL AND s.leader_pid <> s.pid AND s.parent_statement_id IS NOT NULL) AS worker,
       t.statement_id IS NOT NULL AS traced,
       coalesce(s.nesting_level, 0) = 0 AND t.statement_id IS NULL AND o.statement_id IS NULL AND NOT worker
           AS rusage_only
FROM statement_clean s LEFT JOIN leader USING (node, statement_id) LEFT JOIN traced_statement t USING (node, statement_id)
     LEFT JOIN own_rows o USING (node, statement_id));
