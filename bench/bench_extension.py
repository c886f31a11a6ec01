"""Overhead of the mwinv extension on pgbench -S (select-only, prepared protocol).

Six servers up at once -- no extension, pg_stat_statements, pg_stat_statements + pg_stat_kcache,
pg_wait_sampling (a sampling peer: its collector reads every backend's wait event every 10 ms, and
its profile is what a DBA keeps instead of per-execution records), mwinv twice -- each with a pgbench
database; rounds interleave the servers (rotating order) and the
result is the median over rounds of each server's TPS divided by the "none" TPS of that round.
Because TPS on a shared 2-core machine moves with everybody else's load, the server-side CPU time
per transaction (all of the server's processes, exited backends included through the
postmaster's cutime/cstime) is reported too, as a ratio against "none"; and the CPU cost of
recording one statement measured inside one backend: a DO loop of nested statements with
mwinv.track = all vs none, alternating, best wall time of each -- the figure least moved by load.
mwinv runs with its reader, as a capture does: the StatementDrainer of mwinv-trace capture takes the
records from the mapped ring and spools them raw, converting them into Parquet when it stops; the
second mwinv server's reader converts them while the capture runs (spool_mb=0, the reader before the
spool). Each reader's CPU during its server's rounds (this process's) is shown as a share of one
core, the spooling one's conversion at its stop apart, and the records written and dropped.

Usage:
    python -m bench.bench_extension                    # 5 rounds x 10 s, scale 10, 2 clients
    python -m bench.bench_extension --rounds 3 --seconds 15 --clients 2
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from mwinv.cli.common import run_main
from mwinv.capture.tables import Capture
from mwinv.engines.postgresql.reader import SPOOL_MB as DEFAULT_SPOOL_MB, StatementDrainer, connect_untracked
from mwinv.errors import MwinvError
from mwinv.engines.postgresql.server import PgServer, pg_bindir

CONFIGS = {
    "none": [],
    "pg_stat_statements": ["pg_stat_statements"],
    "pgss + pg_stat_kcache": ["pg_stat_statements", "pg_stat_kcache"],
    "pg_wait_sampling": ["pg_wait_sampling"],
    "mwinv": ["mwinv"],
    "mwinv, converting live": ["mwinv"],
}
SPOOL_MB = {"mwinv": DEFAULT_SPOOL_MB, "mwinv, converting live": 0}
TPS_RE = re.compile(r"tps = ([0-9.]+) \(without initial connection time\)")
TXN_RE = re.compile(r"number of transactions actually processed: (\d+)")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def server_cpu_ns(server: PgServer) -> int:
    """CPU time of the postmaster, its live children and its reaped children (exited backends)."""
    postmaster = server.postmaster_pid()
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile: its time is in the postmaster's cutime now
        pid, ppid = int(stat.parent.name), int(fields[1])
        if pid == postmaster:
            ticks += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        elif ppid == postmaster:
            ticks += int(fields[11]) + int(fields[12])
    return ticks * 1_000_000_000 // CLK_TCK


def pgbench(server: PgServer, *args: str) -> str:
    argv = [str(pg_bindir() / "pgbench"), "-h", str(server.socket_dir), "-p", str(server.port), "-U", "postgres",
            *args, "postgres"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise MwinvError(f"pgbench on {server.name}: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return proc.stdout


def run_select_only(server: PgServer, clients: int, seconds: int) -> tuple[float, float]:
    """One pgbench -S run: (TPS, server CPU ns per transaction)."""
    cpu_before = server_cpu_ns(server)
    out = pgbench(server, "-n", "-S", "-M", "prepared", "-c", str(clients), "-j", str(clients), "-T", str(seconds))
    time.sleep(0.3)  # let the postmaster reap the backends (their CPU moves into its cutime)
    cpu = server_cpu_ns(server) - cpu_before
    tps, txns = TPS_RE.search(out), TXN_RE.search(out)
    if not tps or not txns:
        raise MwinvError(f"pgbench on {server.name}: no TPS in its output")
    return float(tps.group(1)), cpu / max(int(txns.group(1)), 1)


HOOK_LOOP = 100_000
HOOK_DO = ("DO $$ BEGIN FOR i IN 1..%d LOOP PERFORM v FROM (VALUES (1)) AS t(v); END LOOP; END $$" % HOOK_LOOP)


def hook_cost_ns(server: PgServer, repeats: int) -> tuple[float, float]:
    """(ns per nested statement with mwinv.track = none, with track = all): the minimum over
    alternating repeats of the DO loop's wall time, the estimate least disturbed by other load."""
    best = {"none": float("inf"), "all": float("inf")}
    with server.connect() as conn:
        for _ in range(repeats):
            for track in best:
                conn.execute(f"SET mwinv.track = '{track}'")
                start = time.perf_counter_ns()
                conn.execute(HOOK_DO)
                best[track] = min(best[track], (time.perf_counter_ns() - start) / HOOK_LOOP)
    return best["none"], best["all"]


