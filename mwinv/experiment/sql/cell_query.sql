-- cell_query: one row per cell and query: the median wall time over its runs (repetitions and
-- streams), the components and the data nodes' figures of the middle run (of an even number, the mean
-- of the two middle ones: the median's own, so the parts of a cell's time are those of its time, and a
-- run the host's other load slowed moves neither), bytes shipped, the model's estimate, the critical
-- data node's execution, and whether it timed out or failed (then its time is not a measurement).
--
-- inputs:  results (RESULT_SCHEMA, every cell's part), results_node (NODE_SCHEMA)
-- columns: the factor levels (kernel and storage: their defaults for an older runner's NULL), cell, query, runs, wall_ns, timed_out, failed, error, estimated_ns,
--          net_bytes, limit, kernel_advice (JSON: the kernel-level advice
--          on the coordinator statement, rule and expected gain), c_<component> (the
--          coordinator's, mean ns), node_work_ns, node_sum_ns (the data nodes' summed execution, median),
--          planning_ns, analyze_ns, host_cpus (the untimed EXPLAIN ANALYZE pass: measure.py),
--          n_<component> (the data nodes' summed, mean ns); and
--          cell_level, cell_others (below)
CREATE OR REPLACE TABLE cell_query AS
WITH middle AS (   -- of the runs without an error; where every one has (a timeout), of them all
    SELECT cell, query, repetition, stream
    FROM (SELECT cell, query, repetition, stream,
                 row_number() OVER (PARTITION BY cell, query ORDER BY error IS NOT NULL, wall_ns, repetition, stream)
                     AS k,
                 coalesce(nullif(count(*) FILTER (WHERE error IS NULL) OVER (PARTITION BY cell, query), 0),
                          count(*) OVER (PARTITION BY cell, query)) AS n
          FROM results)
    WHERE k IN ((n + 1) // 2, n // 2 + 1)),
node_work AS (
    SELECT cell, query, CAST(avg(ns) AS BIGINT) AS node_work_ns, CAST(avg(total) AS BIGINT) AS node_sum_ns
    FROM (SELECT cell, query, repetition, stream, max(execution_ns) AS ns, sum(execution_ns) AS total
          FROM results_node SEMI JOIN middle USING (cell, query, repetition, stream) GROUP BY ALL)
    GROUP BY ALL),
node_comp AS (
    SELECT cell, query, CAST(avg(COLUMNS('^c_(.*)')) AS BIGINT) AS "n_\1"
    FROM (SELECT cell, query, repetition, stream, sum(COLUMNS('^c_(.*)')) AS "c_\1"
          FROM results_node SEMI JOIN middle USING (cell, query, repetition, stream) GROUP BY ALL)
    GROUP BY ALL),
comp AS (
    SELECT cell, query, CAST(avg(COLUMNS('^c_(.*)')) AS BIGINT) AS "c_\1"
    FROM results SEMI JOIN middle USING (cell, query, repetition, stream) GROUP BY ALL),
q AS (
SELECT cell, nodes, scheme, node_cpu, node_memory_mb, node_read_mbps, link_mbit, link_latency_ms, parallel_workers,
       streams, cold, coalesce(kernel, 'default') AS kernel, coalesce(storage, 'local') AS storage, query,
       count(*) AS runs,
       CAST(median(wall_ns) FILTER (WHERE error IS NULL) AS BIGINT) AS wall_ns,
       bool_or(timed_out) AS timed_out, bool_or(error IS NOT NULL AND NOT timed_out) AS failed,
       any_value(error) AS error,
       CAST(avg(estimated_ns) AS BIGINT) AS estimated_ns, CAST(avg(net_bytes) AS BIGINT) AS net_bytes,
       mode("limit") AS "limit", any_value(kernel_advice) AS kernel_advice,
       CAST(avg(planning_ns) AS BIGINT) AS planning_ns, CAST(avg(analyze_ns) AS BIGINT) AS analyze_ns,
       max(host_cpus) AS host_cpus
FROM results
GROUP BY cell, nodes, scheme, node_cpu, node_memory_mb, node_read_mbps, link_mbit, link_latency_ms, parallel_workers,
         streams, cold, coalesce(kernel, 'default'), coalesce(storage, 'local'), query)
SELECT q.*, c.* EXCLUDE (cell, query), w.node_work_ns, w.node_sum_ns, n.* EXCLUDE (cell, query)
FROM q LEFT JOIN comp c USING (cell, query) LEFT JOIN node_work w USING (cell, query)
     LEFT JOIN node_comp n USING (cell, query);

-- cell_level: each cell's level of every factor, as text (for grouping cells that differ in one).
CREATE OR REPLACE TABLE cell_level AS
UNPIVOT (
    SELECT DISTINCT cell, CAST(nodes AS VARCHAR) AS nodes, scheme, coalesce(CAST(node_cpu AS VARCHAR), '-') AS node_cpu,
           coalesce(CAST(node_memory_mb AS VARCHAR), '-') AS node_memory_mb,
           coalesce(CAST(node_read_mbps AS VARCHAR), '-') AS node_read_mbps,
           coalesce(CAST(link_mbit AS VARCHAR), '-') AS link_mbit,
           coalesce(CAST(link_latency_ms AS VARCHAR), '-') AS link_latency_ms,
           coalesce(CAST(parallel_workers AS VARCHAR), '-') AS parallel_workers, CAST(streams AS VARCHAR) AS streams,
           CAST(cold AS VARCHAR) AS cold, kernel, storage
    FROM cell_query)
ON nodes, scheme, node_cpu, node_memory_mb, node_read_mbps, link_mbit, link_latency_ms, parallel_workers, streams,
   cold, kernel, storage
INTO NAME factor VALUE level;

-- cell_others: for each cell and factor, the cell's levels of all the other factors (cells with equal
-- text differ in that factor only).
CREATE OR REPLACE TABLE cell_others AS
SELECT l.cell, l.factor, l.level, string_agg(o.factor || '=' || o.level, ' ' ORDER BY o.factor) AS others
FROM cell_level l JOIN cell_level o ON o.cell = l.cell AND o.factor <> l.factor
GROUP BY l.cell, l.factor, l.level;
