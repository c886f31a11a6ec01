"""The response variables of one cell, per query run: its coordinator statement's wall time and
components, class and model estimate, and per data node its part (execution by component, bytes it
shipped to the coordinator, rows, fetch round trips, whether it was the critical path)."""

from __future__ import annotations

import pyarrow as pa

from mwinv.capture.tables import ATTRIBUTION_COMPONENTS
from mwinv.cluster.harness import COORDINATOR
from mwinv.correlator.load import CaptureDB, literal, session_tables
from mwinv.correlator.nodes import node_parts

i32, i64, f64, s, b = pa.int32(), pa.int64(), pa.float64(), pa.string(), pa.bool_()
COMPONENT_COLUMNS = [(f"c_{c}", i64) for c in ATTRIBUTION_COMPONENTS]
RESULT_SCHEMA = pa.schema([
    ("experiment", s), ("cell", s), ("nodes", i32), ("scheme", s), ("node_cpu", f64), ("node_memory_mb", i64),
    ("node_read_mbps", f64), ("link_mbit", f64), ("link_latency_ms", f64), ("parallel_workers", i32), ("streams", i32), ("cold", b),
    ("kernel", s), ("storage", s), ("query", i32), ("repetition", i32), ("stream", i32), ("wall_ns", i64), ("error", s), ("timed_out", b),
    ("statement_id", i64), ("limit", s), ("estimated_ns", i64), ("critical_node", s), ("net_bytes", i64),
    ("kernel_advice", s),
    # from the cell's untimed EXPLAIN ANALYZE pass (measure.py; its operators in results_op): the
    # coordinator's planning (remote estimates included) and the instrumented execution
    ("planning_ns", i64), ("analyze_ns", i64), ("host_cpus", i32),
    *COMPONENT_COLUMNS,
])
NODE_SCHEMA = pa.schema([
    ("cell", s), ("query", i32), ("repetition", i32), ("stream", i32), ("node", s), ("execution_ns", i64),
    ("idle_ns", i64), ("sent_bytes", i64), ("rows", i64), ("fetches", i64), ("critical", b), *COMPONENT_COLUMNS,
])
TIMEOUT = "canceling statement due to statement timeout"


def _statement_of(db: CaptureDB, run) -> int | None:
    """The coordinator statement that ran `run`: its backend's longest top-level statement inside the
    run's window (the runner's clock is the capture's)."""
    row = db.sql(f"""
        SELECT statement_id FROM statement_clean
        WHERE node = {literal(COORDINATOR)} AND pid = {int(run.backend_pid or -1)}
          AND coalesce(nesting_level, 0) = 0
          AND start_ns >= {int(run.start_ns)} AND end_ns <= {int(run.end_ns)}
        ORDER BY end_ns - start_ns DESC LIMIT 1""").fetchone()
    return row[0] if row else None


def _one(db: CaptureDB, sql: str):
    row = db.sql(sql).fetchone()
    return row[0] if row else None


def cell_rows(db: CaptureDB, experiment: str, cell: str, levels: dict, runs: list) -> tuple[list[dict], list[dict]]:
    rows, node_rows = [], []
    have = session_tables(db)
    for rep, run in runs:
        sid = _statement_of(db, run)
        row = {"experiment": experiment, "cell": cell, **levels, "query": run.query, "repetition": rep,
               "stream": run.stream, "wall_ns": run.end_ns - run.start_ns, "error": run.error,
               "timed_out": bool(run.error and TIMEOUT in run.error), "statement_id": sid}
        if sid is not None:
            comps = dict(db.sql(f"""SELECT component, ns FROM statement_attribution
                                    WHERE node = {literal(COORDINATOR)} AND statement_id = {sid}""").fetchall())
            row.update({f"c_{c}": int(comps.get(c, 0)) for c in ATTRIBUTION_COMPONENTS})
            if "statement_class" in have:
                row["limit"] = _one(db, f"SELECT \"limit\" FROM statement_class WHERE node = {literal(COORDINATOR)} "
                                        f"AND statement_id = {sid}")
            if "statement_estimate" in have:
                row["estimated_ns"] = _one(db, f"SELECT estimated_ns FROM statement_estimate WHERE statement_id = {sid}")
            parts = node_parts(db, sid)
            row["net_bytes"] = sum(p.sent_bytes for p in parts)
            row["critical_node"] = next((p.node for p in parts if p.critical), None)
            for p in parts:
                node_rows.append({"cell": cell, "query": run.query, "repetition": rep, "stream": run.stream,
                                  "node": p.node, "execution_ns": p.execution_ns, "idle_ns": p.idle_ns,
                                  "sent_bytes": p.sent_bytes, "rows": p.rows, "fetches": p.fetches,
                                  "critical": p.critical,
                                  **{f"c_{c}": int(p.components.get(c, 0)) for c in ATTRIBUTION_COMPONENTS}})
        rows.append(row)
    return rows, node_rows
