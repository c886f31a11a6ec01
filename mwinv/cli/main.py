"""`mwinv`: the umbrella command (demo, TPC-H workload). The per-job tools are mwinv-trace,
mwinv-sample and mwinv-correlate."""

from __future__ import annotations

from pathlib import Path

import click

from mwinv import privfile
from mwinv.cli.cluster import clean_cmd, cluster_cli
from mwinv.cli.common import group_option, output_console, progress_logger, run_main
from mwinv.cli.experiment import experiment_cli
from mwinv.cli.ntier import ntier_cli
from mwinv.engines import registry
from mwinv.workloads import runner, tpch
from mwinv.workloads.setup import tpch_server


class EngineGroup(click.Group):
    """mwinv's own commands and each registered engine's under its name (`mwinv oracle`, `mwinv mariadb`;
    mwinv/engines/registry.py), looked up when asked for: a broken engine is a one-line error then."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *(n for n, e in registry.engines().items() if e.cli)})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        engine = registry.engines().get(name)
        if name in self.commands or engine is None or engine.cli is None:
            return super().get_command(ctx, name)
        return engine.load("cli")


@click.group(cls=EngineGroup, help=__doc__)
def cli() -> None:
    pass


def _demo_engine(ctx: click.Context, param: click.Parameter, name: str) -> str:
    have = sorted(n for n, e in registry.engines().items() if e.demo)
    if name not in have:
        raise click.BadParameter(f"{name!r} is no engine with a demo; those with one: {', '.join(have)}")
    return name


@cli.command("tpch")
@click.option("--scale", default=0.1, show_default=True, help="TPC-H scale factor (> 0).")
@click.option("--queries", "query_spec", default="all", show_default=True, help="e.g. 1,3,5-7 or all.")
@click.option("--streams", default=1, show_default=True, help="concurrent query streams.")
@click.option("--cold", is_flag=True, help="drop the page cache and restart the server before the run.")
@click.option("--memory-mb", type=int, default=None, help="cap the server's memory (cgroup v1), e.g. 256.")
@click.option("--port", type=int, default=None, help="port of the throw-away server (default: a free one).")
@click.option("--check", is_flag=True, help="compare results with the official answers (SF 0.01, 0.1, 1).")
def tpch_cmd(scale, query_spec, streams, cold, memory_mb, port, check) -> None:
    """Start a throw-away PostgreSQL, load TPC-H, run queries and print their timings.

    \b
    Examples:
      mwinv tpch --scale 0.01 --queries 1,6 --check
      mwinv tpch --scale 0.1 --streams 2 --cold --memory-mb 256
    """
    console = output_console()
    numbers = tpch.parse_query_list(query_spec)
    scale = tpch.check_scale(scale)
    server = tpch_server(scale, memory_mb=memory_mb, port=port, progress=progress_logger(console))
    try:
        runs = runner.run_with_progress(server, numbers, console=console, streams=streams, cold=cold,
                                        keep_results=check)
        console.print(runner.timing_table(runs))
        if check:
            bad = [p for r in runs if r.result is not None for p in tpch.compare_result(r.query, scale, r.result)]
            for p in bad[:20]:
                console.print(f"[red]{p}")
            if bad:
                raise click.ClickException(f"{len(bad)} differences from the official answers")
            console.print("[green]all results equal the official TPC-H answers")
    finally:
        server.stop()


@cli.command()
@click.argument("capture", type=click.Path(file_okay=False))
@click.option("--data-dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="a directory on the filesystem that holds the database (default: CAPTURE itself).")
@click.option("--link", "links", multiple=True, metavar="[NETNS:]ADDRESS",
              help="a node link to measure (repeatable); default: loopback 127.0.0.1.")
@group_option
def calibrate(capture, data_dir, links) -> None:
    """Measure the platform factors of the model (disk rate, random access time, CPU speed, link rate and
    latency) and store them in CAPTURE's manifest under "calibration".

    \b
    Examples:
      mwinv calibrate out/demo/capture
      mwinv calibrate out/run1 --data-dir /var/lib/postgresql --link 127.0.0.1 --link n1:10.213.0.2
    """
    from mwinv.calibrate import calibrate as measure, store

    console = output_console()
    target = Path(capture)
    privfile.make_dir(target)
    cal = measure(data_dir or target, list(links) or None, progress=progress_logger(console))
    store(target, cal)
    d = cal["disk"]
    console.print(f"disk {d['disk_rate_bps'] / 2**20:,.0f} MiB/s sequential ({d['seq_request_bytes'] // 1024} KiB "
                  f"requests), access {d['rand_access_s'] * 1e6:.0f} µs random, {d['seq_access_s'] * 1e6:.0f} µs "
                  f"short sequential (off-CPU); CPU speed factor "
                  f"{cal['cpu']['cpu_speed_factor']:.2f}")
    for link, v in cal["links"].items():
        console.print(f"link {link}: {v['rate_bps'] / 2**20:,.0f} MiB/s, latency {v['latency_s'] * 1e6:.0f} µs")
    console.print(f"stored in {target / 'manifest.json'}")


@cli.command()
@click.option("--scale", default=0.1, show_default=True, help="TPC-H scale factor.")
@click.option("--out", default="out/demo", show_default=True, help="where the capture and report go.")
@click.option("--nodes", type=int, default=0, show_default=True,
              help="data nodes of a cluster (1-4; 0: one server).")
@click.option("--dbms", default=registry.DEFAULT, show_default=True, callback=_demo_engine,
              help="the DBMS of the demo: a registered engine with a demo (mariadb, ...).")
@group_option
def demo(scale, out, nodes, dbms) -> None:
    """Set up, load TPC-H, run the 22 queries under a capture, show where the time went and what to
    change, and write a report.

    \b
    Examples:
      mwinv demo --scale 0.1
      mwinv demo --nodes 3 --scale 0.01 --out out/demo-cluster
      mwinv demo --dbms mariadb --scale 0.01 --out out/demo-mariadb
    """
    from mwinv.demo import run

    run(dbms, scale=scale, out=out, nodes=nodes)


cli.add_command(cluster_cli)
cli.add_command(clean_cmd, "clean")
cli.add_command(experiment_cli)
cli.add_command(ntier_cli)


def main() -> None:
    run_main(cli, "mwinv")
