"""mwinv-trace: record the kernel activity of a database's processes, and parse kernel traces
into capture tables.

\b
Subcommands:
  capture  one whole capture on this node: kernel events (+ stacks), /proc samples and the
           PostgreSQL extension's statements, into one capture directory
  parse    parse a trace.dat or a text trace (ftrace, trace-cmd report) into capture tables
  check    what this kernel allows (tracefs, events, function tracer, perf)
  clean    remove trace instances/uprobes left by killed mwinv runs
"""

from __future__ import annotations

import json
import os
import sys
import time

import click
from rich.console import Console

from mwinv.cli.common import group_option, progress_console, run_main, status_line
from mwinv.errors import MwinvError
from mwinv.kernel_trace.recorder import DEFAULT_EVENT_BUDGET, duty_change_text
from mwinv.options import KEEP_TRACE, CaptureOptions


@click.group(help=__doc__)
def cli() -> None:
    pass


@cli.command(context_settings={"ignore_unknown_options": False})
@click.argument("capture_dir", type=click.Path(file_okay=False))
@click.option("--pid", "postmaster_pid", type=int, help="postmaster pid (its children are followed).")
@click.option("--pids", "other_pids", default=None, metavar="PID[,PID...]",
              help="another DBMS's server processes (an Oracle server process, whose 10046 trace "
                   "`mwinv oracle import` joins): kernel events and samples only.")
@click.option("--data-dir", type=click.Path(exists=True, file_okay=False), help="PostgreSQL data directory.")
@click.option("--conninfo", help="libpq conninfo of the server (also used to drain the mwinv extension).")
@click.option("--duration", type=float, help="stop after this many seconds.")
@click.option("--stacks", is_flag=True, help="kernel stacks on wait events and perf CPU samples; where the kernel "
              "allows it, the function tracer on the kernel-knob families' functions (docs/kernel-advice.md).")
@click.option("--page-faults", is_flag=True, help="also trace user page faults (many events).")
@click.option("--interval", "sample_interval_s", type=float, default=CaptureOptions.sample_interval_s, show_default=True,
              help="sampling interval, s (>= 0.01).")
@click.option("--no-trace", is_flag=True, help="samples (and statements) only, no kernel tracing.")
@click.option("--duty", type=float, default=CaptureOptions.duty, show_default=True,
              help="share of the time with kernel events on (0.1: one window in ten); statements always.")
@click.option("--window", "window_s", type=float, default=CaptureOptions.window_s, show_default=True,
              help="length of one traced window with --duty, s.")
@click.option("--event-budget", type=float, default=DEFAULT_EVENT_BUDGET, show_default=True,
              help="kernel events/s per CPU: above it, fewer windows are traced (said, and in the "
                   "manifest); 0: no budget.")
@click.option("--node", help="node name in the tables (default: $MWINV_NODE or the host name).")
@click.option("--keep-trace", type=click.Choice(KEEP_TRACE), default=CaptureOptions.keep_trace, show_default=True,
              help="the raw trace once parsed: kept, compressed (kernel/NODE/trace.dat.zst: it is most of a "
                   "capture's disk) or dropped (its events are in the tables).")
@group_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def capture(capture_dir, postmaster_pid, other_pids, data_dir, conninfo, duration, stacks, page_faults,
            sample_interval_s, no_trace, duty, window_s, event_budget, node, keep_trace, command) -> None:
    """Capture until --duration, Ctrl-C, or the COMMAND after `--` exits; then parse into tables.

    \b
    Examples:
      mwinv-trace capture out/run1 --pid 4242 --duration 30
      mwinv-trace capture out/ora --pids 9854 --duration 60      # then: mwinv oracle import ... --node
      mwinv-trace capture out/run1 --data-dir /srv/pg15 --stacks -- pgbench -T 20 bench
      mwinv-trace capture out/oltp --data-dir /srv/pg15 --duty 0.1 --duration 600   # 1 s in 10 traced
      mwinv-trace capture out/all --data-dir /srv/pg15 --event-budget 0 --duration 60   # every event
      mwinv-trace capture out/run1 --pid 4242 --duration 30 --group dba   # readable by group dba
      mwinv-trace capture out/hour --data-dir /srv/pg15 --duration 3600 --keep-trace drop   # tables only
      mwinv-trace capture out/run1 --conninfo "host=/tmp port=5432 dbname=tpch" \\
          -- psql -f q1.sql "host=/tmp port=5432 dbname=tpch"
    """
    from mwinv.engines.postgresql.capture import postmaster_of
    from mwinv.node_capture import record_capture

    console = progress_console()
    pids = None
    if other_pids:
        try:
            pids = [int(p) for p in other_pids.split(",")]
        except ValueError:
            raise MwinvError(f"--pids {other_pids!r}: a comma-separated list of process ids") from None
        if postmaster_pid or data_dir or conninfo:
            raise MwinvError("--pids is for another DBMS's processes: not with --pid, --data-dir or --conninfo")
    options = CaptureOptions(node=node, stacks=stacks, sample_interval_s=sample_interval_s, page_faults=page_faults,
                             trace=not no_trace, statements=pids is None, duty=duty, window_s=window_s,
                             event_budget=event_budget or None, keep_trace=keep_trace)
    if postmaster_pid is None and pids is None:
        postmaster_pid = postmaster_of(data_dir=data_dir, conninfo=conninfo)
    if duration is None and not command:
        console.print("capturing until Ctrl-C (or give --duration / -- command)")
    with status_line(console, "capturing") as status:
        summary = record_capture(capture_dir, options, duration_s=duration, command=list(command) or None,
                                 postmaster_pid=postmaster_pid, conninfo=conninfo, pids=pids, data_dir=data_dir,
                                 progress=status)
    _print_summary(console, capture_dir, summary)
    for r in summary.get("restarts", []):
        console.print(f"the server restarted: postmaster {r['postmaster_pid_before']} -> {r['postmaster_pid_after']} "
                      f"after {(r['back_ns'] - r['gone_ns']) / 1e9:.1f} s (in the manifest)")
    if summary.get("ended"):
        console.print(summary["ended"])
    rc = summary.get("command_rc")
    if rc:
        sys.exit(rc)   # the command's status (click's Exit is swallowed in non-standalone mode)


