-- model_node_inputs: per root statement and node, the model's inputs ([Taufer]'s per-node terms): the
-- root's own CPU and its parallel workers' apart, the workers' count, sequential and random bytes
-- and requests, network bytes. The model, the classifier and the disk check read it.
-- A table macro over a model's inputs, read as query_table(inputs || '_statement') etc.: inputs 'model'
-- (the capture's: model_statement, ...) or 'advice' (the advice's examples: advice_statement, ...).
--
-- builds:  model_node_inputs
-- inputs:  model_statement, model_attribution, model_statement_io
-- columns: statement_id, node, cpu_ns, workers_cpu_ns, workers, seq_bytes, seq_reqs, random_reqs,
--          random_bytes, net_bytes (DOUBLE)
CREATE MACRO model_node_inputs(inputs) AS TABLE
-- roots materialized: inlined in the joins and grouping below, the recursion ran out of DuckDB's 768 MiB
-- in 4 of 6 runs on an SF 1 cell's capture (2.2 M statements under 72 roots, 24 M attribution rows),
-- materialized in none of 6 (2.5-3.4 s)
-- 64 levels at most: Oracle stops recursive SQL at 50 (ORA-00036); parents that loop (ids two nodes share in
-- a capture an older Oracle import numbered per node) made the recursion run without end
WITH RECURSIVE roots AS MATERIALIZED (  -- remote sub-statements and parallel workers belong to their root
    SELECT statement_id, statement_id AS root_id, node AS root_node, 0 AS depth
    FROM query_table(inputs || '_statement') WHERE parent_statement_id IS NULL
    UNION ALL
    SELECT s.statement_id, r.root_id, r.root_node, r.depth + 1
    FROM query_table(inputs || '_statement') s JOIN roots r ON s.parent_statement_id = r.statement_id WHERE r.depth < 64
),
worker AS (  -- a parallel worker: its own pid, its leader's statement as parent
    SELECT statement_id FROM query_table(inputs || '_statement')
    WHERE parent_statement_id IS NOT NULL AND leader_pid IS NOT NULL AND pid <> leader_pid
),
cpu AS (  -- a leader's own CPU, and its workers' (rolled up into the leader's attribution rows)
    SELECT statement_id, node, sum(ns) FILTER (WHERE component IN ('cpu_user', 'cpu_sys')) AS cpu_ns,
           sum(from_workers_ns) FILTER (WHERE component IN ('cpu_user', 'cpu_sys')) AS workers_cpu_ns
    FROM query_table(inputs || '_attribution') GROUP BY ALL
),
io AS (
    SELECT statement_id, node, sum(seq_bytes) AS seq_bytes, sum(seq_reqs) AS seq_reqs, sum(random_reqs) AS random_reqs,
           sum(random_bytes) AS random_bytes,
           sum(coalesce(net_rx_bytes, 0) + coalesce(net_tx_bytes, 0)) AS net_bytes
    FROM query_table(inputs || '_statement_io') GROUP BY ALL
),
both_ AS (
    SELECT coalesce(cpu.statement_id, io.statement_id) AS statement_id, coalesce(cpu.node, io.node) AS node,
           coalesce(cpu_ns, 0) AS cpu_ns, coalesce(workers_cpu_ns, 0) AS workers_cpu_ns,
           coalesce(seq_bytes, 0) AS seq_bytes, coalesce(seq_reqs, 0) AS seq_reqs,
           coalesce(random_reqs, 0) AS random_reqs, coalesce(random_bytes, 0) AS random_bytes,
           coalesce(net_bytes, 0) AS net_bytes
    FROM cpu FULL JOIN io ON cpu.statement_id = io.statement_id AND cpu.node = io.node
)
SELECT r.root_id AS statement_id, b.node,
       coalesce(sum(cpu_ns) FILTER (WHERE w.statement_id IS NULL), 0)::DOUBLE AS cpu_ns,
       -- rolled up into the leader's rows by the correlator; a worker's own rows where they were not (rusage)
       (sum(workers_cpu_ns) + coalesce(sum(cpu_ns) FILTER (WHERE w.statement_id IS NOT NULL), 0))::DOUBLE
           AS workers_cpu_ns,
       count(w.statement_id)::DOUBLE AS workers, sum(seq_bytes)::DOUBLE AS seq_bytes,
       sum(seq_reqs)::DOUBLE AS seq_reqs, sum(random_reqs)::DOUBLE AS random_reqs, sum(random_bytes)::DOUBLE AS random_bytes,
       sum(net_bytes)::DOUBLE AS net_bytes
FROM both_ b JOIN roots r USING (statement_id) LEFT JOIN worker w USING (statement_id)
-- a nested statement on the root's own node ran inside the root's time: counted once, by the root;
-- a parallel worker's requests went to the same disk as its leader's: they add up
WHERE b.statement_id = r.root_id OR b.node <> r.root_node OR w.statement_id IS NOT NULL
GROUP BY ALL ORDER BY 1, 2;
