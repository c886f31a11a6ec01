-- One record per statement execution, drained from the ring
CREATE EXTENSION mwinv;
SELECT mwinv_reset();
SELECT count(*) FROM generate_series(1, 1000);
SELECT 1 AS one;
SELECT 1/0;
SELECT x/(x-2) FROM generate_series(1, 3) x;
PREPARE p(int) AS SELECT $1 + 1 AS next;
EXECUTE p(1);
EXECUTE p(2);
DEALLOCATE p;
-- reset, count, one, 1/0 (planning error), x/(x-2) (executor error), 2 x EXECUTE
SELECT query_id IS NOT NULL AS has_query_id, pid = pg_backend_pid() AS mine, leader_pid,
       rows, errored, utility, nesting_level, end_ns >= start_ns AS ordered,
       start_wall_ns > 0 AS has_wall, parent_statement_id
FROM mwinv_drain() ORDER BY statement_id;
-- the drain statement itself is the one pending record
SELECT buffer_size > 0 AS sized, pending, dropped FROM mwinv_info;
SELECT query FROM mwinv_texts ORDER BY query COLLATE "C";
-- resource deltas: always with resource_min_cost = 0, never with -1
SET mwinv.resource_min_cost = 0;
SELECT count(*) FROM generate_series(1, 100000);
SET mwinv.resource_min_cost = -1;
SELECT count(*) FROM generate_series(1, 100000);
RESET mwinv.resource_min_cost;
SELECT utility, cpu_user_ns IS NOT NULL AS measured, cpu_user_ns + cpu_sys_ns >= 0 AS cpu_ok, rows
FROM mwinv_drain() WHERE NOT utility OR rows > 0 ORDER BY statement_id;
-- the records' clock: CLOCK_MONOTONIC, between two readings of it
SELECT mwinv_clock_ns() <= mwinv_clock_ns() AS monotonic, mwinv_clock_ns() > 0 AS positive;
