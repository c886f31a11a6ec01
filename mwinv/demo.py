"""The embedded default workload behind `make demo`: a throw-away PostgreSQL with the mwinv
extension, TPC-H loaded, the 22 queries run under a kernel capture, then the top SQL and a report."""

from __future__ import annotations

import shutil
from pathlib import Path

from rich.console import Console

from mwinv import privfile
from mwinv.node_capture import NodeCapture
from mwinv.correlator import terminal
from mwinv.calibrate import calibrate, store
from mwinv.correlator.derive import advice_of, derive, node_parts_of
from mwinv.correlator.pipeline import correlate, top_statements
from mwinv.correlator.report import load, render_report
from mwinv.workloads import runner, tpch
from mwinv.workloads.setup import tpch_server


def _fresh(out: str) -> tuple[Path, Path]:
    """The demo's output directory, and its capture directory emptied: a demo run replaces the previous one."""
    out_dir = Path(out)
    capture_dir = out_dir / "capture"
    if capture_dir.exists():
        shutil.rmtree(capture_dir)
    privfile.make_dir(out_dir)
    return out_dir, capture_dir


def run_demo(scale: float, out: str) -> Path:
    console = Console()
    out_dir, capture_dir = _fresh(out)
    server = tpch_server(scale, name="demo", preload=["mwinv"],
                         gucs={"compute_query_id": "on", "mwinv.node_name": "'demo'"},
                         progress=lambda s: console.log(s))
    try:
        server.psql("CREATE EXTENSION mwinv", dbname="tpch")
        with NodeCapture(capture_dir, postmaster_pid=server.postmaster_pid(), conninfo=server.conninfo("tpch"),
                         node="demo", stacks=True, trace="auto", progress=lambda s: console.log(s),
                         # the 22 queries take seconds: node timelines need samples well under a second
                         sample_interval_s=0.1) as cap:
            runs = runner.run_with_progress(server, list(tpch.QUERY_NUMBERS), console=console)
        for what, why in cap.summary.get("skipped", {}).items():
            console.print(f"[yellow]skipped[/] {what}: {why}")
        console.print(runner.timing_table(runs, title=f"TPC-H SF {scale:g}, 22 queries, warm"))
        # the model's platform factors, measured where the database lives
        store(capture_dir, calibrate(server.data_dir, progress=lambda s: console.log(f"calibrate {s}")))
    finally:
        server.stop()
    return _show(capture_dir, out_dir, console)


def run_cluster_demo(scale: float, out: str, nodes: int) -> Path:
    """The same on a cluster: a coordinator and `nodes` data nodes (mwinv/cluster), TPC-H partitioned over
    them, one capture of every node; the top statements with their parts on each data node."""
    from mwinv.cluster.capture import ClusterCapture
    from mwinv.cluster.harness import Cluster
    from mwinv.calibrate import calibrate_link

    console = Console()
    out_dir, capture_dir = _fresh(out)
    with Cluster(nodes=nodes, scale=scale, progress=lambda s: console.log(s)) as cluster:
        with ClusterCapture(cluster, capture_dir, progress=lambda s: console.log(s)):
            runs = runner.run_with_progress(cluster.coordinator, list(tpch.QUERY_NUMBERS), console=console)
        console.print(runner.timing_table(runs, title=f"TPC-H SF {scale:g} on {nodes} data nodes, 22 queries"))
        d1 = cluster.net.links["d1"]
        cal = calibrate(cluster.servers["d1"].data_dir, progress=lambda s: console.log(f"calibrate {s}"))
        cal["links"] = {d1.address: calibrate_link(f"{d1.netns}:{d1.address}", bulk_mb=8, pings=50)}
        store(capture_dir, cal)
    return _show(capture_dir, out_dir, console)


def run_mariadb_demo(scale: float, out: str) -> Path:
    """The same on MariaDB: a throw-away server, TPC-H in its dialect, the 22 queries under a capture of
    its threads and its performance_schema statements."""
    import time

    from mwinv.engines.mariadb import tpch as mtpch
    from mwinv.engines.mariadb.capture import MariaDBCapture
    from mwinv.engines.mariadb.server import MariaDBServer

    console = Console()
    out_dir, capture_dir = _fresh(out)
    with MariaDBServer(name="demo") as server:
        console.log(f"MariaDB on port {server.port}")
        with server.connect() as conn:
            mtpch.load(conn, tpch.generate(scale, progress=lambda s: console.log(s)), progress=lambda s: console.log(s))
        with server.connect("tpch") as conn, conn.cursor() as cur:
            with MariaDBCapture(server, capture_dir, node="demo", stacks=True, trace="auto",
                                progress=lambda s: console.log(s)) as cap:
                for q in tpch.QUERY_NUMBERS:
                    t0 = time.monotonic()
                    cur.execute(mtpch.query_sql(q))
                    rows = cur.fetchall()
                    console.log(f"Q{q}: {len(rows)} rows in {time.monotonic() - t0:.3f} s")
        for what, why in cap.summary.get("skipped", {}).items():
            console.print(f"[yellow]skipped[/] {what}: {why}")
        store(capture_dir, calibrate(server.data_dir, progress=lambda s: console.log(f"calibrate {s}")))
    return _show(capture_dir, out_dir, console)


def _show(capture_dir: Path, out_dir: Path, console: Console) -> Path:
    """Correlate, print the top statements (with their data nodes' parts) and what to change, write the report."""
    db = correlate(capture_dir, progress=lambda s: console.log(s))
    for w in db.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    top = top_statements(db, n=5)
    examples = [s.example_id for s in top]
    derive(db, advise=examples, progress=lambda s: console.log(s))
    console.print(terminal.top_table(top, "top 5 statements by total time"))
    parts = node_parts_of(db, examples)
    for i, s in enumerate(top, 1):
        if s.example_id in parts:
            console.print(terminal.node_table(i, s, parts[s.example_id]))
    console.print(terminal.advice_text(top, advice_of(db, examples)))
    html, md = render_report(load(capture_dir, db=db), out_dir / "report")
    db.con.close()
    console.print(f"report: {html} (and {md})")
    return html
