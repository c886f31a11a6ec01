-- query_summary: per query (a statement without a query id stands alone, keyed by its negated id):
-- its executions, their wall time, the components of that time, its longest execution (the one
-- advice is given for). One list for the terminal (mwinv-correlate) and the report. A data node's
-- statement run for a coordinator statement (statement_link) is a part of that one, not ranked.
-- In a duty-cycled capture (load.open_capture sets the variable duty_cycled) a query's components are
-- those of its executions a window covered whole (traced_statement), scaled to the time of all of
-- them, where any was, and its example (for advice) the longest of those. Linear in the statements:
-- the components are summed per query straight from the attribution rows (they carry the query id),
-- joined only with the small sets of linked and (duty-cycled) traced statements (query_attribution: a
-- statement of its rusage alone summed as its one row, expanded to components once summed), and the
-- executions counted from the statements' narrow copy (slice_statement), those the attribution covers
-- (top-level, not a parallel worker, of a node it has rows of, keyed below the cut of a capture
-- correlated so far in parts: attributed_until, incremental.py). Joining every attribution row with its statement
-- spilled and took 27 s on a 120 s capture (12 M statements) against 3.1 s on a 30 s one. The nodes
-- the attribution has rows of are a list looked up, not a semi join: DuckDB built that join's hash
-- table on the statements (11 M), out of a correlated capture's opening's 768 MiB.
--
-- builds:  query_summary
-- inputs:  slice_statement, query_attribution, statement_link; the variables duty_cycled,
--          attributed_until
-- columns: key, query_id, query_text_hash, node (of its longest execution), nodes, calls, traced_calls,
--          total_ns, from_workers_ns, example_id, components (list of {c, ns}: ns a DOUBLE)
CREATE TABLE query_summary AS
WITH per_node AS (
    SELECT key, node, component, sum(ns) AS ns, coalesce(sum(ns) FILTER (WHERE traced), 0) AS traced_ns,
           sum(from_workers_ns) AS from_workers_ns
    FROM query_attribution GROUP BY ALL),
per AS (
    SELECT key, component, sum(ns) AS ns, sum(traced_ns) AS traced_ns, sum(from_workers_ns) AS from_workers_ns
    FROM per_node GROUP BY ALL),
stmt AS (
    SELECT coalesce(s.query_id, -s.statement_id) AS key, s.query_id, s.query_text_hash, s.node, s.statement_id,
           s.end_ns - s.start_ns AS wall_ns, s.traced
    FROM slice_statement s
    WHERE coalesce(s.nesting_level, 0) = 0 AND NOT s.worker
      AND s.key_ns < coalesce(getvariable('attributed_until'), 9223372036854775807)
      AND list_contains((SELECT list(DISTINCT node) FROM per_node), s.node)
      AND (s.node, s.statement_id) NOT IN (SELECT (node, statement_id) FROM statement_link)),
g AS (
    SELECT key, any_value(query_id) AS query_id, any_value(query_text_hash) AS query_text_hash,
           arg_max(node, wall_ns) AS node, string_agg(DISTINCT node, ',' ORDER BY node) AS nodes,
           count(*) AS calls, count(*) FILTER (WHERE traced) AS traced_calls, sum(wall_ns) AS total_ns,
           coalesce(sum(wall_ns) FILTER (WHERE traced), 0) AS traced_ns,
           CASE WHEN getvariable('duty_cycled') AND bool_or(traced)
                THEN arg_max(statement_id, wall_ns) FILTER (WHERE traced)
                ELSE arg_max(statement_id, wall_ns) END AS example_id
    FROM stmt GROUP BY key),
comp AS (
    SELECT p.key, p.component, p.from_workers_ns,
           CASE WHEN getvariable('duty_cycled') AND g.traced_ns > 0 THEN p.traced_ns * g.total_ns / g.traced_ns
                ELSE p.ns END::DOUBLE AS ns
    FROM per p JOIN g USING (key))
SELECT g.key, g.query_id, g.query_text_hash, g.node, g.nodes, g.calls, g.traced_calls, g.total_ns,
       coalesce(sum(c.from_workers_ns), 0) AS from_workers_ns,
       g.example_id, list({'c': c.component, 'ns': c.ns} ORDER BY c.component) AS components
FROM g JOIN comp c USING (key)
GROUP BY g.key, g.query_id, g.query_text_hash, g.node, g.nodes, g.calls, g.traced_calls, g.total_ns, g.example_id;
