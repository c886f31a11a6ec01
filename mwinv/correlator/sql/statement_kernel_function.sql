-- statement_kernel_function: kernel hot spots per statement ([Tanigawa]; hotspots.py): the kernel
-- paths its pid slept in (each sleeping stretch carries the stack of the switch that put the task to
-- sleep: seg_off_stack) and the kernel functions that ran on its behalf (kernel-mode CPU samples; the
-- function tracer's exact calls where the kernel allowed it, untimed: ns null), one row per function and
-- source with its most frequent stack as the example (ties: the first by name, so that every run names
-- the same one).
--
-- builds:  statement_kernel_function
-- inputs:  seg_off_stack, stack_frame, sample_statement, call_statement, statement_clean; the variable
--          perf_period_ns (the manifest's perf_sample_period_ns)
-- columns: node, statement_id, query_id, function, stack, samples, ns, share, source
CREATE TABLE statement_kernel_function AS
WITH raw AS (
    SELECT g.node, g.statement_id, 'sched-stack' AS source,
           regexp_replace(coalesce(f.useful[1], f.frames[1]), '[+].*$', '') AS function,
           array_to_string(f.frames[1:8], ' <- ') AS stack,
           sum(g.segments) AS samples, sum(g.ns) AS ns
    FROM seg_off_stack g JOIN stack_frame f USING (node, stack_id)
    GROUP BY ALL
    UNION ALL
    SELECT x.node, x.statement_id, 'perf-cpu-clock' AS source,
           regexp_replace(f.frames[1], '[+].*$', '') AS function,
           array_to_string(f.frames[1:8], ' <- ') AS stack,
           count(*) AS samples, count(*) * getvariable('perf_period_ns') AS ns
    FROM sample_statement x JOIN stack_frame f ON f.node = x.node AND f.stack_id = x.stack_id
    GROUP BY ALL
    UNION ALL
    SELECT node, statement_id, 'ftrace-function' AS source, function, function || ' <- ' || parent AS stack,
           calls AS samples, NULL AS ns
    FROM call_statement),
per_function AS (
    SELECT node, statement_id, source, function, first(stack ORDER BY coalesce(ns, samples) DESC, stack) AS stack,
           sum(samples) AS samples, sum(ns) AS ns
    FROM raw GROUP BY node, statement_id, source, function)
SELECT p.node, p.statement_id, s.query_id, p.function, p.stack, p.samples, p.ns,
       p.ns / nullif(sum(p.ns) OVER (PARTITION BY p.node, p.statement_id, p.source), 0) AS share,
       p.source
FROM per_function p
-- the query ids of these statements only: a join with every statement built on all of them (60 M)
JOIN (SELECT node, statement_id, query_id FROM statement_clean
      WHERE (node, statement_id) IN (SELECT (node, statement_id) FROM per_function)) s USING (node, statement_id);
