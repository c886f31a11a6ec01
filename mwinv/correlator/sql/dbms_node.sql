-- dbms_node: the nodes that ran statements, each with the code the segment walk gives it (its rank by
-- name from 0: the walk's numpy columns hold codes, its sums are labelled again from this table).
--
-- builds:  dbms_node
-- inputs:  statement_clean
-- columns: code (SMALLINT), node
CREATE TABLE dbms_node AS
SELECT (row_number() OVER (ORDER BY node) - 1)::SMALLINT AS code, node
FROM (SELECT DISTINCT node FROM statement_clean);
