-- own_attribution: a top-level statement's own time by component (its parallel workers' apart, by
-- their own rows), from the segments of its pid (seg_component) where a trace window covers it whole
-- (traced_statement), else from what the extension measured (rusage, client_wait_ns), else from its
-- DBMS's own account (dbms_attribution). The generic components are split: cpu by the statement's
-- own user/sys rusage ratio, and disk waits whose requests another task issued by the statement's
-- own seq/random request mix (floor for one part, the rest for the other: the parts sum to the
-- whole in integer ns).
--
-- One statement slice at a time (a parallel worker's rows in its leader's slice), each row with its
-- statement's slice key: summed_attribution reads it per slice. A statement of its rusage alone
-- (slice_statement.rusage_only) has no rows: rusage_attribution derives its own.
--
-- builds:  own_attribution
-- inputs:  slice_statement, seg_component, seg_io, dbms_attribution, in_slice; the variables
--          rusage_min_wall_ns (attribution.RUSAGE_MIN_WALL_NS), slice_lo, slice_hi
-- slice:   statement
-- columns: key_ns, node, statement_id, query_id, pid, leader_pid, parent_statement_id, wall_ns, component, ns
CREATE TABLE own_attribution AS
WITH slice AS (SELECT * FROM slice_statement WHERE in_slice(key_ns)),
base AS (
    SELECT s.node, s.statement_id, s.query_id, s.pid, s.leader_pid,
           s.parent_statement_id, s.end_ns - s.start_ns AS wall_ns,
           coalesce(s.cpu_user_ns, 0) AS u, coalesce(s.cpu_sys_ns, 0) AS k,
           least(coalesce(s.client_wait_ns, 0), s.end_ns - s.start_ns) AS idle,
           s.cpu_user_ns IS NOT NULL AS has_rusage, s.traced
    FROM slice s
    WHERE coalesce(s.nesting_level, 0) = 0 AND NOT s.rusage_only
      AND (s.node, s.statement_id) NOT IN (SELECT (node, statement_id) FROM dbms_attribution)),
comp AS (
    SELECT b.*, c.component, c.ns FROM base b
    JOIN (SELECT * FROM seg_component WHERE in_slice(key_ns)) c USING (node, statement_id) WHERE b.traced),
-- a statement the segments saw no request of has none (statement_io's zeros)
io AS (SELECT node, statement_id, seq_reqs, random_reqs FROM seg_io WHERE in_slice(key_ns)),
-- the statement's rusage is exact for its CPU total, the scheduler places it in time: on-CPU
-- stretches plus runnable ones whose switch-in was not recorded, up to the rusage total; the
-- rest waited for a CPU (without rusage, or for a statement too short for it, all of it is CPU)
cpu AS (
    SELECT node, statement_id, query_id, pid, leader_pid, parent_statement_id, wall_ns, u, k, has_rusage,
           coalesce(sum(ns) FILTER (WHERE component = 'cpu'), 0) AS running,
           coalesce(sum(ns) FILTER (WHERE component = 'cpu_or_queue'), 0) AS unconfirmed
    FROM comp GROUP BY ALL),
cpu_total AS (
    SELECT *, CASE WHEN has_rusage AND wall_ns >= getvariable('rusage_min_wall_ns') THEN least(u + k, running + unconfirmed)
                   ELSE running + unconfirmed END AS cpu_ns
    FROM cpu),
split AS (
    SELECT node, statement_id, query_id, pid, leader_pid, parent_statement_id, wall_ns, 'cpu_user' AS component,
           CASE WHEN u + k > 0 THEN floor(cpu_ns * u / (u + k)) ELSE cpu_ns END AS ns
    FROM cpu_total
    UNION ALL
    SELECT node, statement_id, query_id, pid, leader_pid, parent_statement_id, wall_ns, 'cpu_sys',
           CASE WHEN u + k > 0 THEN cpu_ns - floor(cpu_ns * u / (u + k)) ELSE 0 END
    FROM cpu_total
    UNION ALL
    SELECT node, statement_id, query_id, pid, leader_pid, parent_statement_id, wall_ns, 'run_queue',
           running + unconfirmed - cpu_ns
    FROM cpu_total
    UNION ALL
    SELECT c.node, c.statement_id, query_id, pid, leader_pid, parent_statement_id, wall_ns, 'disk_seq',
           CASE WHEN io.seq_reqs + io.random_reqs > 0
                THEN floor(ns * io.seq_reqs / (io.seq_reqs + io.random_reqs)) ELSE 0 END
    FROM comp c LEFT JOIN io USING (node, statement_id) WHERE component = 'disk_unknown'
    UNION ALL
    SELECT c.node, c.statement_id, query_id, pid, leader_pid, parent_statement_id, wall_ns, 'disk_random',
           CASE WHEN io.seq_reqs + io.random_reqs > 0
                THEN ns - floor(ns * io.seq_reqs / (io.seq_reqs + io.random_reqs)) ELSE ns END
    FROM comp c LEFT JOIN io USING (node, statement_id) WHERE component = 'disk_unknown'
    UNION ALL
    SELECT node, statement_id, query_id, pid, leader_pid, parent_statement_id, wall_ns, component, ns
    FROM comp WHERE component NOT IN ('cpu', 'cpu_or_queue', 'disk_unknown')
    UNION ALL
    -- statements outside the trace: the extension's rusage is all that is known
    SELECT node, statement_id, query_id, pid, leader_pid, parent_statement_id, wall_ns, 'cpu_user',
           least(u, wall_ns) FROM base WHERE NOT traced
    UNION ALL
    SELECT node, statement_id, query_id, pid, leader_pid, parent_statement_id, wall_ns, 'cpu_sys',
           least(k, wall_ns - least(u, wall_ns)) FROM base WHERE NOT traced
    UNION ALL
    -- the extension's own count of the portal's idle gaps (the trace tells them by epoll waits)
    SELECT node, statement_id, query_id, pid, leader_pid, parent_statement_id, wall_ns, 'client_wait',
           least(idle, wall_ns - least(u + k, wall_ns)) FROM base WHERE NOT traced
    UNION ALL
    -- outside the trace, where the DBMS kept its own account of the time
    SELECT node, statement_id, query_id, pid, leader_pid, parent_statement_id, wall_ns, component, ns
    FROM dbms_attribution SEMI JOIN slice USING (node, statement_id))
SELECT s.key_ns, p.*
FROM (SELECT node, statement_id, query_id, pid, leader_pid, parent_statement_id, wall_ns, component,
             CAST(round(sum(ns)) AS BIGINT) AS ns
      FROM split GROUP BY ALL) p JOIN slice s USING (node, statement_id);
