-- statement_clean: the statements every analysis reads — those with a window (start and end known, end
-- not before start), and of a statement id recorded twice on a node the first row (load.py warns of
-- both), each on the OS thread that ran it (statement_thread, where the kernel trace names it). A
-- table, not a view: a view would run its window function again in every query.
--
-- builds:  statement_clean
-- inputs:  statement_typed (the capture's statement with every column of the contract), statement_thread
-- columns: those of the capture's statement table
CREATE TABLE statement_clean AS
SELECT * EXCLUDE (rn) FROM (
    SELECT s.* REPLACE (coalesce(t.pid, s.pid) AS pid),
           row_number() OVER (PARTITION BY s.node, s.statement_id ORDER BY s.start_ns) AS rn
    FROM statement_typed s LEFT JOIN statement_thread t USING (node, statement_id)
    WHERE s.start_ns IS NOT NULL AND s.end_ns IS NOT NULL AND s.end_ns >= s.start_ns)
WHERE rn = 1;
