"""The embedded default workload behind `make demo`."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from mwinv.workloads import runner, tpch
from mwinv.workloads.setup import tpch_server


def run_demo(scale: float, out: str) -> None:
    console = Console()
    Path(out).mkdir(parents=True, exist_ok=True)
    server = tpch_server(scale, name="demo", progress=lambda s: console.log(s))
    try:
        runs = runner.run_with_progress(server, list(tpch.QUERY_NUMBERS), console=console)
        console.print(runner.timing_table(runs, title=f"TPC-H SF {scale:g}, 22 queries, warm"))
    finally:
        server.stop()
