-- summed_statement: per top-level statement (not a parallel worker) whose own rows are summed (not
-- rusage_only: slice_statement) its time per component, a list in the order of the variable components:
-- its own time (ns), which sums to its wall time — not_allocated closes it (a DBMS's own account brings
-- its own not_allocated, possibly negative: its unaccounted-for time) — and its parallel workers' time
-- per component (from_workers_ns; NULL: it had none), apart. summed_attribution is its row per
-- component of some time.
--
-- A statement's own time by component (a parallel worker's by its own rows, gathered under its leader):
-- from the segments of its pid (seg_component) where a trace window covers it whole (traced), else from
-- what the extension measured (rusage, client_wait_ns), else from its DBMS's own account
-- (dbms_attribution). The generic components are split: cpu by the statement's own user/sys rusage
-- ratio, and disk waits whose requests another task issued by its own seq/random request mix (floor for
-- one part, the rest for the other: the parts sum to the whole in integer ns).
--
-- One statement slice at a time (a parallel worker in its leader's slice): a statement's rows are
-- gathered into one list and its list per component made from it. Within a slice the lists fit in
-- memory; over the capture a list or map per statement ran out of DuckDB's 768 MB (1.5 M pgbench
-- statements). One row a statement, not one per component, and the own rows not stored between: a
-- 600 s capture's 3.26 M summed statements took 13.3-16.7 s as 35.8 M stored rows (their node's and
-- component's text in each), 7.6-9.7 s as lists from a table of the own rows, which took 13-14 s more.
--
-- builds:  summed_statement
-- inputs:  slice_statement, seg_component, seg_io, dbms_attribution, in_slice, component_ns, statement_cpu_ns,
--          user_part_ns; the variables components
--          (ATTRIBUTION_COMPONENTS, in order), rusage_min_wall_ns (attribution.RUSAGE_MIN_WALL_NS),
--          slice_lo, slice_hi
-- slice:   statement
-- columns: node, statement_id, query_id, ns (BIGINT[], per component), from_workers_ns (BIGINT[] or NULL)
CREATE TABLE summed_statement AS
WITH comps AS (SELECT getvariable('components') AS names, list_position(getvariable('components'), 'not_allocated') AS na),
stmts AS (
    SELECT node, statement_id, query_id, end_ns - start_ns AS wall_ns, worker,
           -- the statement whose lists a row goes into: a worker's leader
           CASE WHEN worker THEN parent_statement_id ELSE statement_id END AS into_id,
           coalesce(cpu_user_ns, 0) AS u, coalesce(cpu_sys_ns, 0) AS k,
           least(coalesce(client_wait_ns, 0), end_ns - start_ns) AS idle,
           cpu_user_ns IS NOT NULL AS has_rusage, traced
    FROM slice_statement
    WHERE coalesce(nesting_level, 0) = 0 AND NOT rusage_only AND worker IS NOT NULL AND in_slice(key_ns)),
-- simple: a traced statement whose segments were all on a CPU, not a worker nor a leader of one, not in
-- its DBMS's account (a 600 s pgbench capture's: all but 11 k of 3.26 M). Its lists are made straight from
-- its one cpu row (at the end); the others' from their pieces: 10.6 -> 5.4 s for the 19 slices of that
-- capture, the same rows.
others AS (
    SELECT node, statement_id FROM seg_component WHERE in_slice(key_ns) AND component <> 'cpu'
    UNION SELECT node, into_id FROM stmts WHERE worker
    UNION SELECT node, statement_id FROM dbms_attribution),
flagged AS (
    SELECT s.*, s.traced AND NOT s.worker AND o.statement_id IS NULL AS simple
    FROM stmts s LEFT JOIN others o USING (node, statement_id)),
base AS (
    SELECT * FROM flagged
    WHERE NOT simple AND (node, statement_id) NOT IN (SELECT (node, statement_id) FROM dbms_attribution)),
comp AS (
    SELECT b.*, c.component, c.ns FROM base b
    JOIN (SELECT * FROM seg_component WHERE in_slice(key_ns)) c USING (node, statement_id) WHERE b.traced),
