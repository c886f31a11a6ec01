-- Nested statements (mwinv.track = all), errors inside functions, no stale nesting level
SET mwinv.track = 'all';
CREATE FUNCTION mwinv_f(n int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE r int;
BEGIN
  SELECT count(*) INTO r FROM generate_series(1, n);
  BEGIN
    PERFORM 1/(n - n);
  EXCEPTION WHEN division_by_zero THEN
    r := r + 1;
  END;
  RETURN r;
END $$;
SELECT mwinv_reset();
SELECT mwinv_f(10);
SELECT 2 AS after;
WITH r AS (SELECT * FROM mwinv_drain())
SELECT c.nesting_level, c.errored, c.rows, p.nesting_level AS parent_level,
       c.start_ns >= p.start_ns AND c.end_ns <= p.end_ns AS inside_parent
FROM r c LEFT JOIN r p ON p.statement_id = c.parent_statement_id
ORDER BY c.statement_id;
-- an error in the middle of a top-level statement, then the level is 0 again
SELECT mwinv_f(0) + (SELECT 1/0 FROM generate_series(1, 2) LIMIT 1);
SELECT 3 AS after_error;
SELECT nesting_level, errored FROM mwinv_drain() ORDER BY statement_id;
RESET mwinv.track;
DROP FUNCTION mwinv_f(int);
