"""`mwinv cluster`: a throw-away distributed PostgreSQL on this host (coordinator + data nodes, each in
its own network namespace and cgroup, TPC-H partitioned over the data nodes with postgres_fdw)."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from mwinv.cli.common import output_console, progress_console, progress_logger
from mwinv.workloads import runner, tpch


@click.group("cluster")
def cluster_cli() -> None:
    """A distributed PostgreSQL on this host: up, run, down, clean.

    \b
    Examples:
      mwinv cluster up --nodes 3 --scale 0.01 --node-cpu 0.5 --link-mbit 100
      mwinv cluster run 3f9a1c --queries 1,3,12 --check
      mwinv cluster down 3f9a1c
      mwinv cluster clean          # what runs killed with -9 left (namespaces, links, cgroups, servers)
      mwinv clean                  # the same
    """


@cluster_cli.command("up")
@click.option("--nodes", default=2, show_default=True, help="data nodes (1-4).")
@click.option("--scale", default=0.01, show_default=True, help="TPC-H scale factor.")
@click.option("--scheme", default="2-part", show_default=True, help="2-part (lineitem and orders by orderkey), "
              "1-part (lineitem only), or a scheme file (docs/cluster.md); the rest is replicated on every node.")
@click.option("--node-cpu", type=float, default=0.5, show_default=True, help="CPUs per data node (cgroup quota).")
@click.option("--node-memory-mb", type=int, default=512, show_default=True, help="memory per data node.")
@click.option("--node-read-mbps", type=float, default=None, help="disk read rate per data node, MB/s.")
@click.option("--link-mbit", type=float, default=None, help="each data node's link rate, each way.")
def up(nodes, scale, scheme, node_cpu, node_memory_mb, node_read_mbps, link_mbit) -> None:
    """Start a cluster, load TPC-H and leave it running; prints its tag.

    \b
    Example:
      mwinv cluster up --nodes 2 --scale 0.01
    """
    from mwinv.cluster.harness import Cluster, NodeCaps
    from mwinv.experiment.plan import check_level

    tpch.check_scale(scale)   # before any server starts: generating the data refused it after
    for option, factor, value in (("--node-cpu", "node_cpu", node_cpu), ("--node-memory-mb", "node_memory_mb",
                                  node_memory_mb), ("--node-read-mbps", "node_read_mbps", node_read_mbps),
                                  ("--link-mbit", "link_mbit", link_mbit)):
        if value is not None:
            check_level(option, factor, value)
    console = progress_console()
    caps = NodeCaps(cpu=node_cpu, memory_mb=node_memory_mb, read_mbps=node_read_mbps, link_mbit=link_mbit)
    cl = Cluster(nodes=nodes, scale=scale, scheme=scheme, node_caps=caps, progress=progress_logger(console)).up()
    cl.detach()
    print(cl.tag)
    console.print(f"cluster {cl.tag}: coordinator {cl.coordinator.conninfo('tpch')}; "
                  f"data nodes {', '.join(f'{n} {cl.address(n)}' for n in cl.data_nodes)}")


@cluster_cli.command("run")
@click.argument("tag")
@click.option("--queries", "query_spec", default="all", show_default=True, help="e.g. 1,3,5-7 or all.")
@click.option("--streams", default=1, show_default=True, help="concurrent query streams.")
@click.option("--check", is_flag=True, help="compare results with the official answers.")
def run(tag, query_spec, streams, check) -> None:
    """Run TPC-H queries on a cluster's coordinator and print their timings.

    \b
    Example:
      mwinv cluster run 3f9a1c --queries 1,3 --check
    """
    from mwinv.cluster.harness import coordinator_of, read_state

    console = output_console()
    scale = read_state(tag).get("scale")
    runs = runner.run_with_progress(coordinator_of(tag), tpch.parse_query_list(query_spec), console=console,
                                    streams=streams, keep_results=check)
    console.print(runner.timing_table(runs, title=f"TPC-H on cluster {tag}"))
    if check:
        bad = [p for r in runs if r.result is not None for p in tpch.compare_result(r.query, scale, r.result)]
        bad += [f"Q{r.query}: {r.error}" for r in runs if r.error]
        for p in bad[:20]:
            console.print(f"[red]{p}")
        if bad:
            raise click.ClickException(f"{len(bad)} differences from the official answers")
        console.print("[green]all results equal the official TPC-H answers")


@cluster_cli.command("down")
@click.argument("tag")
def down_cmd(tag) -> None:
    """Stop a cluster and remove everything it made.

    \b
    Example:
      mwinv cluster down 3f9a1c
    """
    from mwinv.cluster.harness import down

    click.echo("\n".join(down(tag)))


@cluster_cli.command("list")
def list_cmd() -> None:
    """The clusters of this host.

    \b
    Example:
      mwinv cluster list
    """
    from mwinv.cluster.harness import clusters

    table = Table("tag", "kind", "servers", "scale", "scheme", "owner")
    for c in clusters():
        owner = "detached" if c.get("detached") else f"pid {c.get('pid')}"
        # an ntier run (mwinv ntier) is torn down as a cluster is, but has no TPC-H scale or scheme
        table.add_row(c["tag"], c.get("kind", "tpch"), ", ".join(c.get("servers", {})), str(c.get("scale") or "-"),
                      c.get("scheme") or "-", owner)
    Console().print(table)


@cluster_cli.command("clean")
@click.option("--all", "all_clusters", is_flag=True, help="also running and detached clusters.")
def clean_cmd(all_clusters) -> None:
    """Remove what dead runs left: servers whose mwinv process is gone (`mwinv tpch`, a cluster, a
    test killed with -9), clusters' cgroups, links, bridges, namespaces (and, with --all, every
    cluster). Only what mwinv's private directory (/var/lib/mwinv for root) and the tags name. Prints
    each thing removed, and each it cannot remove as "… is left: why".

    \b
    Examples:
      mwinv clean
      mwinv cluster clean --all
    """
    from mwinv.cluster.harness import clean

    removed = clean(all_clusters)
    click.echo("\n".join(removed) if removed else "nothing to clean")
