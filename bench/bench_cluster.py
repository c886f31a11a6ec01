"""What correlating a cluster capture costs as nodes are added: for 1..N data nodes, a cluster (2-part,
TPC-H, 0.5 CPU per node) runs the 22 queries under a capture of every node; then the capture is
correlated in a child process whose time and peak resident memory are measured, beside the kernel
events and statements it had to read. The ratios are against the one-node capture of the same run.

    python -m bench.bench_cluster [--nodes 4] [--scale 0.01]
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

from mwinv.cluster.capture import ClusterCapture
from mwinv.cluster.harness import Cluster
from mwinv.correlator.load import open_capture
from mwinv.workloads import runner, tpch

# the child reports its own peak: the parent's RUSAGE_CHILDREN is a maximum over every child it had
CHILD = """
import resource, sys, time
from mwinv.correlator.pipeline import correlate
t0 = time.monotonic()
correlate(sys.argv[1]).con.close()
print(time.monotonic() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def correlate_in_child(capture: Path) -> tuple[float, int]:
    """(seconds, peak RSS bytes) of correlate(capture) in a fresh interpreter (imports not timed)."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(capture)], check=True, capture_output=True, text=True)
    seconds, rss = out.stdout.split()
    return float(seconds), int(rss)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--scale", type=float, default=0.01)
    args = ap.parse_args()
    console = Console()
    work = Path(tempfile.mkdtemp(prefix="mwinv-bench-cluster-"))
    rows = []
    try:
        for n in range(1, args.nodes + 1):
            capture = work / f"n{n}"
            with Cluster(nodes=n, scale=args.scale) as cluster:
                with ClusterCapture(cluster, capture):
                    runner.run_queries(cluster.coordinator, list(tpch.QUERY_NUMBERS))
            db = open_capture(capture)
            events = db.sql("SELECT count(*) FROM kernel_event").fetchone()[0]
            statements = db.sql("SELECT count(*) FROM statement").fetchone()[0]
            db.con.close()
            seconds, rss = correlate_in_child(capture)
            rows.append((n, events, statements, seconds, rss))
            console.log(f"{n} data nodes: {events:,} kernel events, {statements:,} statements, "
                        f"correlated in {seconds:.1f} s, peak {rss / 2**20:,.0f} MiB")
            shutil.rmtree(capture, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    t = Table(title=f"correlating a cluster capture, TPC-H SF {args.scale:g}, 22 queries")
    for col in ("data nodes", "kernel events", "statements", "seconds", "x 1 node", "events/s", "peak MiB",
                "x 1 node"):
        t.add_column(col, justify="right")
    base_s, base_rss = rows[0][3], rows[0][4]
    for n, events, statements, seconds, rss in rows:
        t.add_row(str(n), f"{events:,}", f"{statements:,}", f"{seconds:.1f}", f"{seconds / base_s:.2f}",
                  f"{events / seconds:,.0f}", f"{rss / 2**20:,.0f}", f"{rss / base_rss:.2f}")
    console.print(t)


if __name__ == "__main__":
    main()
