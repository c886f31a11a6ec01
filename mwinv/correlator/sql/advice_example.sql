-- advice_example: the executions advice is asked for (the variable advice_ids: the terminal's and the
-- report's examples), each standing for itself or, too short to advise on alone, for its query id's
-- executions (advice_member).
--
-- builds:  advice_example
-- inputs:  statement; the variable advice_ids
-- scope:   request
-- columns: statement's
CREATE TABLE advice_example AS
SELECT * FROM statement WHERE list_contains(getvariable('advice_ids'), statement_id);
