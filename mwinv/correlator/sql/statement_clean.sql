-- statement_clean: the statements every analysis reads — those with a window (start and end known, end
-- not before start), and of a statement id recorded twice on a node the first row (load.py warns of
-- both). A table, not a view: a view would run its window function again in every query.
--
-- inputs:  statement_typed (the capture's statement with every column of the contract)
-- columns: those of the capture's statement table
CREATE OR REPLACE TABLE statement_clean AS
SELECT * EXCLUDE (rn) FROM (
    SELECT *, row_number() OVER (PARTITION BY node, statement_id ORDER BY start_ns) AS rn
    FROM statement_typed WHERE start_ns IS NOT NULL AND end_ns IS NOT NULL AND end_ns >= start_ns)
WHERE rn = 1;