def _print_summary(console: Console, capture_dir: str, summary: dict) -> None:
    parse = summary.get("parse") or {}
    rec = summary.get("recorder") or {}
    if rec:
        console.print(f"kernel: {parse.get('events', 0)} events, {parse.get('stacks', 0)} stacks, "
                      f"{parse.get('lost_events', 0)} lost, tracer {rec.get('tracer')}, "
                      f"{summary.get('perf_samples', 0)} perf samples, pids {len(rec.get('pids', []))}")
    for change in rec.get("duty_changes", []):
        console.print(f"at +{(change['at_ns'] - rec['windows'][0][0]) / 1e9:.1f} s: "
                      f"{duty_change_text(change, rec['event_budget'])} (in the manifest)")
    if "sampler" in summary:
        s = summary["sampler"]
        console.print(f"sampler: {s['samples']} samples, own CPU {s['cpu_s']:.3f} s ({100 * s['cpu_share']:.2f} %)")
    for what, why in summary.get("skipped", {}).items():
        console.print(f"skipped {what}: {why}")
    console.print(f"capture written to {capture_dir}")


@cli.command()
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--out", "capture_dir", required=True, type=click.Path(file_okay=False), help="capture directory.")
@click.option("--node", help="node name in the tables (default: $MWINV_NODE or the host name).")
@click.option("--procs", type=click.Path(exists=True, dir_okay=False), help="procs.json written by the recorder.")
@group_option
def parse(trace, capture_dir, node, procs) -> None:
    """Parse TRACE (trace.dat version 6, or text: raw ftrace / trace-cmd report) into the
    kernel_event, kernel_stack and process tables of a capture directory.

    \b
    Examples:
      mwinv-trace parse trace.dat --out out/run1 --node db1
      mwinv-trace parse lisa_trace.txt --out out/lisa
    """
    from mwinv.capture.tables import Capture
    from mwinv.engines.postgresql.kernel import POSTGRESQL
    from mwinv.kernel_trace.parse import parse_trace

    console = progress_console()
    cap = Capture(capture_dir)
    if not cap.manifest_path.exists():
        cap.create()
    t0 = time.monotonic()
    with status_line(console, "parsing") as status:
        # a procs.json is the PostgreSQL recorder's: its processes' roles are PostgreSQL's
        res = parse_trace(trace, cap, node=node, procs_file=procs, role=POSTGRESQL.role,
                          progress=lambda n: status(f"parsing: {n:,} events"))
    dt = time.monotonic() - t0
    console.print(f"{res.events:,} events ({res.events / dt / 1e6:.2f} M/s), {res.stacks} stacks, "
                  f"{res.processes} processes, {res.lost_events} lost, clock {res.clock} -> {capture_dir}")
    if res.fault:
        raise MwinvError(f"{res.fault} (the {res.events:,} events before it are in {capture_dir})")


@cli.command()
def check() -> None:
    """Print what this kernel allows for tracing, as JSON.

    \b
    Example:
      mwinv-trace check
    """
    from mwinv.kernel_trace.recorder import default_events, start_function_tracer
    from mwinv.kernel_trace.tracefs import Instance, tracefs_root
    from mwinv.kernel_trace.perf import perf_available

    root = tracefs_root()
    inst = Instance.create(root)
    try:
        events = {ev: inst.has_event(ev) for ev in default_events(page_faults=True)}
        ft = start_function_tracer(inst, [os.getpid()])   # as a capture's recorder tries it
        if ft["ran"]:
            inst.write("current_tracer", "nop")
        tracer = "function" if ft["ran"] else f"none ({ft['why_not']})"
    finally:
        inst.remove()
    click.echo(json.dumps({"tracefs": str(root), "function_tracer": tracer, "perf": perf_available(),
                           "events_missing": [e for e, ok in events.items() if not ok],
                           "events_available": sum(events.values())}, indent=2))


@cli.command()
def clean() -> None:
    """Remove trace instances (mwinv-<pid>-*) and uprobes (group mwinv_<pid>) of dead mwinv runs.

    \b
    Example:
      mwinv-trace clean
    """
    from mwinv.kernel_trace.tracefs import clean_stale

    removed = clean_stale()
    click.echo("\n".join(removed) if removed else "nothing to clean")


def main() -> None:
    run_main(cli, "mwinv-trace")
