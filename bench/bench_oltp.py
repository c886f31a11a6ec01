"""The whole capture's cost under OLTP load: pgbench -S (prepared, select-only) against one PostgreSQL
with the mwinv extension preloaded, with no capture, with statements only (the extension's reader and
the sampler, `mwinv-trace capture --no-trace`), with the default kernel events, with stacks, and with
each family of the default events alone (sched + block, the wait syscalls, net); and,
on the same rounds, what a user would pick instead: `trace-cmd record` of the equivalent events,
filtered to the server's pids, and a `bpftrace` script counting the same tracepoints per pid in the
kernel. The configurations run interleaved (rotated order) in each round; the figure is the median over
rounds of each one's TPS divided by the same round's run without a capture. A second run without any
capture ("none again") is the A/A control. For the captures: kernel events per second, events lost,
and the capture's own CPU while pgbench runs (this process's threads; the parse afterwards is not
counted; bpftrace's is its own process's, not shown) as a share of one core.

Duty-cycled captures (`mwinv-trace capture --duty`: events on one window in N, statements always)
and the default capture's event budget (every event until the rate is over it, then one window in N;
also with stacks, as `mwinv-trace capture --stacks` does) run beside them; with --shares, one more full and one duty-cycled capture are correlated and the
pgbench statement's component shares over the statements each traced are printed side by side.

    python -m bench.bench_oltp [--rounds 3] [--seconds 10] [--clients 2] [--scale 10]
    python -m bench.bench_oltp --configs "none,none again,statements only,default events,events 1 s in 10" --shares
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mwinv.node_capture import NodeCapture
from mwinv.correlator.pipeline import correlate
from mwinv.kernel_trace.recorder import (BLOCK_EVENTS, DEFAULT_EVENT_BUDGET, NET_EVENTS, SCHED_EVENTS, default_events,
                                         descendants)
from mwinv.engines.postgresql.server import PgServer, pg_bindir

# the default events by family, each alone beside the statements: which family costs what
FAMILIES = {"sched + block": SCHED_EVENTS + BLOCK_EVENTS, "syscalls": None, "net": NET_EVENTS}
# duty-cycled: events on for 1 s of every N (the rest of the time disabled), statements always
DUTY = {"events 1 s in 5": 0.2, "events 1 s in 10": 0.1, "stacks 1 s in 10": 0.1}
# what `mwinv-trace capture` (and `... --stacks`) does by default: every event until the rate is over the budget
BUDGETED = "default events within budget"
BUDGETED_STACKS = "stacks within budget"
CONFIGS = ("none", "none again", "statements only", "default events", BUDGETED, *DUTY, "stacks", BUDGETED_STACKS,
           *(f"only {f}" for f in FAMILIES), "trace-cmd record", "bpftrace")
TPS_RE = re.compile(r"tps = ([\d.]+)")


def pgbench(server: PgServer, *args: str) -> str:
    argv = [str(pg_bindir() / "pgbench"), "-h", str(server.socket_dir), "-p", str(server.port), "-U", "postgres",
            *args, "postgres"]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _tracepoints() -> list[str]:
    """The recorder's default events as tracepoint names (subsystem:event), for trace-cmd and bpftrace."""
    return [e for e in default_events(False) if ":" in e]


def _remove_instance(name: str) -> None:
    path = Path("/sys/kernel/tracing/instances") / name
    if path.exists():
        path.rmdir()


