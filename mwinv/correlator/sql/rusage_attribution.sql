-- rusage_attribution: per top-level statement of its rusage alone (slice_statement.rusage_only: no trace
-- window covers it, no parallel worker, no DBMS account; ~93 % of a duty-cycled capture's) the ns of the
-- components it has: cpu_user, cpu_sys, client_wait, each bounded by what the others left of its wall
-- time, and not_allocated the rest (every other component 0). statement_attribution's rows of it (those
-- of these four that are not 0) follow from these (tables.rusage_rows): this is what is written, one row
-- a statement (writing 12 rows each took 60 of 208 s on a 600 s capture). A view, read as it is written.
--
-- builds:  rusage_attribution
-- inputs:  slice_statement
-- columns: node, statement_id, query_id, cpu_user_ns, cpu_sys_ns, client_wait_ns, not_allocated_ns
CREATE VIEW rusage_attribution AS
SELECT node, statement_id, query_id, cpu_user::BIGINT AS cpu_user_ns, cpu_sys::BIGINT AS cpu_sys_ns,
       client_wait::BIGINT AS client_wait_ns,
       greatest(0, wall_ns - cpu_user - cpu_sys - client_wait)::BIGINT AS not_allocated_ns
FROM (SELECT node, statement_id, query_id, wall_ns, least(u, wall_ns) AS cpu_user,
             least(sys, wall_ns - least(u, wall_ns)) AS cpu_sys, least(idle, wall_ns - least(u + sys, wall_ns)) AS client_wait
      FROM (SELECT node, statement_id, query_id, end_ns - start_ns AS wall_ns, coalesce(cpu_user_ns, 0) AS u,
                   coalesce(cpu_sys_ns, 0) AS sys, least(coalesce(client_wait_ns, 0), end_ns - start_ns) AS idle
            FROM slice_statement WHERE rusage_only));
