-- summed_attribution: per top-level statement whose own rows are summed (summed_statement) one row per
-- component of some time: its own time (ns) and its parallel workers' (from_workers_ns), the lists of
-- summed_statement read in the order of the variable components; a component of neither has no row
-- (a 600 s pgbench capture: 32.6 M of 35.8 M rows, 3.26 M statements, were such). A view: stored in
-- 35.8 M rows they took 13.3-16.7 s to write, against 7.6-9.7 s as lists; read back as rows through the
-- view, as fast as from the table (1.87 s against 1.83 s to Arrow).
--
-- builds:  summed_attribution
-- inputs:  summed_statement; the variable components (ATTRIBUTION_COMPONENTS, in order)
-- columns: node, statement_id, query_id, component, ns, from_workers_ns
CREATE VIEW summed_attribution AS
SELECT s.node, s.statement_id, s.query_id, c.component, s.ns[c.i] AS ns,
       coalesce(s.from_workers_ns[c.i], 0) AS from_workers_ns
FROM summed_statement s, (SELECT unnest(getvariable('components')) AS component,
                                 generate_subscripts(getvariable('components'), 1) AS i) c
WHERE s.ns[c.i] <> 0 OR coalesce(s.from_workers_ns[c.i], 0) <> 0;
