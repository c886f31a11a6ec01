-- advice_window: the times each example's executions ran: the CPU samples overlapping them tell whether
-- CPUs stood idle.
--
-- builds:  advice_window
-- inputs:  advice_member, statement
-- scope:   request
-- columns: statement_id (the example's), node, start_ns, end_ns
CREATE TABLE advice_window AS
SELECT m.key AS statement_id, s.node, s.start_ns, s.end_ns FROM advice_member m JOIN statement s USING (statement_id);
