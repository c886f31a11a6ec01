-- statement_shares: per root statement (no parent) of the model's connection, its time in the database
-- db_ns (its wall time, the record's window, less the portal's idle gaps waiting for the client:
-- docs/attribution.md) and the attributed ns
-- per component, NULL where it has no row of that component. The model, the classification and the
-- advice read it.
-- A table macro over a model's inputs, read as query_table(inputs || '_statement') etc.: inputs 'model'
-- (the capture's: model_statement, ...) or 'advice' (the advice's examples: advice_statement, ...).
--
-- builds:  statement_shares
-- inputs:  model_statement, model_attribution
-- columns: statement_id, query_id, db_ns, from_workers_ns, and one per ATTRIBUTION_COMPONENTS
--          (tests/test_sql_files.py checks they are the same)
CREATE MACRO statement_shares(inputs) AS TABLE
SELECT s.statement_id, s.query_id,
       any_value(s.end_ns - s.start_ns) - coalesce(sum(a.ns) FILTER (WHERE a.component = 'client_wait'), 0) AS db_ns,
       coalesce(sum(a.from_workers_ns), 0) AS from_workers_ns,
       sum(a.ns) FILTER (WHERE a.component = 'cpu_user') AS cpu_user,
       sum(a.ns) FILTER (WHERE a.component = 'cpu_sys') AS cpu_sys,
       sum(a.ns) FILTER (WHERE a.component = 'disk_seq') AS disk_seq,
       sum(a.ns) FILTER (WHERE a.component = 'disk_random') AS disk_random,
       sum(a.ns) FILTER (WHERE a.component = 'network') AS network,
       sum(a.ns) FILTER (WHERE a.component = 'remote_wait') AS remote_wait,
       sum(a.ns) FILTER (WHERE a.component = 'lock_wait') AS lock_wait,
       sum(a.ns) FILTER (WHERE a.component = 'run_queue') AS run_queue,
       sum(a.ns) FILTER (WHERE a.component = 'other_wait') AS other_wait,
       sum(a.ns) FILTER (WHERE a.component = 'client_wait') AS client_wait,
       sum(a.ns) FILTER (WHERE a.component = 'not_allocated') AS not_allocated
FROM query_table(inputs || '_statement') s LEFT JOIN query_table(inputs || '_attribution') a USING (statement_id)
WHERE s.parent_statement_id IS NULL
GROUP BY ALL ORDER BY 1;
