"""What correlating a cluster capture costs as nodes are added: for 1..N data nodes, a cluster (2-part,
TPC-H, 0.5 CPU per node) runs the 22 queries (or --queries) under a capture of every node; then the capture is
correlated whole in a child process, and again node by node (`mwinv-correlate --node`, each in a
child, as it could run on that node) and merged (`--merge`), with the time and peak resident memory
of each, beside the kernel events and statements read. The ratios are against the one-node capture
of the same run.

    python -m bench.bench_cluster [--nodes 4] [--scale 0.01]
    python -m bench.bench_cluster --nodes 3 --scale 1 --queries 1,3,6,12   # SF 1: four queries
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mwinv.capture.tables import DERIVED_TABLES, Capture
from mwinv.cluster.capture import ClusterCapture
from mwinv.cluster.harness import Cluster
from mwinv.correlator.load import open_capture
from mwinv.workloads import runner, tpch

# the child reports its own peak, VmHWM: the parent's RUSAGE_CHILDREN is a maximum over every child it
# had, and a child's own ru_maxrss keeps the parent's resident size at the fork across exec (it gave
# every child the parent's 736 MiB)
CHILD = """
import sys, time
from mwinv.correlator.pipeline import correlate, merge
t0 = time.monotonic()
db = merge(sys.argv[1]) if sys.argv[2] == "merge" else correlate(sys.argv[1], node=sys.argv[2] or None)
db.con.close()
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(time.monotonic() - t0, hwm * 1024)
"""


def correlate_in_child(capture: Path, node: str = "") -> tuple[float, int]:
    """(seconds, peak RSS bytes) of correlate(capture) in a fresh interpreter (imports not timed): the
    whole capture, one node's tables (node), or the merge of the nodes' (node "merge")."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(capture), node], check=True, capture_output=True,
                         text=True)
    seconds, rss = out.stdout.split()
    return float(seconds), int(rss)


def per_node(capture: Path, nodes: list[str]) -> tuple[list[tuple[float, int]], tuple[float, int]]:
    """Each node's correlation on its own, then the merge, on a copy without the derived tables."""
    for table in DERIVED_TABLES:
        shutil.rmtree(Capture(capture).table_dir(table), ignore_errors=True)
    return [correlate_in_child(capture, node) for node in nodes], correlate_in_child(capture, "merge")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--scale", type=float, default=0.01)
    ap.add_argument("--queries", default="all", help="e.g. 1,3,6,12 (default: all 22)")
    args = ap.parse_args()
    queries = tpch.parse_query_list(args.queries)
    console = Console(width=200)   # thirteen columns
    work = Path(tempfile.mkdtemp(prefix="mwinv-bench-cluster-"))
    rows = []
    try:
        for n in range(1, args.nodes + 1):
            capture = work / f"n{n}"
            with Cluster(nodes=n, scale=args.scale) as cluster:
                with ClusterCapture(cluster, capture):
                    runner.run_queries(cluster.coordinator, queries)
            db = open_capture(capture)
            events = db.sql("SELECT count(*) FROM kernel_event").fetchone()[0]
            statements = db.sql("SELECT count(*) FROM statement").fetchone()[0]
            nodes = [r[0] for r in db.sql("SELECT DISTINCT node FROM statement ORDER BY 1").fetchall()]
            db.con.close()
            seconds, rss = correlate_in_child(capture)
            each, merged = per_node(capture, nodes)
            rows.append((n, events, statements, seconds, rss, each, merged))
            console.log(f"{n} data nodes: {events:,} kernel events, {statements:,} statements, correlated in "
                        f"{seconds:.1f} s, peak {rss / 2**20:,.0f} MiB; node by node "
                        + ", ".join(f"{s_:.1f} s {m / 2**20:,.0f} MiB" for s_, m in each)
                        + f", merged in {merged[0]:.1f} s {merged[1] / 2**20:,.0f} MiB")
            shutil.rmtree(capture, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    t = Table(title=f"correlating a cluster capture, TPC-H SF {args.scale:g}, {len(queries)} queries")
    for col in ("data nodes", "kernel events", "statements", "whole s", "x 1 node", "events/s", "peak MiB",
                "x 1 node", "nodes' sum s", "largest node s", "largest node MiB", "merge s", "merge MiB"):
        t.add_column(col, justify="right")
    base_s, base_rss = rows[0][3], rows[0][4]
    for n, events, statements, seconds, rss, each, merged in rows:
        t.add_row(str(n), f"{events:,}", f"{statements:,}", f"{seconds:.1f}", f"{seconds / base_s:.2f}",
                  f"{events / seconds:,.0f}", f"{rss / 2**20:,.0f}", f"{rss / base_rss:.2f}",
                  f"{sum(s_ for s_, _ in each):.1f}", f"{max(s_ for s_, _ in each):.1f}",
                  f"{max(m for _, m in each) / 2**20:,.0f}", f"{merged[0]:.1f}", f"{merged[1] / 2**20:,.0f}")
    console.print(t)


if __name__ == "__main__":
    main()
