-- advice_window: the times each example's executions ran: the CPU samples overlapping them tell whether
-- CPUs stood idle.
--
-- builds:  advice_window
-- inputs:  advice_member
-- scope:   request
-- columns: statement_id (the example's), node, start_ns, end_ns
CREATE VIEW advice_window AS SELECT key AS statement_id, node, start_ns, end_ns FROM advice_member;
