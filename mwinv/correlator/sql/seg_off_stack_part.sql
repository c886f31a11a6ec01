-- seg_off_stack_part: one time slice's sleeping stretches per statement and the kernel stack of the
-- switch that put the task to sleep (the kernel hot spots' off-CPU part).
--
-- builds:  seg_off_stack_part
-- inputs:  segment_code; the variable segment_codes
-- slice:   pid
-- columns: node (its dbms_node code), statement_id, stack_id, segments, ns
CREATE TABLE seg_off_stack_part AS
SELECT node, sid AS statement_id, off_stack AS stack_id, count(*)::BIGINT AS segments,
       sum(ts_end - ts)::BIGINT AS ns
FROM segment_code
WHERE ts_end >= 0 AND off_stack >= 0 AND cpu_state = getvariable('segment_codes').cpu.sleeping
GROUP BY ALL;