-- a statement the segments saw no request of has none (statement_io's zeros)
io AS (SELECT node, statement_id, seq_reqs, random_reqs FROM seg_io WHERE in_slice(key_ns)),
-- its on-CPU stretches and its runnable ones whose switch-in was not recorded, split by cpu_split's rule
cpu AS (
    SELECT node, statement_id, into_id, worker, wall_ns, u, k, has_rusage,
           coalesce(sum(ns) FILTER (WHERE component = 'cpu'), 0) AS running,
           coalesce(sum(ns) FILTER (WHERE component = 'cpu_or_queue'), 0) AS unconfirmed
    FROM comp GROUP BY ALL),
cpu_total AS (
    SELECT *, statement_cpu_ns(has_rusage, wall_ns, u, k, running + unconfirmed) AS cpu_ns FROM cpu),
split AS (
    SELECT node, statement_id, into_id, worker, 'cpu_user' AS component, user_part_ns(cpu_ns, u, k) AS ns
    FROM cpu_total
    UNION ALL
    SELECT node, statement_id, into_id, worker, 'cpu_sys', cpu_ns - user_part_ns(cpu_ns, u, k)
    FROM cpu_total
    UNION ALL
    SELECT node, statement_id, into_id, worker, 'run_queue', running + unconfirmed - cpu_ns
    FROM cpu_total
    UNION ALL
    SELECT c.node, c.statement_id, into_id, worker, 'disk_seq',
           CASE WHEN io.seq_reqs + io.random_reqs > 0
                THEN floor(ns * io.seq_reqs / (io.seq_reqs + io.random_reqs)) ELSE 0 END
    FROM comp c LEFT JOIN io USING (node, statement_id) WHERE component = 'disk_unknown'
    UNION ALL
    SELECT c.node, c.statement_id, into_id, worker, 'disk_random',
           CASE WHEN io.seq_reqs + io.random_reqs > 0
                THEN ns - floor(ns * io.seq_reqs / (io.seq_reqs + io.random_reqs)) ELSE ns END
    FROM comp c LEFT JOIN io USING (node, statement_id) WHERE component = 'disk_unknown'
    UNION ALL
    SELECT node, statement_id, into_id, worker, component, ns
    FROM comp WHERE component NOT IN ('cpu', 'cpu_or_queue', 'disk_unknown')
    UNION ALL
    -- statements outside the trace: the extension's rusage is all that is known
    SELECT node, statement_id, into_id, worker, 'cpu_user', least(u, wall_ns) FROM base WHERE NOT traced
    UNION ALL
    SELECT node, statement_id, into_id, worker, 'cpu_sys', least(k, wall_ns - least(u, wall_ns)) FROM base WHERE NOT traced
    UNION ALL
    -- the extension's own count of the portal's idle gaps (the trace tells them by epoll waits)
    SELECT node, statement_id, into_id, worker, 'client_wait', least(idle, wall_ns - least(u + k, wall_ns))
    FROM base WHERE NOT traced
    UNION ALL
    -- outside the trace, where the DBMS kept its own account of the time
    SELECT d.node, d.statement_id, s.into_id, s.worker, d.component, d.ns
    FROM dbms_attribution d JOIN stmts s USING (node, statement_id)),
-- its pieces into its lists as they are: each is a whole number of ns (the splits are floors and what
-- they leave), and a component's pieces are summed from the list (summing them per statement and
-- component first took 0.19 s of a 233 k-statement slice's 0.88 s)
per AS (
    SELECT node, statement_id,
           list({'i': i, 'ns': ns}) FILTER (WHERE NOT worker) AS own, list({'i': i, 'ns': ns}) FILTER (WHERE worker) AS w,
           coalesce(sum(ns) FILTER (WHERE NOT worker AND i <> c.na), 0) AS allocated,
           coalesce(sum(ns) FILTER (WHERE NOT worker AND i = c.na), 0) AS not_allocated
    FROM (SELECT node, into_id AS statement_id, worker, ns::BIGINT AS ns, list_position(c.names, component) AS i
          FROM split, comps c), comps c
    WHERE i IS NOT NULL GROUP BY node, statement_id)
SELECT s.node, s.statement_id, s.query_id,
       list_transform(range(1, len(c.names) + 1), k ->
           CASE WHEN k = c.na THEN coalesce(p.not_allocated, 0)
                                   + greatest(0, s.wall_ns - coalesce(p.allocated, 0) - coalesce(p.not_allocated, 0))
                ELSE coalesce(list_sum(list_transform(list_filter(p.own, x -> x.i = k), x -> x.ns)), 0) END::BIGINT)
           AS ns,
       CASE WHEN p.w IS NOT NULL THEN list_transform(range(1, len(c.names) + 1), k ->
                coalesce(list_sum(list_transform(list_filter(p.w, x -> x.i = k), x -> x.ns)), 0)::BIGINT) END
           AS from_workers_ns
FROM flagged s LEFT JOIN per p USING (node, statement_id), comps c WHERE NOT s.worker AND NOT s.simple
UNION ALL
-- the same CPU split (cpu_split); what the cpu row leaves of the wall: not_allocated
SELECT node, statement_id, query_id,
       component_ns(user_part_ns(cpu_ns, u, k), cpu_ns - user_part_ns(cpu_ns, u, k), running - cpu_ns,
                    greatest(0, wall_ns - running)) AS ns,
       NULL::BIGINT[] AS from_workers_ns
FROM (SELECT s.node, s.statement_id, s.query_id, s.wall_ns, s.u, s.k, coalesce(r.ns, 0) AS running,
             statement_cpu_ns(s.has_rusage, s.wall_ns, s.u, s.k, coalesce(r.ns, 0)) AS cpu_ns
      FROM flagged s
      LEFT JOIN (SELECT node, statement_id, ns FROM seg_component WHERE in_slice(key_ns) AND component = 'cpu') r
           USING (node, statement_id)
      WHERE s.simple);
