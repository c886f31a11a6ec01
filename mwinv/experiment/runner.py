"""Run an experiment plan: each cell on a cluster with its levels (one cluster for the cells that differ
only in caps and kernel settings), the queries under a capture of every node, correlated, its response
variables written as one Parquet part per cell. A cell whose part exists is done: an interrupted run
resumes where it stopped."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Callable

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq

from mwinv import kernel_knobs, kernel_settings, privfile
from mwinv.cluster import storage
from mwinv.errors import MwinvError
from mwinv.experiment.measure import OP_SCHEMA, measure_plans
from mwinv.experiment.plan import Cell, Plan
from mwinv.experiment.results import NODE_SCHEMA, RESULT_SCHEMA, cell_rows


def results_dir(out: Path, table: str = "results") -> Path:
    return out / table


def done_cells(out: Path) -> set[str]:
    return {p.stem for p in results_dir(out).glob("*.parquet")}


def _write(out: Path, table: str, cell: Cell, rows: list[dict], schema: pa.Schema) -> None:
    d = results_dir(out, table)
    privfile.make_dir(d)
    # the results part is what marks a cell done: written last
    with privfile.replacing(d / f"{cell.id}.parquet", tmp=d / f"{cell.id}.tmp") as f:
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), f)


def cluster_key(cell: Cell) -> tuple:
    """What a cluster is built with: cells that differ only in other levels (caps, parallel workers,
    streams, cold) share one cluster, resized between them (Cluster.resize), instead of a reload
    each (3.5 min of a 5-8 min cell at SF 1)."""
    lv = cell.levels
    return lv["nodes"], str(lv["scheme"]), lv.get("link_latency_ms")


def node_caps(cell: Cell):
    from mwinv.cluster.harness import NodeCaps

    lv = cell.levels
    return NodeCaps(cpu=lv["node_cpu"], memory_mb=lv["node_memory_mb"], read_mbps=lv["node_read_mbps"],
                    link_mbit=lv["link_mbit"], link_latency_ms=lv.get("link_latency_ms"))


def run_plan(plan: Plan, out: str | Path, progress: Callable[[str], None] | None = None,
             keep_captures: bool = True, memory: str | None = None) -> dict:
    """Run every cell not yet done, those that can share a cluster one after the other; memory: DuckDB's
    limit for each cell's correlation (load.open_capture's default if None). Returns {"ran": n,
    "skipped": n, "failed": [labels]}."""
    from mwinv.cluster.harness import Cluster

    say = progress or (lambda _: None)
    if "kernel" in plan.factors:   # each setting written, read back and restored before any cell starts
        kernel_settings.check(plan.factors["kernel"], f"{plan.path}: [factors] kernel")
    if "storage" in plan.factors:   # the back-ends' programs and FUSE present before any cell starts
        storage.check_tools(plan.factors["storage"])
    out = Path(out)
    privfile.make_dir(out)
    privfile.write(out / "plan.json", json.dumps({"name": plan.name, "path": str(plan.path), "scale": plan.scale,
                                                  "queries": plan.queries, "repetitions": plan.repetitions,
                                                  "timeout_s": plan.timeout_s, "factors": plan.factors,
                                                  "schemes": plan.schemes()}, indent=1))
    cells = plan.cells()
    done = done_cells(out)
    summary = {"ran": 0, "skipped": len([c for c in cells if c.id in done]), "failed": []}
    first: dict[tuple, int] = {}
    todo = sorted(((k, c) for k, c in enumerate(cells, 1) if c.id not in done),
                  key=lambda kc: first.setdefault(cluster_key(kc[1]), len(first)))
    cluster, key = None, None
    try:
        for k, cell in todo:
            say(f"cell {k}/{len(cells)} [{cell.id}]: {cell.label()}")
            t0 = time.monotonic()
            try:
                if cluster is not None and key == cluster_key(cell):
                    say("same cluster, resized")
                    cluster.resize(node_caps(cell))
                else:
                    if cluster is not None:
                        cluster.down()
                        cluster = None
                    lv = cell.levels
                    cluster = Cluster(nodes=lv["nodes"], scale=plan.scale, scheme=lv["scheme"],
                                      node_caps=node_caps(cell), progress=say).up()
                    key = cluster_key(cell)
                cluster.set_kernel(cell.levels["kernel"])
                try:
                    cluster.set_storage(cell.levels["storage"])
                    rows, node_rows, op_rows = run_cell(plan, cell, cluster, out, say, keep_captures, memory)
                    # tables back on the local disk, every mount and daemon gone (after a failure or a
                    # signal the cluster goes down, and its storage with it)
                    cluster.set_storage(storage.LOCAL)
                finally:
                    cluster.set_kernel({})
            except (MwinvError, psycopg.Error) as exc:
                # a cell that cannot run (a cap too small, a scheme the nodes refuse, a server that died under
                # its cap) is a result, not a crash; its cluster may be broken: the next cell starts another
                why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                summary["failed"].append(f"{cell.label()}: {why}")
                rows = [_failed_row(plan, cell, q, r, why) for r in range(plan.repetitions) for q in plan.queries]
                node_rows, op_rows = [], []
                if cluster is not None:
                    cluster.down()
                    cluster = None
            _write(out, "results_node", cell, node_rows, NODE_SCHEMA)
            _write(out, "results_op", cell, op_rows, OP_SCHEMA)
            _write(out, "results", cell, rows, RESULT_SCHEMA)
            summary["ran"] += 1
            say(f"cell {k}/{len(cells)} done in {time.monotonic() - t0:.0f} s")
    finally:
        if cluster is not None:
            cluster.down()
    return summary


def _failed_row(plan: Plan, cell: Cell, query: int, rep: int, error: str) -> dict:
    return {"experiment": plan.name, "cell": cell.id, **_levels(cell), "query": query, "repetition": rep,
            "stream": 0, "error": error, "timed_out": False}


def _levels(cell: Cell) -> dict:
    lv = dict(cell.levels)
    lv["scheme"] = Path(str(lv["scheme"])).stem if str(lv["scheme"]).endswith(".toml") else lv["scheme"]
    lv["kernel"] = kernel_settings.settings_text(lv["kernel"])
    return lv


def kernel_advice(db, statement_ids: list) -> dict[int, str]:
    """Per coordinator statement, the kernel-level advice (mwinv/kernel_knobs.py) on it and on its data
    nodes' statements (statement_link: the scans run there), as JSON: one entry per node and rule, with
    the family's time in this execution's own statements on that node (an upper bound of what the knob
    saves there). Not the advice's own gain: a short remote statement is advised over every execution of
    its query id in the cell (2.1 s for a 0.4 s part of Q6), and its parts repeat that advice."""
    from mwinv.correlator.advice import advise_capture

    parent = {s: s for s in statement_ids if s is not None}
    if not parent:
        return {}
    if db.modules.holds("statement_link"):   # statement ids are unique over the nodes
        parent.update(db.sql("SELECT statement_id, parent_statement_id FROM statement_link "
                             "WHERE list_contains($1, parent_statement_id)", [list(parent)]).fetchall())
    ids = [list(parent)]
    node = dict(db.sql("SELECT statement_id, node FROM statement WHERE list_contains($1, statement_id)", ids).fetchall())
    fired = {(sid, a.rule) for sid, advice in advise_capture(db, sorted(parent)).items() for a in advice
             if a.rule.startswith("kernel.")}
    if not fired:
        return {}
    cur = db.sql("""SELECT k.*, coalesce(a.ns, 0) AS sys_ns FROM statement_kernel_function k
                    LEFT JOIN statement_attribution a ON a.statement_id = k.statement_id AND a.component = 'cpu_sys'
                    WHERE list_contains($1, k.statement_id)""", ids)
    cols = [d[0] for d in cur.description]
    gains: dict[int, dict[tuple, float]] = {}
    for row in (dict(zip(cols, r)) for r in cur.fetchall()):
        fam = kernel_knobs.family_of(row)
        rule = f"kernel.{fam.key}" if fam else None
        if (row["statement_id"], rule) in fired:
            by = gains.setdefault(parent[row["statement_id"]], {})
            key = (node.get(row["statement_id"]), rule)
            by[key] = by.get(key, 0.0) + kernel_knobs.row_ns(row, row["sys_ns"])
    return {sid: json.dumps([{"node": n, "rule": rule, "expected_gain_ns": round(ns)}
                             for (n, rule), ns in sorted(by.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))])
            for sid, by in gains.items()}


def run_cell(plan: Plan, cell: Cell, cluster, out: Path, say, keep_captures: bool = True,
             memory: str | None = None) -> tuple[list[dict], list[dict], list[dict]]:
    """One cell on a cluster with its levels: a warm-up pass (unless cold), the measured passes under
    a capture of every node, the measured plans (untimed, after them: measure.py), calibration (disk
    and CPU once per experiment, the link per cell), then the correlation and the cell's rows."""
    from mwinv.cgroup import drop_page_cache
    from mwinv.cluster.capture import ClusterCapture
    from mwinv.calibrate import calibrate, calibrate_link, store
    from mwinv.correlator.derive import MODEL_TABLES, derive
    from mwinv.correlator.pipeline import correlate
    from mwinv.workloads.runner import run_queries

    lv = cell.levels
    capture_dir = out / "cells" / cell.id / "capture"
    if capture_dir.exists():
        shutil.rmtree(capture_dir)   # a cell interrupted before its results: run again from the start
    workers = lv["parallel_workers"]
    for server in cluster.servers.values():
        server.psql("ALTER SYSTEM RESET max_parallel_workers_per_gather" if workers is None else
                    f"ALTER SYSTEM SET max_parallel_workers_per_gather = {int(workers)}")
        server.psql("SELECT pg_reload_conf()")
    kw = dict(streams=lv["streams"], statement_timeout_s=plan.timeout_s)
    if lv["cold"]:
        # every server restarted (its shared buffers emptied), then the page cache dropped: with only the
        # cache dropped a cold Q14 (SF 0.1) ran in 18-23 ms on what the cell before left in the nodes'
        # 32 MB of shared buffers, 173 ms in the first cell
        for server in cluster.servers.values():
            server.restart()
        drop_page_cache()
    else:
        say("warm-up pass")
        run_queries(cluster.coordinator, plan.queries, **kw)
    runs = []
    # kernel stacks where the plan varies kernel settings: the kernel-level advice the report checks needs
    # them (every cell alike: they cost 7 % under OLTP, docs/overhead.md)
    # the remote storage's blocks counted over the measured passes, and after each query of one stream
    # (each statement's own split: storage.attribute)
    counters = cluster.storage.counters() if cluster.storage else None
    marks = [counters] if counters else []
    mark = (lambda _run: marks.append(cluster.storage.counters())) if counters and lv["streams"] == 1 else None
    with ClusterCapture(cluster, capture_dir, stacks=bool({"kernel", "storage"} & set(plan.factors)),
                        progress=say) as cap:
        for rep in range(plan.repetitions):
            for r in run_queries(cluster.coordinator, plan.queries, on_done=mark, **kw):
                runs.append((rep, r))
        if counters:
            cap.capture.update_manifest(storage_counters={"start": counters, "end": cluster.storage.counters(),
                                                          "marks": marks})
    say("measured plans (EXPLAIN ANALYZE, untimed)")
    t0 = time.monotonic()
    op_rows, measured = measure_plans(cluster, cell.id, plan.queries, plan.timeout_s)
    say(f"measured plans in {time.monotonic() - t0:.1f} s")
    cal_file = out / "calibration.json"
    if cal_file.exists():
        cal = json.loads(cal_file.read_text())
    else:
        say("calibrate disk and CPU (once per experiment)")
        cal = calibrate(cluster.servers["d1"].data_dir)
        privfile.write(cal_file, json.dumps(cal))
    d1 = cluster.net.links["d1"]
    cal = {**cal, "links": {d1.address: calibrate_link(f"{d1.netns}:{d1.address}", bulk_mb=8, pings=50)}}
    store(capture_dir, cal)
    say("correlate")
    db = correlate(capture_dir, memory=memory)
    try:
        derive(db, MODEL_TABLES)
        rows, node_rows = cell_rows(db, plan.name, cell.id, _levels(cell), runs)
        advice = kernel_advice(db, [r["statement_id"] for r in rows]) if "kernel" in plan.factors else {}
        if cluster.storage:
            d = out / "storage"
            privfile.make_dir(d)
            privfile.write(d / f"{cell.id}.json", json.dumps(storage.attribute(db, [r["statement_id"] for r in rows]),
                                                             indent=1))
        for row in rows:
            row.update(measured.get(row["query"], {}), host_cpus=os.cpu_count())
            row["kernel_advice"] = advice.get(row["statement_id"])
    finally:
        db.con.close()
    if not keep_captures:
        shutil.rmtree(capture_dir.parent)
    return rows, node_rows, op_rows
