-- seg_component_part: one time slice's segments summed per statement and component (docs/attribution.md,
-- "Components"), from the segment walk's codes: a statement running across slices has a row per slice.
--
-- builds:  seg_component_part
-- inputs:  segment_code; the variables segment_codes (attribution.segment_codes), file_io_syscalls,
--          network_syscalls, epoll_syscalls, lock_syscalls
-- slice:   pid
-- columns: node (its dbms_node code), statement_id, component, ns
CREATE TABLE seg_component_part AS
WITH c AS (SELECT getvariable('segment_codes') AS v)
SELECT node, sid AS statement_id,
    CASE
      WHEN cpu_state = v.cpu.running OR (cpu_state < 0 AND next_onoff = v.evidence.off) THEN 'cpu'
      WHEN cpu_state = v.cpu.runnable AND next_evidence = v.evidence.on THEN 'run_queue'
      WHEN cpu_state = v.cpu.runnable THEN 'cpu_or_queue'
      WHEN cpu_state < 0 THEN 'not_allocated'
      WHEN in_lock THEN 'lock_wait'
      -- an own request in flight is what a sleep waits for, unless it waits on file descriptors (epoll,
      -- sockets), which no block completion ends (a fault's readahead the task never waited for may still be)
      WHEN io_rand_inflight + io_seq_inflight > 0 AND NOT list_contains(getvariable('network_syscalls'), syscall)
           AND NOT list_contains(getvariable('epoll_syscalls'), syscall) THEN
           CASE WHEN io_rand_inflight > 0 THEN 'disk_random' ELSE 'disk_seq' END
      -- a file syscall that sleeps waits for the disk (a page-cache hit does not sleep)
      WHEN list_contains(getvariable('file_io_syscalls'), syscall) OR disk_sleep THEN
           CASE WHEN file_pattern = v.pattern.seq THEN 'disk_seq' WHEN file_pattern = v.pattern.rand THEN 'disk_random'
                WHEN last_io_kind = 1 THEN 'disk_seq' WHEN last_io_kind = 2 THEN 'disk_random'
                ELSE 'disk_unknown' END
      WHEN list_contains(getvariable('network_syscalls'), syscall) THEN 'network'
      WHEN list_contains(getvariable('epoll_syscalls'), syscall) AND socket_blocked THEN 'network'
      WHEN list_contains(getvariable('epoll_syscalls'), syscall) AND client_blocked THEN 'client_wait'
      WHEN list_contains(getvariable('lock_syscalls'), syscall) THEN 'lock_wait'
      ELSE 'other_wait'
    END AS component,
    sum(ts_end - ts)::BIGINT AS ns
FROM segment_code, c WHERE ts_end >= 0 GROUP BY ALL;
