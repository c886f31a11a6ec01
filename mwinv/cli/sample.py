"""mwinv-sample: sample per-node CPU, disk and network counters and per-DBMS-pid CPU, I/O and
run-queue wait from /proc into a capture directory (node_sample, process_sample), every second or
down to 10 ms. Prints its own CPU use at the end.

\b
Examples:
  mwinv-sample out/run1 --pid 4242 --duration 60
  mwinv-sample out/run1 --data-dir /srv/pg15 --interval 0.1 -- pgbench -T 20 bench
  mwinv-sample out/node-only --duration 10          (node counters only, no pids)
"""

from __future__ import annotations

import sys

import click

from mwinv.cli.common import group_option, progress_console, run_main, status_line
from mwinv.errors import MwinvError


@click.command(help=__doc__)
@click.argument("capture_dir", type=click.Path(file_okay=False))
@click.option("--pid", "postmaster_pid", type=int, help="postmaster pid (its children are sampled too).")
@click.option("--data-dir", type=click.Path(exists=True, file_okay=False), help="PostgreSQL data directory.")
@click.option("--conninfo", help="libpq conninfo of the server.")
@click.option("--interval", "interval_s", default=1.0, show_default=True, help="seconds between samples (>= 0.01).")
@click.option("--duration", type=float, help="stop after this many seconds.")
@click.option("--node", help="node name in the tables (default: $MWINV_NODE or the host name).")
@group_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def cli(capture_dir, postmaster_pid, data_dir, conninfo, interval_s, duration, node, command) -> None:
    from mwinv.engines.postgresql.capture import postmaster_of
    from mwinv.node_capture import wait_for_end
    from mwinv.capture.tables import Capture, node_name
    from mwinv.kernel_trace.recorder import descendants
    from mwinv.kernel_trace.sampler import MIN_INTERVAL_S, Sampler
    from mwinv.kernel_trace.tracefs import pid_alive

    if interval_s < MIN_INTERVAL_S:
        raise MwinvError(f"--interval {interval_s}: must be >= {MIN_INTERVAL_S} s")
    if postmaster_pid is None and (data_dir or conninfo):
        postmaster_pid = postmaster_of(data_dir=data_dir, conninfo=conninfo)
    if postmaster_pid is not None and not pid_alive(postmaster_pid):
        raise MwinvError(f"pid {postmaster_pid}: no such process")
    node = node or node_name()
    cap = Capture(capture_dir).create()
    cap.update_manifest(nodes={node: {"clock": "mono", "sample_interval_s": interval_s}})
    pids = (lambda: descendants(postmaster_pid)) if postmaster_pid else None
    console = progress_console()
    sampler = Sampler(cap, node, pids, interval_s).start()
    rc = None
    try:
        with status_line(console, f"sampling every {interval_s:g} s"):
            rc, _ = wait_for_end(duration, list(command) or None)
    finally:
        stats = sampler.stop()
        console.print(f"{stats.samples} samples in {stats.wall_s:.1f} s -> {capture_dir}; own CPU "
                      f"{stats.cpu_s:.3f} s ({100 * stats.cpu_share:.3f} % of one core)")
    if rc:
        sys.exit(rc)   # the command's status (click's Exit is swallowed in non-standalone mode)


def main() -> None:
    run_main(cli, "mwinv-sample")
