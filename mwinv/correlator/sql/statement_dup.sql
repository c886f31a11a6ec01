-- statement_dup: the statement ids recorded more than once on a node, and how often (load.py warns of
-- them; statement_clean keeps their first row). Built once, which both read. Grouped first by the id
-- alone, then by node and id over the ids seen twice only: a grouping of every statement keyed by the
-- node's text as well could not spill (60 M statements ran out of 256 and, 3 runs of 5, of 512 MiB,
-- where the id alone fits in 256). Not grouped where the ids are known to be each recorded once (the
-- variable statement_ids_unique, load._typed_statement: a bitmap of them), as most captures' are.
--
-- builds:  statement_dup
-- inputs:  statement_typed (the capture's statement with every column of the contract); the variable
--          statement_ids_unique
-- columns: node, statement_id, n
CREATE TABLE statement_dup AS
SELECT node, statement_id, count(*) AS n FROM statement_typed
SEMI JOIN (SELECT statement_id FROM statement_typed WHERE getvariable('statement_ids_unique') IS NOT true
           GROUP BY ALL HAVING count(*) > 1) USING (statement_id)
GROUP BY ALL HAVING count(*) > 1;
