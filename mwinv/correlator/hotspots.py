"""Kernel hot spots per statement ([Tanigawa], per statement and automatic): the kernel functions
that ran on the statement's behalf (perf cpu-clock kernel samples, or function tracer hits where the
kernel allows it) and the kernel paths it slept in (stacks recorded on sched_switch):
sql/stack_frame.sql, sql/sample_statement.sql and sql/statement_kernel_function.sql."""

from __future__ import annotations


# Scheduler frames say only "the task slept"; the function worth naming is the first one below them.
SCHEDULER_FRAMES = ("__schedule", "schedule", "schedule_timeout", "schedule_hrtimeout_range_clock",
                    "schedule_hrtimeout_range", "preempt_schedule", "preempt_schedule_common",
                    "__cond_resched", "_cond_resched", "io_schedule", "io_schedule_timeout",
                    "schedule_preempt_disabled", "__traceiter_sched_switch")
