"""PostgreSQL's demo (`mwinv demo`): a throw-away server with the mwinv extension, or a cluster of a
coordinator and data nodes (mwinv/cluster), TPC-H loaded, the 22 queries run under a capture."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from mwinv.calibrate import calibrate, calibrate_link, store
from mwinv.cli.common import progress_logger
from mwinv.node_capture import NodeCapture
from mwinv.options import CaptureOptions
from mwinv.workloads import runner, tpch
from mwinv.workloads.setup import tpch_server


def demo(scale: float, capture_dir: Path, console: Console, nodes: int = 0) -> None:
    """The 22 queries under a capture into capture_dir, with the model's platform factors measured
    where the database lives; nodes > 0: on that many data nodes."""
    if nodes:
        _cluster(scale, capture_dir, console, nodes)
        return
    progress = progress_logger(console)
    server = tpch_server(scale, name="demo", preload=["mwinv"],
                         gucs={"compute_query_id": "on", "mwinv.node_name": "'demo'"},
                         progress=progress)
    try:
        server.psql("CREATE EXTENSION mwinv", dbname="tpch")
        # the 22 queries take seconds: node timelines need samples well under a second
        options = CaptureOptions(node="demo", stacks=True, trace="auto", sample_interval_s=0.1)
        with NodeCapture(capture_dir, options, postmaster_pid=server.postmaster_pid(),
                         conninfo=server.conninfo("tpch"), progress=progress) as cap:
            runs = runner.run_with_progress(server, list(tpch.QUERY_NUMBERS), console=console)
        for what, why in cap.summary.get("skipped", {}).items():
            console.print(f"[yellow]skipped[/] {what}: {why}")
        console.print(runner.timing_table(runs, title=f"TPC-H SF {scale:g}, 22 queries, warm"))
        store(capture_dir, calibrate(server.data_dir, progress=lambda s: progress(f"calibrate {s}")))
    finally:
        server.stop()


def _cluster(scale: float, capture_dir: Path, console: Console, nodes: int) -> None:
    """A coordinator and `nodes` data nodes, TPC-H partitioned over them, one capture of every node."""
    from mwinv.cluster.capture import ClusterCapture
    from mwinv.cluster.harness import Cluster

    progress = progress_logger(console)
    with Cluster(nodes=nodes, scale=scale, progress=progress) as cluster:
        with ClusterCapture(cluster, capture_dir, progress=progress):
            runs = runner.run_with_progress(cluster.coordinator, list(tpch.QUERY_NUMBERS), console=console)
        console.print(runner.timing_table(runs, title=f"TPC-H SF {scale:g} on {nodes} data nodes, 22 queries"))
        d1 = cluster.net.links["d1"]
        cal = calibrate(cluster.servers["d1"].data_dir, progress=lambda s: progress(f"calibrate {s}"))
        cal["links"] = {d1.address: calibrate_link(f"{d1.netns}:{d1.address}", bulk_mb=8, pings=50)}
        store(capture_dir, cal)
