"""How correlation scales with the capture's length (issue 33): an OLTP capture of each given length
(pgbench -S, prepared, 2 clients, under `mwinv-trace capture` with its defaults, as a new user would
make it), correlated by `mwinv-correlate --top-sql 5` in a child process; per length the statements
per second of correlation, the peak memory of that process (its own ru_maxrss, from wait4) and the
capture's disk per million statements, side by side with the first (shortest) length as the baseline,
and the projection for an hour from the two longest (time and disk linear in the statements, memory
from the slope between them).

    python -m bench.bench_long                          # 30 s (baseline) and 120 s
    python -m bench.bench_long --seconds 30,120,600 --clients 2 --scale 10
    python -m bench.bench_long --out /srv/bench --keep   # the captures kept there
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.bench_correlate import GOAL_RSS_BYTES, table_rows
from bench.bench_extension import pgbench
from bench.machine import memory_line
from mwinv import privfile
from mwinv.capture.tables import Capture
from mwinv.engines.postgresql.reader import connect_untracked
from mwinv.engines.postgresql.server import PgServer, pg_bindir
from mwinv.errors import MwinvError

BIN = Path(sys.executable).parent
GOAL_STATEMENTS_PER_S = 1_000_000
HOUR_S = 3600


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def capture(server: PgServer, out: Path, seconds: int, clients: int) -> dict:
    """One `mwinv-trace capture` of pgbench -S for `seconds`, with the command's defaults."""
    bench = [str(pg_bindir() / "pgbench"), "-h", str(server.socket_dir), "-p", str(server.port), "-U", "postgres",
             "-n", "-S", "-M", "prepared", "-c", str(clients), "-j", str(clients), "-T", str(seconds), "postgres"]
    t0 = time.monotonic()
    r = subprocess.run([str(BIN / "mwinv-trace"), "capture", str(out), "--conninfo", server.conninfo(), "--node",
                        "bench", "--", *bench], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"bench_long: mwinv-trace capture failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    tps = next((float(line.split("=")[1].split("(")[0]) for line in r.stdout.splitlines()
                if line.startswith("tps")), None)
    cap = Capture(out)
    return {"seconds": seconds, "tps": tps, "capture_s": time.monotonic() - t0,
            "statements": table_rows(cap, "statement"), "kernel_events": table_rows(cap, "kernel_event"),
            "disk": disk_bytes(out), "trace": sum(p.stat().st_size for p in (out / "kernel").rglob("*.dat*"))}


