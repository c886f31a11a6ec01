"""Correlator throughput (issue 6, "Performance"): mwinv's correlate() end to end against a naive
pandas merge of the same Parquet inputs, side by side in one run; and the report on the same capture.

`record` makes a real capture once: pgbench (-S by default, --tpcb for the TPC-B-like script) for
--seconds against a PostgreSQL with the mwinv extension (every statement records rusage), under
NodeCapture with the default events. It is kept in --capture and reused (--rerecord to record
again); it fails, keeping the capture, when it holds fewer than --min-events kernel events or
--min-statements statements (a 2-vCPU VM recorded 25-35k kernel events/s under load, ~1 M/s when
quiet: 30 s of pgbench -S gave 30 M events).

`measure` runs each contender in its own child process (peak RSS = that child's VmHWM), killed
at --timeout seconds or --memory-limit of resident memory:
  mwinv   correlate(capture): load + checks, attribution, kernel hot spots, writing the derived tables
  pandas  what a user writes first: read kernel_event and statement into DataFrames, on-CPU intervals
          from sched_switch, pd.merge_asof by pid onto the statements, per-statement on-CPU sums
  report  what `mwinv-correlate --report` adds once the capture is correlated: classification, model
          estimates and what-if predictions for every statement, advice for the top ones, the derived
          tables and report.html/.md (the capture is calibrated first, untimed, if it is not)
and compares mwinv's and pandas' per-statement CPU time (mwinv cpu_user + cpu_sys vs pandas on-CPU), and the
report's time with the correlation's.

Usage:
    python -m bench.bench_correlate                    # record if missing, then measure
    python -m bench.bench_correlate record --seconds 30 --clients 2
    python -m bench.bench_correlate record --capture /tmp/small --seconds 10 --min-events 0 --min-statements 0
    python -m bench.bench_correlate measure --capture /tmp/small --timeout 600 --memory-limit 8
    python -m bench.bench_correlate measure --only mwinv --steps    # timing of each correlator step
    python -m bench.bench_correlate measure --repeat 3              # best and median of 3 interleaved rounds
    python -m bench.bench_correlate measure --only mwinv --only report
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from bench.machine import memory_line
from mwinv.capture.tables import Capture
from mwinv.cli.common import run_main
from mwinv.errors import MwinvError

DEFAULT_CAPTURE = "/tmp/mwinv-bench-capture"
CONTENDERS = ("mwinv", "pandas", "report")
GOAL_EVENTS_PER_S = 1_000_000
GOAL_RSS_BYTES = 2 * 2**30


def table_rows(capture: Capture, table: str) -> int:
    """Rows of a capture table from the Parquet footers (no data read)."""
    return sum(pq.ParquetFile(p).metadata.num_rows for p in capture.parts(table))


# ---------------------------------------------------------------------------------------------- record

def record(capture_dir: Path, seconds: int, clients: int, scale: int, select_only: bool, console: Console) -> dict:
    """One real capture of pgbench under NodeCapture; returns what it holds."""
    from bench.bench_extension import pgbench
    from mwinv.node_capture import NodeCapture
    from mwinv.options import CaptureOptions
    from mwinv.engines.postgresql.reader import connect_untracked
    from mwinv.engines.postgresql.server import PgServer

    if capture_dir.exists():
        shutil.rmtree(capture_dir)
    gucs = {"compute_query_id": "on", "mwinv.resource_min_cost": "0", "mwinv.buffer_size": "1048576",
            "shared_buffers": "'256MB'", "max_wal_size": "'4GB'",
            # commits without waiting for the WAL flush: a VM's slow fsync held TPC-B to ~100 tps
            "synchronous_commit": "off"}
    with PgServer(name="bench-correlate", shared_preload_libraries=["mwinv"], gucs=gucs) as server:
        with console.status(f"pgbench -i -s {scale}"):
            pgbench(server, "-i", "-q", "-s", str(scale))
            for sql in ("CREATE EXTENSION mwinv", "VACUUM ANALYZE", "CHECKPOINT"):
                server.psql(sql)
        with connect_untracked(server.conninfo()) as conn:
            conn.execute("SELECT count(*) FROM mwinv_drain()")  # the set-up's statements are no workload
        mode = ["-S"] if select_only else []
        with console.status(f"recording pgbench {' '.join(mode) or 'TPC-B'} -c {clients} -T {seconds} "
                            "under NodeCapture"):
            started = time.monotonic()
            with NodeCapture(capture_dir, CaptureOptions(stacks=False), postmaster_pid=server.postmaster_pid(),
                             conninfo=server.conninfo()) as cap:
                out = pgbench(server, "-n", *mode, "-M", "prepared", "-c", str(clients), "-j", str(clients),
                              "-T", str(seconds))
            took = time.monotonic() - started
        with connect_untracked(server.conninfo()) as conn:
            dropped, texts_dropped = conn.execute("SELECT dropped, texts_dropped FROM mwinv_info()").fetchone()
    if cap.summary.get("errors"):
        raise MwinvError(f"capture failed: {cap.summary['errors']}")
    cap_ = Capture(capture_dir)
    info = {"kernel_events": table_rows(cap_, "kernel_event"), "statements": table_rows(cap_, "statement"),
            "lost_kernel_events": cap.summary.get("parse", {}).get("lost_events", 0),
            "dropped_statements": dropped, "dropped_texts": texts_dropped,
            "workload": f"pgbench {' '.join(mode) or '(TPC-B-like)'} -M prepared -c {clients} -j {clients} "
                        f"-T {seconds}, scale {scale}",
            "tps": next((line.split("=")[1].split("(")[0].strip() for line in out.splitlines()
                         if line.startswith("tps")), "?"),
            "record_and_parse_s": round(took, 1)}
    (capture_dir / "bench_correlate.json").write_text(json.dumps(info, indent=2))
    return info


def describe(capture_dir: Path) -> dict:
    info_file = capture_dir / "bench_correlate.json"
    info = json.loads(info_file.read_text()) if info_file.exists() else {}
    cap = Capture(capture_dir)
    info.update(kernel_events=table_rows(cap, "kernel_event"), statements=table_rows(cap, "statement"))
    return info


def print_capture(console: Console, capture_dir: Path, info: dict) -> None:
    console.print(f"capture {capture_dir}: {info['kernel_events']:,} kernel events, {info['statements']:,} "
                  f"statements ({info.get('workload', 'workload unknown')}, {info.get('tps', '?')} tps); "
                  f"lost kernel events {info.get('lost_kernel_events', '?')}, dropped statement records "
                  f"{info.get('dropped_statements', '?')}")


# ---------------------------------------------------------------------------------------------- contenders

def report_seconds(seconds: float) -> None:
    """The contender's result, printed (and flushed) before its comparison output is written, so a
    contender killed while writing that still has its time."""
    print(json.dumps({"seconds": seconds}), flush=True)


def run_mwinv(capture_dir: Path, cpu_out: Path, steps: bool) -> None:
    """correlate() end to end, timed; then its per-statement CPU goes to cpu_out."""
    from mwinv.correlator.pipeline import correlate

    started = last = time.perf_counter()
    current = "open and check the capture"

    def progress(step: str) -> None:
        """Called as each step begins: prints how long the previous one took."""
        nonlocal last, current
        now = time.perf_counter()
        if steps:
            print(f"  {now - last:8.2f} s  {current}", file=sys.stderr, flush=True)
        last, current = now, step

    db = correlate(capture_dir, write=True, progress=progress)
    progress("done")
    report_seconds(time.perf_counter() - started)
    db.con.execute(f"""
        COPY (SELECT a.node, a.statement_id, sum(a.ns) FILTER (WHERE a.component IN ('cpu_user', 'cpu_sys')) AS cpu_ns,
                     any_value(s.start_ns >= r.lo AND s.end_ns <= r.hi) AS traced
              FROM statement_attribution a JOIN statement_clean s USING (node, statement_id)
              JOIN trace_range r USING (node) GROUP BY ALL) TO '{cpu_out}' (FORMAT parquet)""")


def run_pandas(capture_dir: Path, cpu_out: Path) -> None:
    """The naive pandas answer to "how much of each statement ran on a CPU", timed; then to cpu_out."""
    import pandas as pd

    started = time.perf_counter()
    cap = Capture(capture_dir)
    events = pd.read_parquet(cap.table_dir("kernel_event"))
    stmts = pd.read_parquet(cap.table_dir("statement"))
    stmts = stmts[stmts["nesting_level"].fillna(0) == 0]

    # on-CPU intervals: from switching a pid in to switching it out
    sw = events[events["event"] == "sched_switch"]
    # (prev_pid/next_pid come back as float64: the columns are nullable)
    ins = pd.DataFrame({"node": sw["node"], "pid": sw["next_pid"].astype("int64"), "ts": sw["ts_ns"], "on": True})
    outs = pd.DataFrame({"node": sw["node"], "pid": sw["prev_pid"].astype("int64"), "ts": sw["ts_ns"], "on": False})
    points = pd.concat([ins, outs]).sort_values(["node", "pid", "ts"], kind="stable")
    points["next_ts"] = points.groupby(["node", "pid"])["ts"].shift(-1)
    on = points[points["on"] & points["next_ts"].notna()].rename(columns={"ts": "a", "next_ts": "b"})
    on = on[on["pid"].isin(stmts["pid"])]
    # (node is dictionary-encoded in the Parquet files: pandas reads it as a categorical)
    on["key"] = on["node"].astype(str) + ":" + on["pid"].astype(str)
    # statement ids are 64-bit and would lose digits as floats where a merge leaves NaN: merge on row numbers
    stmts = stmts.reset_index(drop=True)
    stmts = stmts.assign(key=stmts["node"].astype(str) + ":" + stmts["pid"].astype(str), row=stmts.index)

    # (1) each interval against the statement that started last before it
    left = pd.merge_asof(on.sort_values("a"), stmts[["key", "row", "start_ns", "end_ns"]].sort_values("start_ns"),
                         left_on="a", right_on="start_ns", by="key", direction="backward").dropna(subset=["row"])
    left["ns"] = (left[["b", "end_ns"]].min(axis=1) - left["a"]).clip(lower=0)
    # (2) each statement against the interval it started in (an interval that began before it)
    right = pd.merge_asof(stmts[["key", "row", "start_ns", "end_ns"]].sort_values("start_ns"),
                          on[["key", "a", "b"]].sort_values("a"), left_on="start_ns", right_on="a", by="key",
                          direction="backward").dropna(subset=["a"])
    right = right[right["a"] < right["start_ns"]]
    right["ns"] = (right[["b", "end_ns"]].min(axis=1) - right["start_ns"]).clip(lower=0)

    both = pd.concat([left[["row", "ns"]], right[["row", "ns"]]])
    per_row = both.groupby("row")["ns"].sum()
    cpu = stmts[["node", "statement_id"]].assign(cpu_ns=per_row.reindex(stmts.index, fill_value=0).to_numpy())
    report_seconds(time.perf_counter() - started)
    cpu.astype({"cpu_ns": "int64"}).to_parquet(cpu_out)


def run_report(capture_dir: Path, out: Path) -> None:
    """The report on a correlated capture, timed: the derivation (classes, model, predictions, advice)
    written into the capture, report.html and report.md (into a directory beside `out`)."""
    from mwinv.calibrate import calibrate, store
    from mwinv.correlator.load import remove_stale
    from mwinv.correlator.pipeline import correlate
    from mwinv.correlator.report import load, render_report

    cap = Capture(capture_dir)
    if not cap.has("statement_attribution"):
        correlate(capture_dir)
    if not cap.manifest().get("calibration"):
        store(capture_dir, calibrate(capture_dir))  # the model needs the platform: measured once, untimed
    remove_stale(cap)   # derived by an earlier run: derived again, as after a new correlation
    started = time.perf_counter()
    render_report(load(capture_dir), out.with_suffix(""))   # derives (and writes) what the report reads
    report_seconds(time.perf_counter() - started)


# ---------------------------------------------------------------------------------------------- measure

@dataclass
class Result:
    name: str
    seconds: float | None
    max_rss: int
    failure: str | None = None


def _status(pid: int, key: str) -> int:
    """A size from /proc/pid/status (VmRSS: resident now, VmHWM: its peak since exec), in bytes."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_contender(name: str, capture_dir: Path, cpu_out: Path, timeout_s: float, memory_limit: int,
                  steps: bool) -> Result:
    """One contender in a child process: its seconds (measured inside), its peak resident memory, or why it
    was stopped. The peak is the child's VmHWM (as it printed it at its end, else polled): its ru_maxrss
    starts from this process's resident size at the fork (exec keeps it), a floor under every figure."""
    result_file = cpu_out.with_suffix(".json")
    argv = [sys.executable, "-m", "bench.bench_correlate", "contender", name, str(capture_dir), str(cpu_out)]
    if steps:
        argv.append("--steps")
    proc = subprocess.Popen(argv, stdout=result_file.open("w"))
    started = time.monotonic()
    failure = None
    peak = 0
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, _status(proc.pid, "VmHWM"))
            if time.monotonic() - started > timeout_s:
                failure = f"timed out after {timeout_s:.0f} s"
            elif _status(proc.pid, "VmRSS") > memory_limit:
                failure = f"out of memory (resident > {memory_limit / 2**30:.1f} GiB)"
            if failure:
                proc.send_signal(signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    printed = result_file.read_text().strip()
    peak = max([peak] + [json.loads(line)["peak_bytes"] for line in printed.splitlines() if '"peak_bytes"' in line])
    max_rss = peak or usage.ru_maxrss * 1024
    if failure is None and proc.returncode != 0:
        failure = f"failed (exit status {proc.returncode})"
    if printed and (failure is None or failure.startswith("timed out")):
        return Result(name, json.loads(printed.splitlines()[0])["seconds"], max_rss)  # done, killed while writing
    return Result(name, None, max_rss, failure)


def cpu_agreement(mwinv_cpu: Path, pandas_cpu: Path) -> str:
    import duckdb

    n, same, total_m, total_p, within = duckdb.sql(f"""
        SELECT count(*), count(*) FILTER (WHERE m.cpu_ns = p.cpu_ns),
               sum(m.cpu_ns), sum(p.cpu_ns),
               count(*) FILTER (WHERE abs(m.cpu_ns - p.cpu_ns) <= greatest(1000, 0.01 * p.cpu_ns))
        FROM '{mwinv_cpu}' m JOIN '{pandas_cpu}' p USING (node, statement_id) WHERE m.traced""").fetchone()
    if not n:
        return "no statements in common"
    return (f"{n:,} statements inside the kernel trace; per-statement CPU equal in {same / n:.2%}, within 1 % or 1 µs in "
            f"{within / n:.2%}; total CPU mwinv {total_m / 1e9:.3f} s, pandas {total_p / 1e9:.3f} s")


@dataclass
class Runs:
    """One contender's runs of a measurement: best and median seconds of those that finished."""
    name: str
    results: list[Result]

    @property
    def seconds(self) -> list[float]:
        return sorted(r.seconds for r in self.results if r.seconds)

    @property
    def best(self) -> float | None:
        return self.seconds[0] if self.seconds else None

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    @property
    def max_rss(self) -> int:
        return max(r.max_rss for r in self.results)

    @property
    def failure(self) -> str | None:
        return next((r.failure for r in reversed(self.results) if r.failure), None)


def measure(capture_dir: Path, only: tuple[str, ...], timeout_s: float, memory_limit: int, steps: bool,
            repeat: int, console: Console) -> None:
    info = describe(capture_dir)
    print_capture(console, capture_dir, info)
    events = info["kernel_events"]
    runs = {name: Runs(name, []) for name in only}
    console.print(memory_line())
    with tempfile.TemporaryDirectory(prefix="mwinv-bench-correlate-") as tmp:
        outs = {name: Path(tmp) / f"{name}_cpu.parquet" for name in CONTENDERS}
        # rounds interleave the contenders, so a slow spell of the machine falls on both
        for round_ in range(repeat):
            for name in only:
                with console.status(f"round {round_ + 1}/{repeat}, {name}: {events:,} kernel events"):
                    r = run_contender(name, capture_dir, outs[name], timeout_s, memory_limit, steps)
                runs[name].results.append(r)
                console.print(f"round {round_ + 1}, {name}: " + (r.failure or f"{r.seconds:.1f} s")
                              + f", peak RSS {r.max_rss / 2**20:,.0f} MiB; {memory_line()}")
        table = Table(title=f"{events:,} kernel events and {info['statements']:,} statements, "
                            f"{repeat} round(s)")
        for col in ("contender", "best s", "median s", "kernel events/s (best)", "peak RSS"):
            table.add_column(col, justify="left" if col == "contender" else "right")
        for r in runs.values():
            table.add_row(r.name, f"{r.best:.1f}" if r.best else r.failure, f"{r.median:.1f}" if r.median else "-",
                          f"{events / r.best:,.0f}" if r.best else "-", f"{r.max_rss / 2**20:,.0f} MiB")
        console.print(table)
        m, p, rep = runs.get("mwinv"), runs.get("pandas"), runs.get("report")
        if m and rep and m.best and rep.best:
            console.print(f"report vs correlation: {rep.best / m.best:.2f}x its time (report seconds / correlate "
                          f"seconds, best of each), peak RSS {rep.max_rss / max(m.max_rss, 1):.2f}x")
        if m and m.best:
            ok = events / m.best >= GOAL_EVENTS_PER_S and m.max_rss <= GOAL_RSS_BYTES
            console.print(f"goal (>= {GOAL_EVENTS_PER_S:,} events/s, <= 2 GiB): {'met' if ok else 'MISSED'}")
        if m and p and m.best:
            if p.best:
                console.print(f"mwinv vs pandas: {p.best / m.best:.2f}x the speed (pandas seconds / mwinv seconds, "
                              f"best of each; medians {p.median / m.median:.2f}x), peak RSS mwinv / pandas "
                              f"{m.max_rss / max(p.max_rss, 1):.2f}")
                if outs["mwinv"].exists() and outs["pandas"].exists():
                    console.print("per-statement CPU agreement: " + cpu_agreement(outs["mwinv"], outs["pandas"]))
            else:
                console.print(f"mwinv vs pandas: pandas {p.failure}; mwinv finished in {m.best:.1f} s")


# ---------------------------------------------------------------------------------------------- CLI

@click.group(invoke_without_command=True, epilog="\b" + __doc__.split("Usage:")[1],
             context_settings={"max_content_width": 110})
@click.option("--capture", "capture_dir", default=DEFAULT_CAPTURE, show_default=True, type=click.Path(path_type=Path),
              help="Where the capture is kept (reused when present).")
@click.pass_context
def main(ctx: click.Context, capture_dir: Path) -> None:
    """Correlator throughput: mwinv correlate() vs a naive pandas merge on a real pgbench capture."""
    ctx.obj = capture_dir
    if ctx.invoked_subcommand is None:
        ctx.invoke(record_cmd, capture_dir=capture_dir)
        ctx.invoke(measure_cmd, capture_dir=capture_dir)


@main.command("record")
@click.option("--capture", "capture_dir", type=click.Path(path_type=Path), default=None,
              help="Overrides the group's --capture.")
@click.option("--rerecord", is_flag=True, help="Record again even if the capture exists.")
@click.option("--seconds", default=30, show_default=True, help="pgbench -T under the capture.")
@click.option("--clients", default=2, show_default=True, help="pgbench clients (as many as cores).")
@click.option("--scale", default=10, show_default=True, help="pgbench scale factor.")
@click.option("--select-only/--tpcb", default=True, show_default=True,
              help="pgbench -S, or the TPC-B-like script (on a loaded 2-vCPU VM -S gave ~35k kernel events/s, TPC-B ~25k).")
@click.option("--min-events", default=10_000_000, show_default=True, help="Fail below this many kernel events.")
@click.option("--min-statements", default=100_000, show_default=True, help="Fail below this many statements.")
@click.pass_context
def record_cmd(ctx: click.Context, capture_dir: Path | None, rerecord: bool, seconds: int, clients: int, scale: int,
               select_only: bool, min_events: int, min_statements: int) -> None:
    """Record the pgbench capture (once; reused when present)."""
    console = Console(width=120)
    capture_dir = capture_dir or ctx.obj
    if rerecord or not (capture_dir / "bench_correlate.json").exists():
        record(capture_dir, seconds, clients, scale, select_only, console)
    info = describe(capture_dir)
    print_capture(console, capture_dir, info)
    if info["kernel_events"] < min_events or info["statements"] < min_statements:
        raise MwinvError(f"{capture_dir}: {info['kernel_events']:,} kernel events / {info['statements']:,} statements, "
                         f"below --min-events {min_events:,} / --min-statements {min_statements:,} "
                         "(record longer: --rerecord --seconds N)")


@main.command("measure")
@click.option("--capture", "capture_dir", type=click.Path(path_type=Path), default=None,
              help="Overrides the group's --capture.")
@click.option("--only", type=click.Choice(CONTENDERS), multiple=True, help="Run only this contender (repeatable).")
@click.option("--timeout", "timeout_s", default=1200.0, show_default=True, help="Seconds before a contender is killed.")
@click.option("--memory-limit", "memory_gb", default=12.0, show_default=True,
              help="GiB of resident memory before a contender is killed.")
@click.option("--steps", is_flag=True, help="Print the time of each correlator step (stderr).")
@click.option("--repeat", default=1, show_default=True, help="Rounds, each running every contender once (interleaved).")
@click.pass_context
def measure_cmd(ctx: click.Context, capture_dir: Path | None, only: tuple[str, ...], timeout_s: float,
                memory_gb: float, steps: bool, repeat: int) -> None:
    """Time mwinv's correlate() and the naive pandas merge on the capture, side by side."""
    capture_dir = capture_dir or ctx.obj
    if not (capture_dir / "manifest.json").exists():
        raise MwinvError(f"{capture_dir}: no capture (run `python -m bench.bench_correlate record` first)")
    measure(capture_dir, only or CONTENDERS, timeout_s, int(memory_gb * 2**30), steps, max(repeat, 1),
            Console(width=120))


@main.command("contender", hidden=True)
@click.argument("name", type=click.Choice(CONTENDERS))
@click.argument("capture_dir", type=click.Path(path_type=Path))
@click.argument("cpu_out", type=click.Path(path_type=Path))
@click.option("--steps", is_flag=True)
def contender_cmd(name: str, capture_dir: Path, cpu_out: Path, steps: bool) -> None:
    """Child process of `measure`: runs one contender, prints {"seconds": ...}, then {"peak_bytes": ...}
    (its VmHWM at the end)."""
    if name == "mwinv":
        run_mwinv(capture_dir, cpu_out, steps)
    elif name == "report":
        run_report(capture_dir, cpu_out)
    else:
        run_pandas(capture_dir, cpu_out)
    print(json.dumps({"peak_bytes": _status(os.getpid(), "VmHWM")}), flush=True)


if __name__ == "__main__":
    run_main(main, "bench_correlate")
