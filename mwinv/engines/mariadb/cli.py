"""`mwinv mariadb`: MariaDB / MySQL sources that need no live server."""

from __future__ import annotations

from pathlib import Path

import click

from mwinv.cli.common import group_option, progress_console


@click.group("mariadb")
def mariadb_cli() -> None:
    """MariaDB / MySQL: read what a server already wrote (its slow query log).

    \b
    Examples:
      mwinv mariadb slowlog /var/log/mysql/mariadb-slow.log -o out/slow
      mwinv-correlate out/slow --top-sql 10
    """


@mariadb_cli.command("slowlog")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out", required=True, type=click.Path(file_okay=False), help="capture directory.")
@click.option("--node", default="mariadb", show_default=True, help="node name in the tables.")
@group_option
def slowlog_cmd(files, out, node) -> None:
    """Read slow query logs (long_query_time=0 for every statement; log_slow_verbosity for more
    counters) into a capture: each entry a statement with its duration, lock time, rows and counters.
    The fallback where performance_schema is off: start times are to the second, and only the lock
    time of a statement's duration is explained (docs/mariadb.md).

    \b
    Examples:
      mwinv mariadb slowlog mariadb-slow.log -o out/slow
      mwinv mariadb slowlog db1-slow.log db2-slow.log -o out/slow --node db
    """
    from mwinv.engines.mariadb.slowlog import read

    err = progress_console()
    for f in files:
        n = read(Path(f), out, node)
        err.print(f"{f}: {n['statements']} statements, {n['texts']} texts", highlight=False)
