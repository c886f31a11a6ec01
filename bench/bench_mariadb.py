"""Capture overhead on MariaDB under OLTP: sysbench's oltp_read_only (a real client) against a
throw-away MariaDB, with no capture, with the performance_schema statement reader alone, and with the
full capture (kernel events of every mariadbd thread + samples + statements). The configurations run
interleaved in each round (rotated order); the figure is the median over rounds of each one's
transactions per second divided by the same round's run without a capture. A second run without any
capture ("none again") is the A/A control: what this machine's noise alone gives.

    python -m bench.bench_mariadb [--rounds 3] [--seconds 10] [--threads 2] [--table-size 10000]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mwinv.capture.tables import Capture
from mwinv.engines.mariadb.capture import MariaDBCapture
from mwinv.engines.mariadb.reader import PerfSchemaReader
from mwinv.engines.mariadb.server import MariaDBServer

CONFIGS = ("none", "none again", "statements only", "full capture")


def sysbench(server: MariaDBServer, args: argparse.Namespace, command: str) -> str:
    argv = ["sysbench", "oltp_read_only", f"--mysql-socket={server.socket}", "--mysql-user=root",
            "--mysql-db=sbtest", "--tables=1", f"--table-size={args.table_size}", f"--threads={args.threads}",
            f"--time={args.seconds}", "--report-interval=0", command]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"sysbench {command} failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1]}")
    return proc.stdout


def run_once(server: MariaDBServer, config: str, args, out: Path) -> tuple[float, dict]:
    info: dict = {}
    if config.startswith("none"):
        text = sysbench(server, args, "run")
    elif config == "statements only":
        reader = PerfSchemaReader(server.connect, Capture(out).create(), "bench").start()
        try:
            text = sysbench(server, args, "run")
        finally:
            info = reader.stop()
    else:
        with MariaDBCapture(server, out, node="bench") as cap:
            text = sysbench(server, args, "run")
        info = cap.summary.get("statements", {})
    tps = float(re.search(r"transactions:\s+\d+\s+\(([\d.]+) per sec", text).group(1))
    return tps, info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--table-size", type=int, default=10000)
    args = ap.parse_args()
    console = Console()
    tps: dict[str, list[float]] = {c: [] for c in CONFIGS}
    kept: dict[str, list[tuple[int, int]]] = {c: [] for c in CONFIGS}
    work = Path(tempfile.mkdtemp(prefix="mwinv-bench-maria-"))
    try:
        with MariaDBServer(name="bench") as server:
            server.sql("CREATE DATABASE sbtest")
            sysbench(server, args, "prepare")
            for r in range(args.rounds):
                order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
                for config in order:
                    out = work / f"{r}-{config.replace(' ', '-')}"
                    value, info = run_once(server, config, args, out)
                    tps[config].append(value)
                    if info:
                        kept[config].append((info.get("statements", 0), info.get("statements_overwritten", 0)))
                    console.log(f"round {r + 1}: {config}: {value:,.0f} TPS")
                    shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table = Table(title=f"MariaDB oltp_read_only, {args.threads} threads, {args.seconds} s x {args.rounds} rounds")
    for col in ("configuration", "median TPS", "TPS ratio vs none", "statements kept", "overwritten"):
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for config in CONFIGS:
        ratios = [v / b for v, b in zip(tps[config], tps["none"])]
        k = kept[config]
        table.add_row(config, f"{statistics.median(tps[config]):,.0f}", f"{statistics.median(ratios):.3f}",
                      f"{sum(a for a, _ in k):,}" if k else "-", f"{sum(b for _, b in k):,}" if k else "-")
    console.print(table)


if __name__ == "__main__":
    main()
