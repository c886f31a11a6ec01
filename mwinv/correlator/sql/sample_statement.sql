-- sample_statement: the kernel-mode CPU samples (perf cpu-clock) taken while a top-level statement ran
-- on that pid, with that statement. Only the statements of pids with such samples are joined: the
-- ASOF join sorted every statement of the capture (60 M, a 600 s pgbench capture) even without samples.
--
-- builds:  sample_statement
-- inputs:  cpu_sample, statement_clean
-- columns: node, pid, ts_ns, stack_id, statement_id
CREATE TABLE sample_statement AS
SELECT c.node, c.pid, c.ts_ns, c.stack_id, s.statement_id
FROM cpu_sample c
-- top-level statements only in the join: a sample after a nested statement ended is its parent's
ASOF JOIN (SELECT * FROM statement_clean
           WHERE (node, pid) IN (SELECT (node, pid) FROM cpu_sample WHERE kernel) AND coalesce(nesting_level, 0) = 0) s
  ON c.node = s.node AND c.pid = s.pid AND c.ts_ns >= s.start_ns
WHERE c.kernel AND c.ts_ns < s.end_ns;
