"""The embedded default workload behind `make demo`."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from mwinv.capture.run import KernelCapture
from mwinv.workloads import runner, tpch
from mwinv.workloads.setup import tpch_server


def run_demo(scale: float, out: str) -> None:
    console = Console()
    Path(out).mkdir(parents=True, exist_ok=True)
    server = tpch_server(scale, name="demo", progress=lambda s: console.log(s))
    try:
        # kernel trace + samples (+ statements) of the run; tracing is skipped, with the reason
        # printed, where the kernel or the privileges do not allow it
        with KernelCapture(Path(out) / "capture", postmaster_pid=server.postmaster_pid(),
                           conninfo=server.conninfo("tpch"), trace="auto", progress=console.log) as cap:
            runs = runner.run_with_progress(server, list(tpch.QUERY_NUMBERS), console=console)
        for what, why in cap.summary["skipped"].items():
            console.print(f"capture: skipped {what}: {why}")
        console.print(f"capture written to {Path(out) / 'capture'}")
        console.print(runner.timing_table(runs, title=f"TPC-H SF {scale:g}, 22 queries, warm"))
    finally:
        server.stop()
