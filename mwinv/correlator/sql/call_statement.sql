-- call_statement: the function tracer's calls (kernel_function_call, where the kernel allowed the tracer:
-- the kernel-knob families' functions only) made while a top-level statement ran on that pid, counted per
-- statement, function and caller (as sample_statement joins perf's samples).
--
-- builds:  call_statement
-- inputs:  kernel_function_call, statement_clean
-- columns: node, statement_id, function, parent, calls
CREATE TABLE call_statement AS
SELECT c.node, s.statement_id, c.function, c.parent, count(*) AS calls
FROM kernel_function_call c
-- top-level statements only in the join: a call after a nested statement ended belongs to its parent
ASOF JOIN (SELECT * FROM statement_clean
           WHERE (node, pid) IN (SELECT (node, pid) FROM kernel_function_call) AND coalesce(nesting_level, 0) = 0) s
  ON c.node = s.node AND c.pid = s.pid AND c.ts_ns >= s.start_ns
WHERE c.ts_ns < s.end_ns
GROUP BY ALL;
