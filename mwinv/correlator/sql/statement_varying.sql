-- statement_varying: the rows of statement_clean (load.statement_clean, a view of them) — those with a
-- window (start and end known, end not before start), and of a statement id recorded twice on a node the
-- first row (statement_dup), each on the OS thread that ran it (statement_thread, where the kernel trace
-- names it) — with the columns that hold more than one value in the capture: a column of one value
-- (the variable one_valued: the node, the DBMS, often the database and the user, what the recorder
-- left NULL; load._typed_statement) is the view's constant, not copied. A table, not a view of the
-- capture's parts: its readers' joins over those ran out of memory and took longer (slice_statement
-- 2.5 -> 3.9 s on a 120 s capture). Two statements, the ids recorded once, then the first rows of the
-- others: the first-row window runs over the duplicated ids' rows only (over every row it held them all
-- at once and could not spill), and one query of both halves had DuckDB materialize every windowed
-- statement to read it twice (15 GB spilled and 130 s at 60 M statements).
--
-- builds:  statement_varying
-- inputs:  statement_typed (the capture's statement with every column of the contract), statement_thread,
--          statement_dup; the variable one_valued
-- columns: those of the capture's statement table but one_valued
CREATE TABLE statement_varying AS
SELECT COLUMNS(c -> NOT list_contains(getvariable('one_valued')::VARCHAR[], c)) FROM (
    SELECT s.* REPLACE (coalesce(t.pid, s.pid) AS pid)
    FROM statement_typed s LEFT JOIN statement_thread t USING (node, statement_id)
    ANTI JOIN statement_dup d USING (node, statement_id)
    WHERE s.start_ns IS NOT NULL AND s.end_ns IS NOT NULL AND s.end_ns >= s.start_ns);
INSERT INTO statement_varying
SELECT COLUMNS(c -> NOT list_contains(getvariable('one_valued')::VARCHAR[], c)) FROM (
    SELECT s.* REPLACE (coalesce(t.pid, s.pid) AS pid)
    FROM statement_typed s LEFT JOIN statement_thread t USING (node, statement_id)
    SEMI JOIN statement_dup d USING (node, statement_id)
    WHERE s.start_ns IS NOT NULL AND s.end_ns IS NOT NULL AND s.end_ns >= s.start_ns
    QUALIFY row_number() OVER (PARTITION BY s.node, s.statement_id ORDER BY s.start_ns) = 1);