def reader_for(server: PgServer, capture_dir: Path, spool_mb: int) -> StatementDrainer:
    """The capture's own reader of the ring (spooled or converted into Parquet parts in capture_dir)."""
    with connect_untracked(server.conninfo()) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS mwinv")
    return StatementDrainer(server.conninfo(), Capture(capture_dir).create(), node="bench", spool_mb=spool_mb).start()


@click.command(epilog=__doc__.split("Usage:")[1], context_settings={"max_content_width": 110})
@click.option("--rounds", default=5, show_default=True, help="Interleaved rounds.")
@click.option("--seconds", default=10, show_default=True, help="pgbench -T per server and round.")
@click.option("--clients", default=2, show_default=True, help="pgbench clients (as many as cores).")
@click.option("--scale", default=10, show_default=True, help="pgbench scale factor.")
def main(rounds: int, seconds: int, clients: int, scale: int) -> None:
    """pgbench -S TPS with mwinv vs no extension, pg_stat_statements, pgss + pg_stat_kcache, pg_wait_sampling."""
    console = Console(width=120)
    tps: dict[str, list[float]] = {name: [] for name in CONFIGS}
    cpu_per_txn: dict[str, list[float]] = {name: [] for name in CONFIGS}
    with ExitStack() as stack:
        servers = {}
        for name, preload in CONFIGS.items():
            gucs = {"shared_buffers": "'256MB'"}
            with console.status(f"starting and loading server {name!r} (pgbench -i -s {scale})"):
                srv = stack.enter_context(PgServer(name=f"bench-{len(servers)}", shared_preload_libraries=preload,
                                                   gucs=gucs))
                pgbench(srv, "-i", "-q", "-s", str(scale))
                srv.psql("VACUUM ANALYZE")
            servers[name] = srv
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        drainers = {name: reader_for(servers[name], tmp / str(i), mb) for i, (name, mb) in enumerate(SPOOL_MB.items())}
        reader_cpu = {name: 0.0 for name in drainers}
        reader_wall = {name: 0.0 for name in drainers}
        names = list(CONFIGS)
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                with console.status(f"round {r + 1}/{rounds}: {name}"):
                    cpu0, wall0 = time.process_time(), time.monotonic()
                    t, c = run_select_only(servers[name], clients, seconds)
                    if name in drainers:   # its reader's threads are what runs in this process meanwhile
                        reader_cpu[name] += time.process_time() - cpu0
                        reader_wall[name] += time.monotonic() - wall0
                tps[name].append(t)
                cpu_per_txn[name].append(c)
            console.print(f"round {r + 1} TPS: " + ", ".join(f"{n} {tps[n][-1]:.0f}" for n in names))
        # the pgbench rounds' records (the DO loops below record a million statements a second on purpose)
        written, dropped, stop_cpu, stop_wall = {}, {}, {}, {}
        for name, drainer in drainers.items():
            with console.status(f"{name}: the reader stops (and converts what it spooled)"):
                cpu0, wall0 = time.process_time(), time.monotonic()
                written[name] = drainer.stop()
                stop_cpu[name], stop_wall[name] = time.process_time() - cpu0, time.monotonic() - wall0
            with connect_untracked(servers[name].conninfo()) as conn:
                dropped[name] = conn.execute("SELECT dropped FROM mwinv_info").fetchone()[0]
        with console.status("mwinv hook cost inside one backend"):
            base_ns, all_ns = hook_cost_ns(servers["mwinv"], 2 * rounds)

    table = Table(title=f"pgbench -S -M prepared, scale {scale}, {clients} clients, {rounds} x {seconds} s")
    table.add_column("server")
    table.add_column("median TPS", justify="right")
    table.add_column("median ratio vs none", justify="right")
    table.add_column("TPS overhead", justify="right")
    table.add_column("server CPU µs/txn", justify="right")
    table.add_column("CPU/txn ratio vs none", justify="right")
    for name in names:
        ratio = statistics.median(t / n for t, n in zip(tps[name], tps["none"]))
        cpu_ratio = statistics.median(c / n for c, n in zip(cpu_per_txn[name], cpu_per_txn["none"]))
        table.add_row(name, f"{statistics.median(tps[name]):.0f}", f"{ratio:.4f}", f"{(1 - ratio) * 100:+.2f} %",
                      f"{statistics.median(cpu_per_txn[name]) / 1000:.2f}", f"{cpu_ratio:.4f}")
    console.print(table)
    for name in drainers:
        console.print(f"{name}: records written by the reader {written[name]:,}, dropped {dropped[name]:,}; the "
                      f"reader's CPU during its rounds {100 * reader_cpu[name] / max(reader_wall[name], 1e-9):.2f} % "
                      f"of one core; at its stop {stop_cpu[name]:.2f} s of CPU in {stop_wall[name]:.2f} s "
                      f"({1e9 * stop_cpu[name] / max(written[name], 1):.0f} ns a record)")
    console.print(f"mwinv per nested statement in one backend ({HOOK_LOOP} x PERFORM, best of {2 * rounds}): "
                  f"track = none {base_ns:.0f} ns, track = all {all_ns:.0f} ns, "
                  f"difference {all_ns - base_ns:+.0f} ns per recorded statement")


if __name__ == "__main__":
    run_main(main, "bench_extension")
