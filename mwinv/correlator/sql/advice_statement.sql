-- advice_statement: the statements the advice's model reads (macros over 'advice'): each example with
-- its executions' times, rows and bytes summed (end_ns: its start plus their wall time) and their
-- count, the executions' parallel workers and remote parts under their example, and, around an
-- execution that waited for a lock, the other backends' statements (the blocker is among them).
--
-- builds:  advice_statement
-- inputs:  advice_example, advice_member, statement, statement_attribution; the variables min_lock_share,
--          blocker_lookback_ns, advice_ids
-- scope:   request
-- columns: statement's, executions
CREATE TABLE advice_statement AS
WITH g AS (
    SELECT key, count(*) AS executions, sum(end_ns - start_ns)::BIGINT AS wall_ns,
           sum(rows)::BIGINT AS rows, sum(write_bytes)::BIGINT AS write_bytes
    FROM advice_member GROUP BY key),
children AS MATERIALIZED (  -- the statements with a parent, apart: joined whole, the 60 M statements of a 600 s
    -- capture were hashed to meet its 4 M members (37 s of threads' time, most of the advice's)
    SELECT * FROM statement WHERE parent_statement_id IS NOT NULL),
locked AS (  -- the single executions that waited for a lock: the examples' rows of the attribution read
    -- alone (a filter by the ids reaches its scans; a join expanded every statement's rows to meet the
    -- few: 21.8 s of a 600 s capture's advice)
    SELECT e.node, e.start_ns, e.end_ns FROM advice_example e JOIN g ON g.key = e.statement_id AND g.executions = 1
    JOIN (SELECT * FROM statement_attribution WHERE list_contains(getvariable('advice_ids'), statement_id)) a
         USING (statement_id)
    WHERE a.component = 'lock_wait' AND a.ns >= getvariable('min_lock_share') * (e.end_ns - e.start_ns))
SELECT e.* REPLACE (e.start_ns + g.wall_ns AS end_ns, g.rows AS rows, g.write_bytes AS write_bytes),
       g.executions
FROM advice_example e JOIN g ON g.key = e.statement_id
UNION ALL BY NAME  -- the executions' parallel workers and remote parts, under their example
SELECT w.* REPLACE (m.key AS parent_statement_id), 1 AS executions
FROM children w JOIN advice_member m ON w.parent_statement_id = m.statement_id
UNION ALL BY NAME  -- other backends' statements around a lock wait
SELECT DISTINCT s.*, 1 AS executions FROM statement s JOIN locked l
    ON s.node = l.node AND s.start_ns < l.end_ns AND s.end_ns > l.start_ns - getvariable('blocker_lookback_ns')
WHERE s.statement_id NOT IN (SELECT statement_id FROM advice_member);
