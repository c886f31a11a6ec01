"""Tracing overhead on the 22 TPC-H queries (warm): no capture vs `mwinv-trace` default events vs
default events + stacks (stack triggers + perf sampling) vs the sampler alone at 1 s. The
configurations run interleaved in each round (rotated order) on one server. The figure is the
median over every (round, query) of (that query's time with the configuration / its time without,
same round), with the quartiles of those ratios.

A second run without any capture ("none again", an A/A control) is measured the same way: its
ratio is what this machine's noise alone gives. An overhead inside the control's quartiles is not
measurable here, and the table says so.
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

from mwinv.node_capture import NodeCapture
from mwinv.options import CaptureOptions
from mwinv.workloads import runner, tpch
from mwinv.workloads.setup import tpch_server

CONFIGS = {
    "none": None,
    "none again": None,
    "trace default": dict(trace=True, sample=False, stacks=False),
    "trace + stacks": dict(trace=True, sample=False, stacks=True),
    "sampler 1 s": dict(trace=False, sample=True, sample_interval_s=1.0),
}


def run_once(server, config: dict | None, out: Path) -> list[float]:
    """Seconds of each of the 22 queries under `config` (capture start/stop/parse excluded)."""
    queries = list(tpch.QUERY_NUMBERS)
    if config is None:
        return [r.seconds for r in runner.run_queries(server, queries)]
    cap = NodeCapture(out, CaptureOptions(statements=False, **config), postmaster_pid=server.postmaster_pid()).start()
    try:
        runs = runner.run_queries(server, queries)
    finally:
        cap.stop()
    return [r.seconds for r in runs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    console = Console()
    tmp = Path(tempfile.mkdtemp(prefix="mwinv-bench-trace-"))
    server = tpch_server(args.scale, name="bench-trace", progress=lambda s: console.log(s))
    times: dict[str, list[list[float]]] = {k: [] for k in CONFIGS}   # per round, per query
    try:
        runner.run_queries(server, list(tpch.QUERY_NUMBERS))     # warm-up
        names = list(CONFIGS)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                times[name].append(run_once(server, CONFIGS[name], tmp / f"r{r}-{name.replace(' ', '_')}"))
                console.log(f"round {r + 1} {name}: {sum(times[name][-1]):.2f} s")
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    t = Table(title=f"TPC-H SF {args.scale:g}, 22 queries warm, {args.rounds} interleaved rounds")
    for col in ("configuration", "median round s", "ratio vs none", "quartiles", "overhead %", "measurable"):
        t.add_column(col, justify="right")
    noise = quartiles(per_query_ratios(times["none again"], times["none"]))
    for name in CONFIGS:
        if name == "none":
            continue
        q1, med, q3 = quartiles(per_query_ratios(times[name], times["none"]))
        measurable = "control" if name == "none again" else \
            ("yes" if med < noise[0] or med > noise[2] else "no: inside the control's quartiles")
        t.add_row(name, f"{statistics.median(sum(r) for r in times[name]):.2f}", f"{med:.3f}",
                  f"{q1:.3f}-{q3:.3f}", f"{100 * (med - 1):+.1f}", measurable)
    console.print(t)


def per_query_ratios(runs: list[list[float]], baseline: list[list[float]]) -> list[float]:
    """time / baseline time of the same query in the same round, over all rounds and queries."""
    return [a / b for run, base in zip(runs, baseline) for a, b in zip(run, base) if b > 0]


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return (values[0],) * 3 if values else (float("nan"),) * 3
    q1, med, q3 = statistics.quantiles(values, n=4)
    return q1, med, q3


if __name__ == "__main__":
    main()