def run_config(server: PgServer, config: str, args, out: Path) -> dict:
    bench = ["-n", "-S", "-M", "prepared", "-c", str(args.clients), "-j", str(args.clients), "-T", str(args.seconds)]
    result: dict = {}
    cpu0 = _self_cpu_s()
    if config.startswith("none"):
        text = pgbench(server, *bench)
    elif config in ("statements only", "default events", BUDGETED, "stacks", BUDGETED_STACKS, *DUTY) \
            or config.startswith("only "):
        family = config.removeprefix("only ")
        events = None
        if family in FAMILIES:
            events = FAMILIES[family] or [e for e in default_events(False) if e.startswith("syscalls:")]
        cap = NodeCapture(out, postmaster_pid=server.postmaster_pid(), conninfo=server.conninfo(), node="bench",
                          trace=config != "statements only", stacks=config.startswith("stacks"), events=events,
                          duty=DUTY.get(config, 1.0),
                          event_budget=DEFAULT_EVENT_BUDGET if config in (BUDGETED, BUDGETED_STACKS) else None).start()
        cpu0 = _self_cpu_s()   # the capture's threads while pgbench runs; its parse afterwards is not load
        try:
            text = pgbench(server, *bench)
            result["own_cpu"] = (_self_cpu_s() - cpu0) / args.seconds
        finally:
            summary = cap.stop()
        parse = summary.get("parse") or {}
        result.update(events=parse.get("events", 0), lost=parse.get("lost_events", 0),
                      duty=[round(1 / c["duty"]) for c in summary.get("recorder", {}).get("duty_changes", [])])
    else:
        pids = [str(p) for p in descendants(server.postmaster_pid())]
        instance = f"mwinv-bench-{os.getpid()}"
        if config == "trace-cmd record":
            # in an instance of its own (never the top level, which others may use), removed afterwards
            argv = ["trace-cmd", "record", "-o", str(out / "trace.dat"), "-q", "-B", instance, "-c"]
            for tp in _tracepoints():
                argv += ["-e", tp]
            for p in pids:
                argv += ["-P", p]
        else:
            probes = ",".join(f"tracepoint:{tp}" for tp in _tracepoints())
            argv = ["bpftrace", "-q", "-e", f"{probes} /pid == {server.postmaster_pid()} || "
                    f"curtask->real_parent->tgid == {server.postmaster_pid()}/ {{ @[probe] = count(); }}"]
        out.mkdir(parents=True, exist_ok=True)
        tracer = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)   # both compile or set up before tracing: not part of the measured run
        if tracer.poll() is not None:
            _remove_instance(instance)
            return {"tps": None, "error": (tracer.stderr.read().strip().splitlines() or ["exited"])[-1]}
        try:
            text = pgbench(server, *bench)
        finally:
            tracer.send_signal(signal.SIGINT)
            try:
                stdout, _ = tracer.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                tracer.kill()
                stdout, _ = tracer.communicate()
            _remove_instance(instance)
        if config == "bpftrace":
            result["events"] = sum(int(n) for n in re.findall(r"\]: (\d+)", stdout))
    result["tps"] = float(TPS_RE.search(text).group(1))
    result.setdefault("own_cpu", (_self_cpu_s() - cpu0) / args.seconds)
    return result


def shares(capture_dir: Path) -> tuple[dict[str, float], int, int, int]:
    """The busiest query id's component shares over its traced executions; traced and all executions; the
    largest gap between a traced statement's components and its wall time (ns)."""
    db = correlate(capture_dir, write=False)
    (qid,) = db.sql("SELECT query_id FROM statement_clean GROUP BY query_id ORDER BY count(*) DESC LIMIT 1").fetchone()
    rows = db.sql("""
        SELECT component, sum(ns + from_workers_ns) FROM statement_attribution
        JOIN traced_statement USING (node, statement_id) WHERE query_id = ? GROUP BY ALL""", [qid]).fetchall()
    total = sum(ns for _, ns in rows) or 1
    traced, calls = db.sql("""
        SELECT count(t.statement_id), count(*) FROM statement_clean s
        LEFT JOIN traced_statement t USING (node, statement_id) WHERE s.query_id = ?""", [qid]).fetchone()
    (gap,) = db.sql("""
        SELECT coalesce(max(abs(got - wall)), 0) FROM (
            SELECT any_value(s.end_ns - s.start_ns) AS wall, sum(a.ns + a.from_workers_ns) AS got
            FROM statement_attribution a JOIN traced_statement USING (node, statement_id)
            JOIN statement_clean s USING (node, statement_id) GROUP BY a.node, a.statement_id)""").fetchone()
    return {c: ns / total for c, ns in rows}, traced, calls, gap


