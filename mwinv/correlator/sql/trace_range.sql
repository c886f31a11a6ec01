-- trace_range: per node, the span its kernel trace covers (its first and last event): a statement
-- inside it is attributed from the kernel's events, one outside from what its DBMS reported.
--
-- builds:  trace_range
-- inputs:  kernel_event
-- columns: node, lo, hi (ns on the node's clock)
CREATE TABLE trace_range AS
SELECT node, min(ts_ns) AS lo, max(ts_ns) AS hi FROM kernel_event GROUP BY node;
