-- stack_frame: each kernel stack's frames, and those below the scheduler's (which say only "the task
-- slept": the function worth naming is the first one below them).
--
-- builds:  stack_frame
-- inputs:  kernel_stack; the variable scheduler_frames (hotspots.SCHEDULER_FRAMES)
-- columns: node, stack_id, frames, useful
CREATE TABLE stack_frame AS
SELECT node, stack_id, frames,
       list_filter(frames, f -> NOT list_contains(getvariable('scheduler_frames'),
                                                  regexp_replace(f, '[+.].*$', ''))) AS useful
FROM kernel_stack;
