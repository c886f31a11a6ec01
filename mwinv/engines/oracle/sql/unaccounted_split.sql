-- unaccounted_split: for each top-level Oracle statement the kernel trace of its host covers, Oracle's
-- own account of its time (c=, waits, the client's share, unaccounted-for) set against what the kernel
-- saw its server process do in the same window (statement_attribution, from the kernel's events), and
-- Oracle's unaccounted-for time split by it: run queue (Oracle never sees it; the ela of a wait also
-- holds the run-queue time after its wake-up, so this is an upper bound), CPU the c= values missed
-- (quantisation), block I/O outside any wait event, and what is left.
--
-- inputs:  statement, dbms_call, dbms_wait, statement_attribution, trace_range
-- columns: node, statement_id, query_id, wall_ns, oracle_cpu_ns, oracle_wait_ns, oracle_disk_wait_ns,
--          client_ns, unaccounted_ns, kernel_cpu_ns, kernel_run_queue_ns, kernel_disk_ns, kernel_lock_ns,
--          kernel_network_ns, kernel_other_ns, run_queue_ns, cpu_missed_ns, io_outside_waits_ns, rest_ns
CREATE OR REPLACE TABLE unaccounted_split AS
WITH top AS (
    SELECT s.node, s.statement_id, s.query_id, s.pid, s.start_ns, s.end_ns, s.end_ns - s.start_ns AS wall_ns,
           coalesce(s.cpu_user_ns, 0) AS oracle_cpu_ns, coalesce(s.client_wait_ns, 0) AS client_ns,
           f.file
    FROM statement s JOIN trace_range r ON r.node = s.node AND s.start_ns >= r.lo AND s.end_ns <= r.hi
    JOIN (SELECT node, statement_id, any_value(file) AS file FROM dbms_call GROUP BY ALL) f
      ON f.node = s.node AND f.statement_id = s.statement_id
    WHERE s.dbms = 'oracle' AND coalesce(s.nesting_level, 0) = 0),
waits AS (    -- inside its calls at any depth, and between its calls (the client's own left out)
    SELECT t.node, t.statement_id, sum(w.ela_ns) AS ns,
           coalesce(sum(w.ela_ns) FILTER (WHERE w.component IN ('disk_seq', 'disk_random')), 0) AS disk_ns
    FROM top t JOIN dbms_wait w ON w.node = t.node AND w.file = t.file
         AND ((w.in_call AND w.top_statement_id = t.statement_id)
              OR (NOT w.in_call AND w.component <> 'client_wait' AND w.end_ns > t.start_ns AND w.end_ns <= t.end_ns))
    GROUP BY ALL),
k AS (
    SELECT node, statement_id,
           sum(ns) FILTER (WHERE component IN ('cpu_user', 'cpu_sys')) AS cpu,
           sum(ns) FILTER (WHERE component = 'run_queue') AS rq,
           sum(ns) FILTER (WHERE component IN ('disk_seq', 'disk_random')) AS disk,
           sum(ns) FILTER (WHERE component = 'lock_wait') AS lock,
           sum(ns) FILTER (WHERE component IN ('network', 'remote_wait')) AS net,
           sum(ns) FILTER (WHERE component IN ('other_wait', 'not_allocated')) AS other
    FROM statement_attribution GROUP BY ALL),
joined AS (
    SELECT t.node, t.statement_id, t.query_id, t.wall_ns, t.oracle_cpu_ns, coalesce(w.ns, 0) AS oracle_wait_ns,
           coalesce(w.disk_ns, 0) AS oracle_disk_wait_ns, t.client_ns,
           t.wall_ns - t.oracle_cpu_ns - coalesce(w.ns, 0) - t.client_ns AS unaccounted_ns,
           coalesce(k.cpu, 0) AS kernel_cpu_ns, coalesce(k.rq, 0) AS kernel_run_queue_ns,
           coalesce(k.disk, 0) AS kernel_disk_ns, coalesce(k.lock, 0) AS kernel_lock_ns,
           coalesce(k.net, 0) AS kernel_network_ns, coalesce(k.other, 0) AS kernel_other_ns
    FROM top t LEFT JOIN waits w USING (node, statement_id) LEFT JOIN k USING (node, statement_id)),
split AS (
    SELECT *, least(kernel_run_queue_ns, greatest(unaccounted_ns, 0)) AS run_queue_ns
    FROM joined),
split2 AS (
    SELECT *, least(greatest(kernel_cpu_ns - oracle_cpu_ns, 0), greatest(unaccounted_ns - run_queue_ns, 0))
                  AS cpu_missed_ns
    FROM split),
split3 AS (
    SELECT *, least(greatest(kernel_disk_ns - oracle_disk_wait_ns, 0),
                    greatest(unaccounted_ns - run_queue_ns - cpu_missed_ns, 0)) AS io_outside_waits_ns
    FROM split2)
SELECT *, unaccounted_ns - run_queue_ns - cpu_missed_ns - io_outside_waits_ns AS rest_ns FROM split3;
