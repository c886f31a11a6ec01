-- statement_clean: the statements every analysis reads — those with a window (start and end known, end
-- not before start), and of a statement id recorded twice on a node the first row (load.py warns of
-- both), each on the OS thread that ran it (statement_thread, where the kernel trace names it). A
-- table, not a view: a view would run its window function again in every query. The first-row window
-- runs over the duplicated ids' rows only: over every row it held them all at once and was the one
-- operator that could not spill (out of DuckDB's 300 MB at 2 M pgbench statements); the grouping and
-- the joins that find the duplicates spill.
--
-- builds:  statement_clean
-- inputs:  statement_typed (the capture's statement with every column of the contract), statement_thread
-- columns: those of the capture's statement table
CREATE TABLE statement_clean AS
WITH windowed AS NOT MATERIALIZED (
    SELECT s.* REPLACE (coalesce(t.pid, s.pid) AS pid)
    FROM statement_typed s LEFT JOIN statement_thread t USING (node, statement_id)
    WHERE s.start_ns IS NOT NULL AND s.end_ns IS NOT NULL AND s.end_ns >= s.start_ns),
dup AS (SELECT node, statement_id FROM windowed GROUP BY ALL HAVING count(*) > 1)
(SELECT w.* FROM windowed w ANTI JOIN dup USING (node, statement_id))
UNION ALL
(SELECT w.* FROM windowed w SEMI JOIN dup USING (node, statement_id)
 QUALIFY row_number() OVER (PARTITION BY w.node, w.statement_id ORDER BY w.start_ns) = 1);
