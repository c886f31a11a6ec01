"""`mwinv ntier`: read-only scale-out behind pgpool-II on this host (docs/ntier.md)."""

from __future__ import annotations

import click

from mwinv.cli.common import group_option, output_console, progress_console, progress_logger
from mwinv.errors import MwinvError


def _numbers(kind, text: str, option: str) -> list:
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise MwinvError(f"{option} {text!r}: numbers separated by commas") from None


@click.group("ntier")
def ntier_cli() -> None:
    """A PostgreSQL primary, 1-3 streaming replicas and pgpool-II balancing the reads, a bulletin
    board's browse mix run by pgbench at each load level: latency distributions per page and per
    statement, each tier's utilisation, the rare heavy statements.

    \b
    Examples:
      mwinv ntier run --replicas 2 --clients 4,8 --out out/ntier
      mwinv ntier plan examples/plans/ntier-replicas-policy.toml --out out/ntier-plan
      mwinv ntier report out/ntier
    """


@ntier_cli.command("run")
@click.option("--replicas", default="2", show_default=True,
              help="streaming replicas (1-3); several, comma separated: the throughput surface, a run each.")
@click.option("--clients", default="4,8", show_default=True, help="load levels: clients, comma separated.")
@click.option("--policy", type=click.Choice(["session", "statement"]), default="session", show_default=True,
              help="pgpool's load balancing: a replica per session, or per statement.")
@click.option("--weights", default=None, help="pgpool's weight per replica, e.g. 2,1 (default: equal); with "
              "several replica counts, one per replica of the largest, a smaller count taking the first.")
@click.option("--think-ms", default=5.0, show_default=True, help="think time after each page.")
@click.option("--ramp-up", default=2.0, show_default=True, help="seconds over which the clients start.")
@click.option("--run", "run_s", default=6.0, show_default=True, help="seconds measured, all clients running.")
@click.option("--ramp-down", default=1.0, show_default=True, help="seconds over which the clients stop.")
@click.option("--users", default=2_000, show_default=True, help="bulletin board users.")
@click.option("--stories", default=5_000, show_default=True, help="stories.")
@click.option("--comments", default=100_000, show_default=True, help="comments (the heavy search scans them).")
@click.option("--replica-cpu", type=float, default=None, help="CPUs per replica (cgroup quota), e.g. 0.5.")
@click.option("--pool-cpu", type=float, default=None, help="CPUs for pgpool (cgroup quota).")
@click.option("--replica-read-mbps", type=float, default=None,
              help="disk read rate per replica (blkio throttle), MB/s: the disk's capacity in the bottleneck map.")
@click.option("--link-mbit", type=float, default=None,
              help="every tier's link, each way (tbf on its veth), Mbit/s: the link's capacity in the bottleneck map.")
@click.option("--trace/--no-trace", default=False, show_default=True,
              help="kernel-trace every tier too (and measure the time in pgpool per statement).")
@click.option("--max-lag", default=5.0, show_default=True,
              help="seconds a replica may fall behind the primary's WAL before the run ends with an error.")
@click.option("--check-advice", is_flag=True, help="after the run, create the index advised for a rare heavy "
              "statement and time it again.")
