"""`mwinv experiment`: run a plan of factors and levels on clusters, and report what the results show."""

from __future__ import annotations

import click

from mwinv.cli.common import group_option, progress_console, progress_logger
from mwinv.errors import MwinvError
from mwinv.options import memory_bytes


@click.group("experiment")
def experiment_cli() -> None:
    """Experiments over clusters: node counts, partitioning schemes and resource factors.

    \b
    Examples:
      mwinv experiment run examples/plans/nodes-and-schemes.toml -o out/exp1
      mwinv experiment report out/exp1
    """


@experiment_cli.command("run")
@click.argument("plan", type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out", required=True, type=click.Path(file_okay=False),
              help="the experiment's directory: results, a capture per cell, the report.")
@click.option("--drop-captures", is_flag=True, help="keep only the results of each cell, not its capture.")
@click.option("--memory", default=None, metavar="SIZE",
              help="DuckDB's memory limit for each cell's correlation, e.g. 4GB (default: mwinv-correlate's).")
@group_option
def run_cmd(plan, out, drop_captures, memory) -> None:
    """Run every cell of PLAN (a TOML file: factors and levels, queries, repetitions; see
    examples/plans/) on a fresh cluster each, under a capture of every node; write one results row per
    query and run, then the report. Cells already done are skipped: an interrupted run resumes.

    \b
    Examples:
      mwinv experiment run examples/plans/nodes-and-schemes.toml -o out/exp1
      mwinv experiment run examples/plans/memory-sweep.toml -o out/mem --drop-captures
      mwinv experiment run examples/plans/kernel-settings.toml -o out/kern   # restored after each cell
      mwinv experiment run examples/plans/memory-sweep.toml -o out/mem --group dba   # dba may read it
      mwinv experiment run examples/plans/nodes-and-schemes-sf1.toml -o out/sf1 --memory 4GB
    """
    import duckdb

    from mwinv.experiment.plan import load_plan
    from mwinv.experiment.report import render
    from mwinv.experiment.runner import run_plan
    from mwinv.ntier import plan as ntier_plan

    if memory is not None:
        memory_bytes(memory, "--memory")
    err = progress_console()
    if ntier_plan.is_ntier_plan(plan):   # replicas, clients and pgpool's policy as factors (docs/ntier.md)
        from mwinv.cli.ntier import print_plan

        print_plan(ntier_plan.run(plan, out, progress_logger(err)), out)
        return
    p = load_plan(plan)
    err.print(f"plan {p.name}: {len(p.cells())} cells x {len(p.queries)} queries x {p.repetitions} "
              f"repetitions, SF {p.scale:g}", highlight=False)
    try:
        summary = run_plan(p, out, progress=progress_logger(err), keep_captures=not drop_captures, memory=memory)
    except duckdb.OutOfMemoryException as exc:   # the cells done are kept: a run resumes at this one
        raise MwinvError(f"{str(exc).splitlines()[0]} correlating a cell (raise DuckDB's limit with --memory, e.g. "
                         "--memory 4GB; a rerun resumes at this cell)") from None
    err.print(f"{summary['ran']} cells run, {summary['skipped']} already done", highlight=False)
    for f in summary["failed"]:
        err.print(f"[yellow]cell failed:[/] {f}")
    html, md = render(out)
    err.print(f"report: {html} (and {md})", highlight=False)


@experiment_cli.command("report")
@click.argument("out", type=click.Path(file_okay=False))
@group_option
def report_cmd(out) -> None:
    """Write the report of an experiment directory again (report.md, report.html with charts,
    results.csv, summary.json in OUT/report).

    \b
    Example:
      mwinv experiment report out/exp1
    """
    from pathlib import Path

    from mwinv.experiment.report import render
    from mwinv.ntier import plan as ntier_plan

    if (Path(out) / ntier_plan.MARKER).exists():
        from mwinv.cli.ntier import print_plan

        print_plan(ntier_plan.rebuild(out), out)
        return
    html, md = render(out)
    click.echo(f"report: {html} (and {md})")


def _node_counts(ctx, param, value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(v) for v in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"{value!r}: node counts, comma-separated (e.g. 2,4)") from None


@experiment_cli.command("whatif")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--scheme", required=True, metavar="SCHEME",
              help="a scheme file (examples/schemes/) or a built-in scheme's name.")
@click.option("--nodes", default=None, callback=_node_counts, metavar="N[,N...]",
              help="the data node counts to predict (default: the run's).")
@click.option("--json", "json_out", default=None, type=click.Path(dir_okay=False),
              help="also write every prediction, per query and source cell, as JSON.")
@click.option("--html", "html_out", default=None, type=click.Path(dir_okay=False),
              help="also write the report as HTML, with a chart per node count.")
@group_option
def whatif_cmd(out, scheme, nodes, json_out, html_out) -> None:
    """Predict SCHEME, on the run's node counts or others, from an experiment's cells, before loading
    anything: every query from every cell that can predict it (the model the report checks against the
    runs), the fastest scheme run there to compare with, and the model's record on this run.

    \b
    Examples:
      mwinv experiment whatif out/exp1 --scheme examples/schemes/partsupp-too.toml
      mwinv experiment whatif out/sf1 --scheme examples/schemes/partsupp-too.toml --nodes 4,8
      mwinv experiment whatif out/sf1 --scheme 2-part --nodes 8 --json /tmp/2part-8.json
      mwinv experiment whatif out/exp1 --scheme my-scheme.toml --html /tmp/whatif.html
    """
    import json

    from mwinv import privfile
    from mwinv.cluster.distribute import resolve_scheme
    from mwinv.experiment.whatif import render, whatif

    resolve_scheme(scheme)   # a wrong scheme is its one-line error, before the fit
    # the fit tries 4,500 sets of constants on every pair of the run's cells: the whole what-if took 14 s on the
    # 4 cells of the SF 0.1 check in docs/experiments.md
    progress_console().print(f"fitting the model on the cells of {out}, then predicting {scheme}", highlight=False)
    w = whatif(out, scheme, nodes)
    md, html = render(w)
    if json_out:
        privfile.write(json_out, json.dumps(w, indent=1))
    if html_out:
        privfile.write(html_out, html)
    click.echo(md)
