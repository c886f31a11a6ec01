-- duration_text: a duration in ns as mwinv.fmt.duration writes it ('1,234.5 ms', '412.3 µs', '850 ns'),
-- for the evidence SQL words itself: an OLTP statement of 120 µs read '0.1 ms' in '%.1f ms'
-- (tests/test_sql_files.py checks the two agree).
--
-- builds:  duration_text
-- inputs:  (none: a scalar macro)
-- columns: (a scalar macro)
CREATE MACRO duration_text(ns) AS
CASE WHEN ns IS NULL THEN '-'
     WHEN abs(ns) >= 999950 OR ns = 0 THEN format('{:,.1f} ms', ns / 1e6)
     WHEN abs(ns) >= 999.5 THEN printf('%.1f µs', ns / 1e3)
     ELSE printf('%.0f ns', ns::DOUBLE) END;