def compare_shares(server: PgServer, args, work: Path, console: Console) -> None:
    """A full, a budgeted and the duty-cycled captures of the same load, correlated: shares side by side."""
    got = {}
    for config in ("default events", BUDGETED, *(c for c in DUTY if c.startswith("events"))):
        out = work / f"shares-{config.replace(' ', '-')}"
        run_config(server, config, args, out)
        console.log(f"correlating the {config} capture")
        got[config] = shares(out)
        shutil.rmtree(out, ignore_errors=True)
    table = Table(title="the pgbench statement's components over the executions each capture traced whole")
    table.add_column("component")
    for config, (_, traced, calls, gap) in got.items():
        table.add_column(f"{config}\n{traced:,} of {calls:,} traced\nmax |sum - wall| {gap} ns", justify="right")
    comps = sorted({c for s, *_ in got.values() for c in s}, key=lambda c: -got["default events"][0].get(c, 0))
    for c in comps:
        if any(s.get(c, 0) >= 0.0005 for s, *_ in got.values()):
            table.add_row(c, *(f"{100 * s.get(c, 0):.1f} %" for s, *_ in got.values()))
    console.print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--configs", help="comma-separated subset of: " + ", ".join(CONFIGS))
    ap.add_argument("--shares", action="store_true", help="correlate a full and the duty-cycled captures, compare")
    args = ap.parse_args()
    configs = CONFIGS
    if args.configs:
        configs = tuple(c.strip() for c in args.configs.split(","))
        if unknown := [c for c in configs if c not in CONFIGS]:
            ap.error(f"--configs: unknown {', '.join(unknown)}")
        if "none" not in configs:
            configs = ("none", *configs)   # every ratio is over the same round's run without a capture
    console = Console()
    results: dict[str, list[dict]] = {c: [] for c in configs}
    work = Path(tempfile.mkdtemp(prefix="mwinv-bench-oltp-"))
    try:
        with PgServer(name="oltp", shared_preload_libraries=["mwinv"], gucs={"compute_query_id": "on"}) as server:
            server.psql("CREATE EXTENSION mwinv")
            pgbench(server, "-i", "-q", "-s", str(args.scale))
            for r in range(args.rounds):
                order = configs[r % len(configs):] + configs[:r % len(configs)]
                for config in order:
                    out = work / f"{r}-{config.replace(' ', '-')}"
                    res = run_config(server, config, args, out)
                    results[config].append(res)
                    console.log(f"round {r + 1}: {config}: " + (f"{res['tps']:,.0f} TPS" if res["tps"] else
                                                                  f"failed ({res.get('error')})")
                                + "".join(f", then one window in {k}" for k in res.get("duty", [])))
                    shutil.rmtree(out, ignore_errors=True)
            if args.shares:
                compare_shares(server, args, work, console)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table = Table(title=f"pgbench -S -M prepared, {args.clients} clients, {args.seconds} s x {args.rounds} rounds, "
                        f"scale {args.scale}")
    for col in ("configuration", "median TPS", "TPS ratio vs none", "events/s", "lost", "capture's own CPU"):
        table.add_column(col, justify="left" if col == "configuration" else "right")
    base = [r["tps"] for r in results["none"]]
    for config in configs:
        runs = [r for r in results[config] if r["tps"]]
        if not runs:
            table.add_row(config, "-", "-", "-", "-", results[config][0].get("error", "failed"))
            continue
        ratios = [r["tps"] / b for r, b in zip(results[config], base) if r["tps"]]
        events = [r["events"] / args.seconds for r in runs if "events" in r]
        lost = sum(r.get("lost", 0) for r in runs)
        table.add_row(config, f"{statistics.median(r['tps'] for r in runs):,.0f}", f"{statistics.median(ratios):.3f}",
                      f"{statistics.median(events):,.0f}" if events else "-",
                      f"{lost:,}" if any("lost" in r for r in runs) else "-",
                      f"{100 * statistics.median(r['own_cpu'] for r in runs):.1f} %")
    console.print(table)


if __name__ == "__main__":
    main()
