"""Kernel hot spots per statement ([Tanigawa], per statement and automatic): the kernel functions
that ran on the statement's behalf (perf cpu-clock kernel samples, or function tracer hits where the
kernel allows it) and the kernel paths it slept in (stacks recorded on sched_switch)."""

from __future__ import annotations

from mwinv.correlator.attribution import attribute
from mwinv.correlator.load import CaptureDB, create_empty, literal, session_tables

# Scheduler frames say only "the task slept"; the function worth naming is the first one below them.
SCHEDULER_FRAMES = ("__schedule", "schedule", "schedule_timeout", "schedule_hrtimeout_range_clock",
                    "schedule_hrtimeout_range", "preempt_schedule", "preempt_schedule_common",
                    "__cond_resched", "_cond_resched", "io_schedule", "io_schedule_timeout",
                    "schedule_preempt_disabled", "__traceiter_sched_switch")


def kernel_functions(db: CaptureDB) -> None:
    """The table statement_kernel_function, from `seg_off_stack` (built by attribution.attribute first
    when the session has none)."""
    if "seg_off_stack" not in session_tables(db):
        attribute(db)
    parts = []
    if db.has("kernel_stack"):
        # the names as a literal: a Python list as a query parameter makes DuckDB import pandas
        sched = "[" + ", ".join(map(literal, SCHEDULER_FRAMES)) + "]"
        db.con.execute(f"""
            CREATE OR REPLACE TABLE stack_frame AS
            SELECT node, stack_id, frames,
                   list_filter(frames, f -> NOT list_contains({sched}, regexp_replace(f, '[+.].*$', ''))) AS useful
            FROM kernel_stack""")
    if db.has("kernel_stack") and db.has("kernel_event"):
        # Off-CPU: each sleeping stretch carries the stack of the switch that put the task to sleep.
        parts.append("""
            SELECT g.node, g.statement_id, 'sched-stack' AS source,
                   regexp_replace(coalesce(f.useful[1], f.frames[1]), '[+].*$', '') AS function,
                   array_to_string(f.frames[1:8], ' <- ') AS stack,
                   sum(g.segments) AS samples, sum(g.ns) AS ns
            FROM seg_off_stack g JOIN stack_frame f USING (node, stack_id)
            GROUP BY ALL""")
    if db.has("cpu_sample") and db.has("kernel_stack"):
        # On-CPU: kernel-mode samples, assigned to the statement running on that pid at that instant.
        db.con.execute("""
            CREATE OR REPLACE TABLE sample_statement AS
            SELECT c.node, c.pid, c.ts_ns, c.stack_id, s.statement_id
            FROM cpu_sample c ASOF JOIN statement_clean s
              ON c.node = s.node AND c.pid = s.pid AND c.ts_ns >= s.start_ns
            WHERE c.kernel AND c.ts_ns < s.end_ns AND coalesce(s.nesting_level, 0) = 0""")
        period = db.capture.manifest().get("perf_sample_period_ns", 1_000_000)
        parts.append(f"""
            SELECT x.node, x.statement_id, 'perf-cpu-clock' AS source,
                   regexp_replace(f.frames[1], '[+].*$', '') AS function,
                   array_to_string(f.frames[1:8], ' <- ') AS stack,
                   count(*) AS samples, count(*) * {int(period)} AS ns
            FROM sample_statement x JOIN stack_frame f ON f.node = x.node AND f.stack_id = x.stack_id
            GROUP BY ALL""")
    if not parts:
        create_empty(db.con, "statement_kernel_function")
        return
    db.con.execute(f"""
        CREATE OR REPLACE TABLE statement_kernel_function AS
        WITH raw AS ({' UNION ALL '.join(parts)}),
        per_function AS (
            -- one row per function: its most frequent stack as the example (ties: the first by name, so
            -- that every run names the same one)
            SELECT node, statement_id, source, function, first(stack ORDER BY ns DESC, stack) AS stack,
                   sum(samples) AS samples, sum(ns) AS ns
            FROM raw GROUP BY node, statement_id, source, function)
        SELECT p.node, p.statement_id, s.query_id, p.function, p.stack, p.samples, p.ns,
               p.ns / nullif(sum(p.ns) OVER (PARTITION BY p.node, p.statement_id, p.source), 0) AS share,
               p.source
        FROM per_function p JOIN statement_clean s USING (node, statement_id)""")
