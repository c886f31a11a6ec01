"""Tracing overhead on the 22 TPC-H queries (warm): no capture vs `mwinv-trace` default events vs
default events + stacks (stack triggers + perf sampling) vs the sampler alone at 1 s. The
configurations run interleaved in each round (rotated order) on one server; the figure is the
median over rounds of (query time with the configuration / query time without, same round).
Goals (issue 5): <= 3 % default, <= 10 % stacks, <= 0.5 % sampler.

    python -m bench.bench_trace [--scale 0.1] [--rounds 2]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mwinv.capture.run import KernelCapture
from mwinv.workloads import runner, tpch
from mwinv.workloads.setup import tpch_server

CONFIGS = {
    "none": None,
    "trace default": dict(trace=True, sample=False, stacks=False),
    "trace + stacks": dict(trace=True, sample=False, stacks=True),
    "sampler 1 s": dict(trace=False, sample=True, sample_interval_s=1.0),
}


def run_once(server, config: dict | None, out: Path) -> float:
    """Seconds of query time for the 22 queries under `config` (capture start/stop/parse excluded)."""
    queries = list(tpch.QUERY_NUMBERS)
    if config is None:
        return sum(r.seconds for r in runner.run_queries(server, queries))
    cap = KernelCapture(out, postmaster_pid=server.postmaster_pid(), statements=False, **config).start()
    try:
        runs = runner.run_queries(server, queries)
    finally:
        cap.stop()
    return sum(r.seconds for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    console = Console()
    tmp = Path(tempfile.mkdtemp(prefix="mwinv-bench-trace-"))
    server = tpch_server(args.scale, name="bench-trace", progress=lambda s: console.log(s))
    times: dict[str, list[float]] = {k: [] for k in CONFIGS}
    try:
        runner.run_queries(server, list(tpch.QUERY_NUMBERS))     # warm-up
        names = list(CONFIGS)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                times[name].append(run_once(server, CONFIGS[name], tmp / f"r{r}-{name.replace(' ', '_')}"))
                console.log(f"round {r + 1} {name}: {times[name][-1]:.2f} s")
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    t = Table(title=f"TPC-H SF {args.scale:g}, 22 queries warm, {args.rounds} interleaved rounds")
    for col in ("configuration", "median s", "ratio vs none (median of rounds)", "overhead %"):
        t.add_column(col, justify="right")
    for name in CONFIGS:
        ratios = [a / b for a, b in zip(times[name], times["none"])]
        ratio = statistics.median(ratios)
        t.add_row(name, f"{statistics.median(times[name]):.2f}", f"{ratio:.3f}", f"{100 * (ratio - 1):+.1f}")
    console.print(t)


if __name__ == "__main__":
    main()
