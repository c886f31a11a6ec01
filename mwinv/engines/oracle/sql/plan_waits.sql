-- plan_waits: the row source operations of each query id's plan (its STAT lines, latest execution
-- that wrote them), each with the disk waits on its object (obj# of the wait = obj of the operation)
-- inside that query id's executions: the plan operator behind the disk time.
--
-- inputs:  plan_operation, dbms_wait, statement
-- columns: query_id, plh, id, parent_id, operation, obj, cnt, cr, pr, time_ns, disk_waits, disk_wait_ns
CREATE OR REPLACE TABLE plan_waits AS
WITH plan AS (
    SELECT p.*, s.query_id,
           max(p.statement_id) OVER (PARTITION BY s.query_id) AS last_statement
    FROM plan_operation p JOIN statement s ON s.node = p.node AND s.statement_id = p.statement_id),
disk AS (
    SELECT s.query_id, w.obj, count(*) AS n, sum(w.ela_ns) AS ns
    FROM dbms_wait w JOIN statement s ON s.node = w.node AND s.statement_id = w.statement_id
    WHERE w.component IN ('disk_random', 'disk_seq') AND w.obj > 0
    GROUP BY ALL)
SELECT p.query_id, p.plh, p.id, p.parent_id, p.operation, p.obj, p.cnt, p.cr, p.pr, p.time_ns,
       coalesce(d.n, 0) AS disk_waits, coalesce(d.ns, 0) AS disk_wait_ns
FROM plan p LEFT JOIN disk d ON d.query_id = p.query_id AND d.obj = p.obj AND p.obj > 0
WHERE p.statement_id = p.last_statement
ORDER BY p.query_id, p.id;
