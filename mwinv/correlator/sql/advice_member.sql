-- advice_member: the executions each example (key) stands for: itself, or when its time in the database
-- (its window less its client_wait, as the advice weighs it) is under min_wall_ns every root execution
-- of its query id — in a duty-cycled capture those a window covered
-- (the others' time is rusage or not_allocated).
--
-- builds:  advice_member
-- inputs:  advice_example, statement, statement_attribution, traced_statement; the variables min_wall_ns, duty_cycled,
--          advice_ids
-- scope:   request
-- columns: key (the example's statement_id), statement_id, and its node, start_ns, end_ns, rows, write_bytes
--          (what advice_statement and advice_window read of it: one join with the statements, not three)
CREATE TABLE advice_member AS
WITH short AS MATERIALIZED (  -- the examples too short alone; their client_wait summed first (a correlated
    -- subquery was planned as a join sized for every statement: out of 768 MiB reopening a 600 s capture)
    SELECT e.statement_id, e.query_id FROM advice_example e
    LEFT JOIN (SELECT statement_id, sum(ns) AS ns FROM statement_attribution
               WHERE list_contains(getvariable('advice_ids'), statement_id) AND component = 'client_wait'
               GROUP BY statement_id) w USING (statement_id)
    WHERE e.end_ns - e.start_ns - coalesce(w.ns, 0) < getvariable('min_wall_ns'))
SELECT statement_id AS key, statement_id, node, start_ns, end_ns, rows, write_bytes FROM advice_example
UNION
SELECT e.statement_id, s.statement_id, s.node, s.start_ns, s.end_ns, s.rows, s.write_bytes
FROM short e JOIN statement s ON s.query_id = e.query_id
WHERE s.parent_statement_id IS NULL
  AND (NOT getvariable('duty_cycled') OR s.statement_id IN (SELECT statement_id FROM traced_statement));
