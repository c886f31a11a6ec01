-- Other users' pids, query ids and texts only for superusers and pg_read_all_stats;
-- draining and reset are not for everybody
SELECT mwinv_reset();
SELECT 42 AS secret;
CREATE ROLE mwinv_low;
CREATE ROLE mwinv_stats IN ROLE pg_read_all_stats;
SET ROLE mwinv_low;
SELECT count(*) > 0 AS sees_rows, bool_and(pid IS NULL) AS pid_hidden,
       bool_and(query_id IS NULL) AS query_id_hidden
FROM mwinv_statements WHERE username <> current_user;
SELECT count(*) AS visible_texts FROM mwinv_texts WHERE query IS NOT NULL;
SELECT count(*) FROM mwinv_drain();
SELECT mwinv_reset();
RESET ROLE;
SET ROLE mwinv_stats;
SELECT bool_and(pid IS NOT NULL) AS pid_visible FROM mwinv_statements;
SELECT count(*) > 0 AS visible_texts FROM mwinv_texts WHERE query IS NOT NULL;
SELECT count(*) > 0 AS drained FROM mwinv_drain();
SELECT mwinv_reset();
RESET ROLE;
DROP ROLE mwinv_low;
DROP ROLE mwinv_stats;
