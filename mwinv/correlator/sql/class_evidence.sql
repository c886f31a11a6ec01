-- class_evidence: per root statement its class (the limit, or unknown without attribution rows),
-- explained share, confidence, and the evidence as text: the time in the database, the classes' shares from 0.5 %
-- up (largest first, equal shares in the limit classes' order), explained and unexplained time, the
-- CPU split for a CPU-bound one, its parallel workers, and its I/O per node. The kernel functions'
-- evidence is added in classify.classify for the few statements that have some (statement_class).
-- A table macro over a model's inputs, read as query_table(inputs || '_statement') etc.: inputs 'model'
-- (the capture's: model_statement, ...) or 'advice' (the advice's examples: advice_statement, ...).
--
-- builds:  class_evidence
-- inputs:  class_shares, model_node_inputs, duration_text; the variable internal_threshold
-- columns: node, statement_id, query_id, limit, allocated_share, confidence, evidence
CREATE MACRO class_evidence(inputs) AS TABLE
WITH io AS (
    SELECT statement_id, string_agg(printf('; node %s: seq %.1f MiB, random %d reqs (%.1f MiB), net %.1f MiB',
                                           node, seq_bytes / 1048576, random_reqs::BIGINT,
                                           random_bytes / 1048576, net_bytes / 1048576), '' ORDER BY node) AS lines
    FROM model_node_inputs(inputs) WHERE seq_bytes <> 0 OR random_reqs <> 0 OR net_bytes <> 0 GROUP BY 1)
SELECT node, statement_id, query_id,
       CASE WHEN none THEN 'unknown' ELSE lim END AS "limit",
       CASE WHEN none THEN 0.0 ELSE explained END AS allocated_share,
       CASE WHEN none THEN 0.0 ELSE confidence END AS confidence,
       CASE WHEN none THEN 'no attribution rows for this statement (kernel side missing?)' ELSE
           duration_text(db_ns) || ' in the database; '
           -- (share, -position, name) sorted descending: equal shares keep the limit classes' order
           || coalesce(nullif(array_to_string(list_transform(
                  list_filter(list_sort([{'share': s_cpu, 'pos': 0, 'name': 'cpu'},
                                         {'share': s_disk_seq, 'pos': -1, 'name': 'disk_seq'},
                                         {'share': s_disk_random, 'pos': -2, 'name': 'disk_random'},
                                         {'share': s_network, 'pos': -3, 'name': 'network'},
                                         {'share': s_lock, 'pos': -4, 'name': 'lock'},
                                         {'share': s_run_queue, 'pos': -5, 'name': 'run_queue'},
                                         {'share': s_remote, 'pos': -6, 'name': 'remote'}], 'DESC'),
                              x -> x.share >= 0.005),
                  x -> printf('%s %.0f%%', x.name, 100 * x.share)), ', '), ''), 'no resource time')
           || printf('; explained %.0f%% (threshold %.0f%%), unexplained %.0f%% (other_wait %s, not_allocated %s)',
                     100 * explained, 100 * getvariable('internal_threshold'), 100 * s_unexplained,
                     duration_text(coalesce(other_wait, 0)), duration_text(coalesce(not_allocated, 0)))
           || CASE WHEN lim = 'cpu' THEN printf('; user %s, sys %s', duration_text(coalesce(cpu_user, 0)),
                                                duration_text(coalesce(cpu_sys, 0))) ELSE '' END
           || CASE WHEN from_workers_ns <> 0 THEN '; parallel workers ' || duration_text(from_workers_ns)
                   ELSE '' END
           || coalesce(io.lines, '')
       END AS evidence
FROM class_shares(inputs) LEFT JOIN io USING (statement_id) ORDER BY statement_id