def correlate(out: Path) -> dict:
    """`mwinv-correlate --top-sql 5` in a child: wall seconds, its peak RSS, the status and last line."""
    t0 = time.monotonic()
    proc = subprocess.Popen([str(BIN / "mwinv-correlate"), str(out), "--top-sql", "5"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"correlate_s": time.monotonic() - t0, "peak_rss": usage.ru_maxrss * 1024, "rc": proc.returncode,
            "error": (err.strip().splitlines() or [""])[-1] if proc.returncode else ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", default="30,120", help="capture lengths, s, the first the baseline")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--out", type=Path, default=None, help="where the captures go (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the captures")
    args = ap.parse_args()
    try:
        lengths = [int(s) for s in args.seconds.split(",")]
    except ValueError:
        ap.error(f"--seconds {args.seconds}: lengths in whole seconds, comma-separated (e.g. 30,120)")
    if args.out is not None:
        privfile.make_dir(args.out)
    console = Console(width=200)   # the side-by-side table whole, also in a log
    console.print(memory_line())
    root = Path(tempfile.mkdtemp(prefix="mwinv-bench-long-", dir=args.out))
    gucs = {"compute_query_id": "on", "mwinv.buffer_size": "1048576", "shared_buffers": "'256MB'"}
    rows = []
    try:
        with PgServer(name="bench-long", shared_preload_libraries=["mwinv"], gucs=gucs) as server:
            with console.status(f"pgbench -i -s {args.scale}"):
                pgbench(server, "-i", "-q", "-s", str(args.scale))
                server.psql("CREATE EXTENSION mwinv")
                with connect_untracked(server.conninfo()) as conn:
                    conn.execute("SELECT count(*) FROM mwinv_drain()")   # the set-up is no workload
            for seconds in lengths:
                out = root / f"cap-{seconds}s"
                with console.status(f"capturing {seconds} s of pgbench -S -c {args.clients}"):
                    row = capture(server, out, seconds, args.clients)
                with console.status(f"mwinv-correlate {out} --top-sql 5"):
                    row.update(correlate(out))
                console.print(f"{seconds} s: {row['statements']:,} statements, {row['kernel_events']:,} kernel "
                              f"events, correlated in {row['correlate_s']:.1f} s, peak {row['peak_rss'] / 2**20:,.0f}"
                              f" MiB" + (f", FAILED: {row['error']}" if row["rc"] else ""))
                rows.append(row)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    console.print(result_table(rows, args.clients))
    for line in projection(rows):
        console.print(line)
    if args.keep:
        console.print(f"captures kept in {root}")


def result_table(rows: list[dict], clients: int) -> Table:
    base = rows[0]
    table = Table(title=f"pgbench -S -c {clients} under mwinv-trace capture (defaults), then mwinv-correlate "
                        f"--top-sql 5; x: against the {base['seconds']} s capture")
    for col in ("capture", "TPS", "statements", "kernel events", "correlate s", "statements/s", "x",
                "peak RSS MiB", "x", "disk MB / M stmts", "x", "raw trace MB"):
        table.add_column(col, justify="right")
    for r in rows:
        rate = r["statements"] / r["correlate_s"] if not r["rc"] else 0
        base_rate = base["statements"] / base["correlate_s"]
        per_m = r["disk"] / 1e6 / (r["statements"] / 1e6)
        base_per_m = base["disk"] / 1e6 / (base["statements"] / 1e6)
        table.add_row(f"{r['seconds']} s", f"{r['tps']:,.0f}" if r["tps"] else "?", f"{r['statements']:,}",
                      f"{r['kernel_events']:,}", f"{r['correlate_s']:.1f}" + (" FAILED" if r["rc"] else ""),
                      f"{rate:,.0f}", f"{rate / base_rate:.2f}", f"{r['peak_rss'] / 2**20:,.0f}",
                      f"{r['peak_rss'] / base['peak_rss']:.2f}", f"{per_m:.1f}", f"{per_m / base_per_m:.2f}",
                      f"{r['trace'] / 1e6:.0f}")
    return table


def projection(rows: list[dict]) -> list[str]:
    """An hour at the longest correlated capture's statement rate: time and disk per statement as measured
    there, memory on the line through the two longest correlated captures' peaks."""
    failed = [f"the {r['seconds']} s capture: {r['error']}" for r in rows if r["rc"]]
    rows = [r for r in rows if not r["rc"]]
    if not rows:
        return ["no capture was correlated: no projection"] + failed
    last = rows[-1]
    hour = last["statements"] / last["seconds"] * HOUR_S
    rate = last["statements"] / last["correlate_s"]
    lines = [f"an hour at {last['statements'] / last['seconds']:,.0f} statements/s: {hour / 1e6:,.0f} M statements, "
             f"correlated in ~{hour / rate / 60:,.0f} min at {rate:,.0f} statements/s "
             f"(goal >= {GOAL_STATEMENTS_PER_S:,}/s: {'met' if rate >= GOAL_STATEMENTS_PER_S else 'MISSED'}), "
             f"disk ~{last['disk'] / last['statements'] * hour / 1e9:,.1f} GB"]
    if len(rows) > 1:
        a, b = rows[-2], rows[-1]
        slope = (b["peak_rss"] - a["peak_rss"]) / max(1, b["statements"] - a["statements"])
        peak = b["peak_rss"] + slope * (hour - b["statements"])
        lines.append(f"peak memory: {slope:,.0f} bytes per statement more between the {a['seconds']} s and "
                     f"{b['seconds']} s captures: ~{peak / 2**30:,.1f} GiB for the hour "
                     f"(goal < {GOAL_RSS_BYTES / 2**30:.0f} GiB: {'met' if peak < GOAL_RSS_BYTES else 'MISSED'})")
    return lines + [f"not correlated, left out of the projection: {f}" for f in failed]


if __name__ == "__main__":
    try:
        main()
    except MwinvError as exc:
        sys.exit(f"bench long: error: {exc}")
