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
SELECT ring_file IS NOT NULL AS mapped FROM mwinv_ring_attach(pg_backend_pid());
RESET ROLE;
SET ROLE mwinv_stats;
SELECT bool_and(pid IS NOT NULL) AS pid_visible FROM mwinv_statements;
SELECT count(*) > 0 AS visible_texts FROM mwinv_texts WHERE query IS NOT NULL;
SELECT count(*) > 0 AS drained FROM mwinv_drain();
SELECT mwinv_reset();
-- a reader that maps the ring consumes alone: drains refuse until it detaches
SELECT ring_file LIKE '/dev/shm/mwinv.%' AS in_a_file FROM mwinv_ring_attach(pg_backend_pid());
\set VERBOSITY sqlstate
SELECT count(*) FROM mwinv_drain();
\set VERBOSITY default
SELECT mwinv_ring_detach(pg_backend_pid()) AS detached;
SELECT count(*) >= 0 AS drains_again FROM mwinv_drain();
SELECT ring_file FROM mwinv_ring_attach(0);
RESET ROLE;
DROP ROLE mwinv_low;
DROP ROLE mwinv_stats;