@click.option("--out", default="out/ntier", show_default=True, help="where the capture, logs and report go.")
@group_option
def run_cmd(replicas, clients, policy, weights, think_ms, ramp_up, run_s, ramp_down, users, stories, comments,
            replica_cpu, pool_cpu, replica_read_mbps, link_mbit, trace, max_lag, check_advice, out) -> None:
    """Set up the scenario, run every load level under one capture, report, and remove it all (with
    several replica counts: once for each, and the throughput surface over replicas x clients).

    \b
    Examples:
      mwinv ntier run --replicas 2 --clients 4,8
      mwinv ntier run --replicas 3 --clients 2,8,16,32 --replica-cpu 0.5 --run 20 --check-advice
      mwinv ntier run --replicas 2 --policy statement --weights 2,1 --out out/ntier-stmt
      mwinv ntier run --replicas 2 --clients 8 --trace --max-lag 2 --out out/ntier-traced
      mwinv ntier run --replicas 1,2,3 --clients 4,16,32 --replica-cpu 0.25 --out out/ntier-surface
      mwinv ntier run --replicas 2,3 --weights 2,1,1 --clients 8 --out out/ntier-weighted
      mwinv ntier run --replicas 1,2 --clients 8,32 --link-mbit 20 --replica-read-mbps 5 --out out/ntier-caps
    """
    from mwinv.ntier import bboard
    from mwinv.ntier.pgpool import weights_for
    from mwinv.ntier.scenario import NTierConfig, check_clients
    from mwinv.ntier.surface import run_scenario, surface

    levels = check_clients(_numbers(int, clients, "--clients"))
    counts = _numbers(int, replicas, "--replicas")
    given = _numbers(float, weights, "--weights") if weights else None
    configs = {r: NTierConfig(replicas=r, policy=policy, weights=weights_for(given, r) if len(counts) > 1 else given,
                              size=bboard.Size(users, stories, comments), think_ms=think_ms, ramp_up_s=ramp_up,
                              run_s=run_s, ramp_down_s=ramp_down, replica_cpu=replica_cpu, pool_cpu=pool_cpu,
                              replica_read_mbps=replica_read_mbps, link_mbit=link_mbit, trace=trace,
                              max_lag_s=max_lag) for r in counts}   # each checked before anything starts
    if not configs:
        raise MwinvError(f"--replicas {replicas!r}: at least one replica count")
    console = progress_console()
    progress = progress_logger(console)
    if len(configs) > 1:
        surf = surface(configs, levels, out, check_advice, progress)
        output_console().print("\n".join(surf["markdown"]), markup=False, highlight=False, soft_wrap=True)
        console.print(f"surface: {out}/surface.html; each replica count's run and report: {out}/r<n>/")
        return
    _, md, failed = run_scenario(configs[counts[0]], levels, out, check_advice, progress)
    output_console().print("\n".join(md), markup=False, highlight=False, soft_wrap=True)
    console.print(f"report: {out}/report.html; distributions: {out}/distributions.json, .csv")
    if failed:
        raise failed


@ntier_cli.command("plan")
@click.argument("plan", type=click.Path(dir_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="the plan's directory: a run per cell (cell-<id>/), results.md/.html/.json.")
@group_option
def plan_cmd(plan, out) -> None:
    """Run an n-tier plan (kind = "ntier": replicas, policy, weights, caps as factors, clients as each
    cell's load levels); `mwinv experiment run` runs the same plans. Cells done before are analysed
    again, not run: an interrupted plan resumes.

    \b
    Examples:
      mwinv ntier plan examples/plans/ntier-replicas-policy.toml --out out/ntier-plan
      mwinv experiment run examples/plans/ntier-replicas-policy.toml -o out/ntier-plan
    """
    from mwinv.ntier import plan as ntier_plan

    print_plan(ntier_plan.run(plan, out, progress_logger(progress_console())), out)


def print_plan(results: dict, out) -> None:
    output_console().print("\n".join(results["markdown"]), markup=False, highlight=False, soft_wrap=True)
    failed = [f"{label}: {row['error']}" for label, row in results["cells"].items() if row.get("error")]
    for f in failed:
        progress_console().print(f"cell failed: {f}", markup=False, highlight=False)
    progress_console().print(f"results: {out}/results.html; each cell's run and report: {out}/cell-<id>/")


@ntier_cli.command("report")
@click.argument("out", type=click.Path(exists=True, file_okay=False))
@group_option
def report_cmd(out) -> None:
    """Analyse a run's output again (distributions, report; a surface's or a plan's runs and their
    table) without servers: the plans taken during the run are kept, no new ones are taken.

    \b
    Examples:
      mwinv ntier report out/ntier
      mwinv ntier report out/ntier-surface
      mwinv ntier report out/ntier-plan
    """
    from pathlib import Path

    from mwinv.ntier import analyse, plan, report
    from mwinv.ntier.surface import rebuild

    if (Path(out) / plan.MARKER).exists():
        print_plan(plan.rebuild(out), out)
        return
    if (Path(out) / "surface.json").exists():
        md = rebuild(out)["markdown"]
    else:
        md = report.write(out, analyse.analyse(out))
    output_console().print("\n".join(md), markup=False, highlight=False, soft_wrap=True)
