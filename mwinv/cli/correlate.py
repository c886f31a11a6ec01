"""mwinv-correlate: where each statement's time went, from a capture directory."""

from __future__ import annotations

import os
import resource
import time

import click
from rich.console import Console

from mwinv import privfile
from mwinv.capture.tables import Capture
from mwinv.cli.common import group_option, progress_console, progress_logger, run_main
from mwinv.correlator import terminal
from mwinv.correlator.derive import ADVICE_TABLES, advice_of, derive, node_parts_of
from mwinv.correlator.incremental import cut_ns
from mwinv.correlator.pipeline import RANK_BY, correlate, top_statements
from mwinv.correlator.pipeline import merge as merge_nodes
from mwinv.correlator.timeline import parse_range, timeline
from mwinv.options import CorrelateOptions


@click.command()
@click.argument("capture", type=click.Path(file_okay=False))
@click.option("--top-sql", "top", default=CorrelateOptions.top, show_default=True, help="how many statements to show.")
@click.option("--by", type=click.Choice(list(RANK_BY)), default=CorrelateOptions.by, show_default=True,
              help="rank by total time or by one resource.")
@click.option("--query-id", type=int, default=None, help="drill into one statement (its query id).")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default=None,
              help="also write report.html (self-contained, charts) and report.md into this directory.")
@click.option("--baseline", type=click.Path(exists=True, file_okay=False), default=None,
              help="a second capture to compare with (differential report; needs --report).")
@click.option("--node", default=None, help="correlate this node's tables only (as it could on that node).")
@click.option("--merge", is_flag=True, help="the cluster view from every node's own correlation (--node).")
@click.option("--timeline", "timeline_file", type=click.Path(dir_okay=False), default=None,
              help="also write the statements, their components, remote-statement flows and node samples as a "
                   "Trace Event JSON file (Perfetto UI, chrome://tracing).")
@click.option("--timeline-top", type=click.IntRange(min=1), default=500, show_default=True,
              help="the timeline's longest top-level statements (and the remote statements linked to them).")
@click.option("--timeline-range", default=None, metavar="FROM:TO",
              help="the timeline's statements in this window, seconds from the first statement (e.g. 10:20, 30:).")
@click.option("--memory", default=None, metavar="SIZE",
              help="DuckDB's memory limit, e.g. 2GB (default: half the machine's available memory, at most "
                   "768 MiB); beyond it DuckDB spills into the capture's directory.")
@click.option("--until", "until_s", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="correlate up to SECONDS after the first statement, keeping what the rest needs: a later run "
                   "goes on from there and appends its tables (a capture still recorded, or rotated).")
@click.option("--profile", is_flag=True,
              help="then print (to stderr) each step's time, the statements per second and the peak memory.")
@group_option
def cli(capture, top, by, query_id, fmt, report_dir, baseline, node, merge, timeline_file, timeline_top,
        timeline_range, memory, until_s, profile) -> None:
    """Attribute every statement's wall time in CAPTURE to CPU (user/sys), disk (sequential/random),
    network, lock waits, run queue, other waits and not-allocated time; show the top statements with
    their breakdown, hot kernel functions and what to change (advice with the model's expected gain).
    Writes statement_attribution, statement_kernel_function and statement_advice into CAPTURE (with
    --report also statement_class, statement_estimate and prediction).

    \b
    Examples:
      mwinv-correlate out/demo/capture --top-sql 5
      mwinv-correlate CAPTURE --by disk --top-sql 10
      mwinv-correlate CAPTURE --query-id -4224445212121 --format json
      mwinv-correlate CAPTURE --format csv > top.csv
      mwinv-correlate CAPTURE --report out/report
      mwinv-correlate CAPTURE --report out/report --group dba   # the report readable by group dba
      mwinv-correlate after/ --report out/diff --baseline before/
      for n in coord d1 d2; do mwinv-correlate CLUSTER --node $n; done   # each node on its own
      mwinv-correlate CLUSTER --merge --top-sql 5                         # then the cluster view
      mwinv-correlate CAPTURE --timeline out/timeline.json --timeline-range 10:20   # open it in Perfetto UI
      mwinv-correlate LONG_CAPTURE --memory 4GB   # more room for DuckDB before it spills
      mwinv-correlate LONG_CAPTURE --until 3600   # the first hour; run again later to go on from there
      mwinv-correlate LONG_CAPTURE --top-sql 5 --profile   # which steps took the time
    """
    if baseline and not report_dir:
        raise click.UsageError("--baseline needs --report DIR")
    if until_s is not None and merge:
        raise click.UsageError("--until correlates a whole capture in parts, not the merge of its nodes")
    options = CorrelateOptions(node=node, merge=merge, top=top, by=by, query_id=query_id, memory=memory)
    options.check(Capture(capture).manifest())
    if report_dir:
        privfile.make_dir(report_dir)   # a place it may go: said before the work, not after
    span = parse_range(timeline_range)
    t0 = time.monotonic()
    err = progress_console()
    progress = progress_logger(err) if fmt == "table" else None
    # a capture shared with this user's group is read-only to them: correlated in this session alone
    write = os.access(capture, os.W_OK)
    if not write:
        err.print(f"{capture}: read-only for this user: correlated in this session, nothing written into it",
                  highlight=False, markup=False)
    db = merge_nodes(capture, progress=progress, memory=options.memory, write=write) if merge else \
        correlate(capture, write=write, progress=progress, node=options.node, memory=options.memory,
                  until_ns=None if until_s is None else cut_ns(Capture(capture), until_s))
    for w in db.warnings:
        err.print(f"[yellow]warning:[/] {w}")
    rows = top_statements(db, n=options.top, by=options.by, query_id=options.query_id)
    examples = [r.example_id for r in rows]
    # a node's own session is not the capture's: its advice stays in the session
    derive(db, ADVICE_TABLES, advise=examples, progress=progress, write=write and node is None)
    advice = advice_of(db, examples)
    nodes = node_parts_of(db, examples)
    if fmt == "json":
        click.echo(terminal.as_json(rows, advice, nodes))
    elif fmt == "csv":
        click.echo(terminal.as_csv(rows, advice), nl=False)
    else:
        title = f"top {len(rows)} statements by {by} time" if query_id is None else f"query_id {query_id}"
        console = Console()
        console.print(terminal.top_table(rows, title))
        for i, r in enumerate(rows, 1):
            if r.example_id in nodes:
                console.print(terminal.node_table(i, r, nodes[r.example_id]))
        if rows:
            console.print(terminal.advice_text(rows, advice))
    if report_dir:
        from mwinv.correlator.report import load, render_report

        if baseline:
            correlate(baseline).con.close()  # its tables must be as current as the capture's
        # the session mwinv-correlate just built (a node's own is that node's: the report is the capture's)
        data = load(capture, progress=progress_logger(err), db=None if node else db)
        err.log("writing the report")
        html, md = render_report(data, report_dir, baseline_capture=baseline)
        err.print(f"report: {html} (and {md})")
    if timeline_file:
        tl = timeline(db, top=timeline_top, range_s=span)
        privfile.write(timeline_file, tl.json())
        err.print(f"timeline: {timeline_file}: {tl.summary()}", highlight=False, markup=False)
    if profile:
        (statements,) = db.sql("SELECT count(*) FROM statement").fetchone()
        err.print(terminal.profile_table(db.modules.timings, time.monotonic() - t0,
                                         resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, statements))


def main() -> None:
    run_main(cli, "mwinv-correlate", memory_option="--memory")
