-- query_summary: per query (a statement without a query id stands alone, keyed by its negated id):
-- its executions, their wall time, the components of that time, its longest execution (the one
-- advice is given for). One list for the terminal (mwinv-correlate) and the report. A data node's
-- statement run for a coordinator statement (statement_link) is a part of that one, not ranked.
-- In a duty-cycled capture (more windows than nodes in trace_window) a query's components are
-- those of its executions a window covered whole, scaled to the time of all of them, where any was.
--
-- inputs:  statement_clean, statement_attribution, traced_statement, trace_window, statement_link
-- columns: key, query_id, query_text_hash, node (of its longest execution), nodes, calls, traced_calls,
--          total_ns, from_workers_ns, example_id, components (list of {c, ns}: ns a DOUBLE)
CREATE OR REPLACE TABLE query_summary AS
WITH a AS (
    SELECT coalesce(s.query_id, -s.statement_id) AS key, s.query_id, s.query_text_hash, s.node, s.statement_id,
           s.end_ns - s.start_ns AS wall_ns, a.component, a.ns, a.from_workers_ns,
           t.statement_id IS NOT NULL AS traced
    FROM statement_attribution a JOIN statement_clean s USING (node, statement_id)
         LEFT JOIN traced_statement t USING (node, statement_id)
    WHERE (s.node, s.statement_id) NOT IN (SELECT (node, statement_id) FROM statement_link)),
stmt AS (
    SELECT key, node, statement_id, any_value(query_id) AS query_id, any_value(query_text_hash) AS query_text_hash,
           any_value(wall_ns) AS wall_ns, any_value(traced) AS traced, sum(from_workers_ns) AS from_workers_ns
    FROM a GROUP BY key, node, statement_id),
g AS (
    SELECT key, any_value(query_id) AS query_id, any_value(query_text_hash) AS query_text_hash,
           arg_max(node, wall_ns) AS node, string_agg(DISTINCT node, ',' ORDER BY node) AS nodes,
           count(*) AS calls, count(*) FILTER (WHERE traced) AS traced_calls, sum(wall_ns) AS total_ns,
           coalesce(sum(wall_ns) FILTER (WHERE traced), 0) AS traced_ns,
           coalesce(sum(from_workers_ns), 0) AS from_workers_ns, arg_max(statement_id, wall_ns) AS example_id
    FROM stmt GROUP BY key),
cycled AS (SELECT count(*) > count(DISTINCT node) AS yes FROM trace_window),
comp AS (
    SELECT a.key, a.component,
           CASE WHEN (SELECT yes FROM cycled) AND any_value(g.traced_ns) > 0
                THEN coalesce(sum(a.ns) FILTER (WHERE a.traced), 0) * any_value(g.total_ns) / any_value(g.traced_ns)
                ELSE sum(a.ns) END::DOUBLE AS ns
    FROM a JOIN g USING (key) GROUP BY a.key, a.component)
SELECT g.key, g.query_id, g.query_text_hash, g.node, g.nodes, g.calls, g.traced_calls, g.total_ns, g.from_workers_ns,
       g.example_id, list({'c': c.component, 'ns': c.ns} ORDER BY c.component) AS components
FROM g JOIN comp c USING (key)
GROUP BY ALL;
