-- statement_dup: the statement ids recorded more than once on a node, and how often (load.py warns of
-- them; statement_clean keeps their first row). Built once: a grouping of every statement (17 s at
-- 60 M), which both read.
--
-- builds:  statement_dup
-- inputs:  statement_typed (the capture's statement with every column of the contract)
-- columns: node, statement_id, n
CREATE TABLE statement_dup AS
SELECT node, statement_id, count(*) AS n FROM statement_typed GROUP BY ALL HAVING count(*) > 1;
