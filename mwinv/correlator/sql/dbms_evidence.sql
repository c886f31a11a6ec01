-- dbms_evidence: per advised statement (advice_member.key: an execution, or a query id's short executions
-- summed), the DBMS's own evidence the engine's advice rules read: its wait events with the objects
-- they were on and the plan operation reading each object, and its calls.
--
-- builds:  dbms_wait_of, dbms_call_of, dbms_stat_of
-- inputs:  advice_member (key, statement_id), statement, dbms_call, dbms_wait, plan_operation, statement_stat
-- scope:   request
-- columns: dbms_wait_of (key, event, component, ns, count, obj, obj_ns, operation);
--          dbms_call_of (key, parses, hard_parses, parse_ns, execs, fetches, rows, commits, variants);
--          dbms_stat_of (key, name, value)
CREATE TABLE dbms_wait_of AS
WITH w AS (
    SELECT m.key, d.event, d.component, d.obj, d.ela_ns
    FROM advice_member m JOIN dbms_wait d ON d.top_statement_id = m.statement_id AND d.in_call),
ops AS (
    SELECT DISTINCT ON (m.key, p.obj) m.key, p.obj, p.operation
    FROM advice_member m JOIN statement s USING (statement_id)
    JOIN statement q ON q.query_id = s.query_id
    JOIN plan_operation p ON p.statement_id = q.statement_id AND p.node = q.node
    WHERE p.obj > 0 ORDER BY m.key, p.obj, p.statement_id DESC),
per_obj AS (
    SELECT key, event, component, obj, sum(ela_ns) AS obj_ns, count(*) AS n FROM w GROUP BY ALL)
SELECT o.key, o.event, o.component, sum(o.obj_ns) OVER (PARTITION BY o.key, o.event) AS ns,
       sum(o.n) OVER (PARTITION BY o.key, o.event) AS count, o.obj, o.obj_ns, ops.operation
FROM per_obj o LEFT JOIN ops ON ops.key = o.key AND ops.obj = o.obj;

CREATE TABLE dbms_call_of AS
WITH c AS (
    SELECT m.key, d.* FROM advice_member m JOIN dbms_call d ON d.statement_id = m.statement_id),
files AS (SELECT DISTINCT key, file FROM c),
variants AS (
    SELECT m.key, count(DISTINCT q.query_text_hash) AS variants
    FROM advice_member m JOIN statement s USING (statement_id) JOIN statement q ON q.query_id = s.query_id GROUP BY m.key)
SELECT c.key, count(*) FILTER (WHERE call = 'PARSE') AS parses,
       coalesce(sum(mis) FILTER (WHERE call = 'PARSE'), 0) AS hard_parses,
       coalesce(sum(e_ns) FILTER (WHERE call = 'PARSE'), 0) AS parse_ns,
       count(*) FILTER (WHERE call = 'EXEC') AS execs, count(*) FILTER (WHERE call = 'FETCH') AS fetches,
       coalesce(sum(r) FILTER (WHERE call = 'FETCH'), 0) AS rows,
       (SELECT count(*) FROM dbms_call x JOIN files f ON f.file = x.file AND f.key = c.key
        WHERE x.call = 'XCTEND' AND x.detail LIKE 'rlbk=0%') AS commits,
       any_value(v.variants) AS variants
FROM c LEFT JOIN variants v USING (key) GROUP BY c.key;

-- the DBMS's own counters of the statement (MariaDB's statement_stat), summed over the executions
CREATE TABLE dbms_stat_of AS
SELECT m.key, s.name, sum(s.value) AS value
FROM advice_member m JOIN statement_stat s ON s.statement_id = m.statement_id
WHERE s.name <> 'socket_fd'   -- the connection's socket, not a counter
GROUP BY ALL;
