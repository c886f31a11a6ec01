-- statement_dup: the statement ids recorded more than once on a node, and how often (load.py warns of
-- them; statement_clean keeps their first row). Built once, which both read. Grouped first by the id
-- alone, then by node and id over the ids seen twice only: a grouping of every statement keyed by the
-- node's text as well could not spill (60 M statements ran out of 256 and, 3 runs of 5, of 512 MiB,
-- where the id alone fits in 256).
--
-- builds:  statement_dup
-- inputs:  statement_typed (the capture's statement with every column of the contract)
-- columns: node, statement_id, n
CREATE TABLE statement_dup AS
SELECT node, statement_id, count(*) AS n FROM statement_typed
SEMI JOIN (SELECT statement_id FROM statement_typed GROUP BY ALL HAVING count(*) > 1) USING (statement_id)
GROUP BY ALL HAVING count(*) > 1;
