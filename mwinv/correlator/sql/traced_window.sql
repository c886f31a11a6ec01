-- traced_window: per node the windows its kernel trace covers whole (every event on): the capture's
-- trace_window, or for a capture from before the recorder wrote its windows one per node, its
-- trace_range.
--
-- builds:  traced_window
-- inputs:  trace_window, trace_range
-- columns: node, lo, hi
CREATE VIEW traced_window AS
SELECT node, lo, hi FROM trace_window
UNION ALL
SELECT node, lo, hi FROM trace_range WHERE NOT EXISTS (SELECT 1 FROM trace_window);
