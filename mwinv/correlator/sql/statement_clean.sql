-- statement_clean: the statements every analysis reads — those with a window (start and end known, end
-- not before start), and of a statement id recorded twice on a node the first row (statement_dup), each
-- on the OS thread that ran it (statement_thread, where the kernel trace names it). A table, not a view:
-- a view would run its window function again in every query. Two statements, the ids recorded once,
-- then the first rows of the others: the first-row window runs over the duplicated ids' rows only (over
-- every row it held them all at once and could not spill), and one query of both halves had DuckDB
-- materialize every windowed statement to read it twice (15 GB spilled and 130 s at 60 M statements).
--
-- builds:  statement_clean
-- inputs:  statement_typed (the capture's statement with every column of the contract), statement_thread,
--          statement_dup
-- columns: those of the capture's statement table
CREATE TABLE statement_clean AS
SELECT s.* REPLACE (coalesce(t.pid, s.pid) AS pid)
FROM statement_typed s LEFT JOIN statement_thread t USING (node, statement_id)
ANTI JOIN statement_dup d USING (node, statement_id)
WHERE s.start_ns IS NOT NULL AND s.end_ns IS NOT NULL AND s.end_ns >= s.start_ns;
INSERT INTO statement_clean
SELECT s.* REPLACE (coalesce(t.pid, s.pid) AS pid)
FROM statement_typed s LEFT JOIN statement_thread t USING (node, statement_id)
SEMI JOIN statement_dup d USING (node, statement_id)
WHERE s.start_ns IS NOT NULL AND s.end_ns IS NOT NULL AND s.end_ns >= s.start_ns
QUALIFY row_number() OVER (PARTITION BY s.node, s.statement_id ORDER BY s.start_ns) = 1;
