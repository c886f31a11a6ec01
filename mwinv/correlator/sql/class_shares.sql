-- class_shares: per root statement, the share of its execution time per class (s_cpu ... s_remote, and
-- s_unexplained: other_wait + not_allocated), explained (all but unexplained), its limit `lim`
-- (dbms-internal when explained is below the variable internal_threshold, else the first largest
-- of the limit classes in classify.LIMIT_CLASSES' order), its confidence, and `none` (no
-- attribution rows). The one place these rules are written: the classification and the advice read it.
-- A table macro over a model's inputs, read as query_table(inputs || '_statement') etc.: inputs 'model'
-- (the capture's: model_statement, ...) or 'advice' (the advice's examples: advice_statement, ...).
--
-- builds:  class_shares
-- inputs:  statement_shares, model_statement; the variable internal_threshold
-- columns: statement_shares', node, s_<class> per classify.CLASS_COMPONENTS, none, explained, top, lim,
--          confidence (tests/test_sql_files.py checks the classes against classify.py)
CREATE MACRO class_shares(inputs) AS TABLE
WITH c AS (
    SELECT sh.*, s.node,
           CASE WHEN db_ns > 0 THEN (coalesce(cpu_user, 0) + coalesce(cpu_sys, 0)) / db_ns ELSE 0 END AS s_cpu,
           CASE WHEN db_ns > 0 THEN coalesce(disk_seq, 0) / db_ns ELSE 0 END AS s_disk_seq,
           CASE WHEN db_ns > 0 THEN coalesce(disk_random, 0) / db_ns ELSE 0 END AS s_disk_random,
           CASE WHEN db_ns > 0 THEN coalesce(network, 0) / db_ns ELSE 0 END AS s_network,
           CASE WHEN db_ns > 0 THEN coalesce(lock_wait, 0) / db_ns ELSE 0 END AS s_lock,
           CASE WHEN db_ns > 0 THEN coalesce(run_queue, 0) / db_ns ELSE 0 END AS s_run_queue,
           CASE WHEN db_ns > 0 THEN coalesce(remote_wait, 0) / db_ns ELSE 0 END AS s_remote,
           CASE WHEN db_ns > 0 THEN (coalesce(other_wait, 0) + coalesce(not_allocated, 0)) / db_ns
                ELSE 0 END AS s_unexplained,
           cpu_user IS NULL AND cpu_sys IS NULL AND disk_seq IS NULL AND disk_random IS NULL AND network IS NULL
               AND remote_wait IS NULL AND lock_wait IS NULL AND run_queue IS NULL AND other_wait IS NULL
               AND client_wait IS NULL AND not_allocated IS NULL AS none
    FROM statement_shares(inputs) sh JOIN query_table(inputs || '_statement') s USING (statement_id)),
d AS (
    SELECT *, s_cpu + s_disk_seq + s_disk_random + s_network + s_lock + s_run_queue + s_remote AS explained,
           greatest(s_cpu, s_disk_seq, s_disk_random, s_network, s_lock, s_run_queue, s_remote) AS top
    FROM c),
e AS (
    SELECT *, CASE WHEN explained < getvariable('internal_threshold') THEN 'dbms-internal'
                   WHEN s_cpu = top THEN 'cpu' WHEN s_disk_seq = top THEN 'disk_seq'
                   WHEN s_disk_random = top THEN 'disk_random' WHEN s_network = top THEN 'network'
                   WHEN s_lock = top THEN 'lock' WHEN s_run_queue = top THEN 'run_queue'
                   WHEN s_remote = top THEN 'remote' END AS lim
    FROM d)
SELECT *, CASE WHEN lim = 'dbms-internal' THEN 1 - explained
               ELSE (CASE lim WHEN 'cpu' THEN s_cpu WHEN 'disk_seq' THEN s_disk_seq WHEN 'disk_random' THEN s_disk_random
                              WHEN 'network' THEN s_network WHEN 'lock' THEN s_lock WHEN 'run_queue' THEN s_run_queue
                              WHEN 'remote' THEN s_remote END) / explained END AS confidence
FROM e;
