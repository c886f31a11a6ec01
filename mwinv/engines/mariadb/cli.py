"""`mwinv mariadb`: capture a running MariaDB / MySQL server, or read what one already wrote."""

from __future__ import annotations

from pathlib import Path

import click

from mwinv.cli.common import group_option, progress_console


@click.group("mariadb")
def mariadb_cli() -> None:
    """MariaDB / MySQL: capture a running server's statements and kernel side, or read what a server
    already wrote (its slow query log).

    \b
    Examples:
      mwinv mariadb capture out/db --duration 60
      mwinv mariadb slowlog /var/log/mysql/mariadb-slow.log -o out/slow
      mwinv-correlate out/slow --top-sql 10
    """


@mariadb_cli.command("capture")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--socket", "socket_path", default=None, help="the server's Unix socket (default: the option file's, "
              "$MYSQL_UNIX_PORT, /run/mysqld/mysqld.sock).")
@click.option("--host", default=None, help="connect by TCP to this host (the server must run on this host).")
@click.option("--port", type=int, default=None, help="TCP port (default 3306).")
@click.option("--user", default=None, help="user (default: the option file's, else root).")
@click.option("--defaults-file", type=click.Path(dir_okay=False), default=None,
              help="option file with [client] user/password/host/port/socket (default: ~/.my.cnf where it exists); "
                   "the password is also read from $MYSQL_PWD, never from the command line.")
@click.option("--pid", type=int, default=None, help="the server's pid, where it cannot be found from the connection.")
@click.option("--duration", type=float, default=None, help="stop after this many seconds (default: Ctrl-C).")
@click.option("--node", default=None, help="node name in the tables (default: this host's name).")
@click.option("--stacks", is_flag=True, help="also sample kernel stacks of the server's threads.")
@click.option("--prepared-texts", is_flag=True,
              help="switch the general query log on (its table) for the capture, restored after it, for the text of "
                   "each execution of a server-side prepared statement; writes a row per statement; needs SUPER.")
@group_option
def capture_cmd(out, socket_path, host, port, user, defaults_file, pid, duration, node, stacks,
                prepared_texts) -> None:
    """Capture a running MariaDB or MySQL server on this host: its statements from performance_schema
    (each on the OS thread that ran it) and the kernel's events of all its threads, until --duration or
    Ctrl-C; then `mwinv-correlate OUT`. Runs as root (kernel tracing). Checks first, in one line, what
    it needs: performance_schema ON, SELECT on performance_schema, UPDATE on its setup_consumers and
    setup_instruments (the statement consumers are switched on for the capture and restored after it),
    and PROCESS. Executions of server-side prepared statements carry no text in performance_schema:
    --prepared-texts takes each one's from the general query log; without it, how many there were and
    the texts their connections prepared are said (docs/mariadb.md).

    \b
    Examples:
      mwinv mariadb capture out/db --duration 60
      mwinv mariadb capture out/db --socket /run/mysqld/mysqld.sock --defaults-file /root/perf.cnf
      MYSQL_PWD=... mwinv mariadb capture out/db --host 127.0.0.1 --port 3307 --user perf --duration 30
      mwinv mariadb capture out/sysbench --prepared-texts --duration 60   # sysbench's prepared statements
    """
    import socket as socket_mod

    from mwinv.engines.mariadb.capture import MariaDBCapture
    from mwinv.engines.mariadb.live import LiveServer, check_privileges
    from mwinv.node_capture import wait_for_end

    err = progress_console()
    server = LiveServer(socket=socket_path, host=host, port=port, user=user, defaults_file=defaults_file,
                        given_pid=pid)
    for note in check_privileges(server, general_log=prepared_texts):
        err.print(note, highlight=False)
    err.print(f"{server.where}: server pid {server.pid()}; capturing "
              + (f"for {duration:g} s" if duration else "until Ctrl-C"), highlight=False)
    cap = MariaDBCapture(server, out, node=node or socket_mod.gethostname(), stacks=stacks,
                         progress=lambda s: err.print(s, highlight=False), general_log=prepared_texts).start()
    try:
        wait_for_end(duration)
    finally:
        summary = cap.stop()
    st = summary.get("statements", {})
    err.print(f"{out}: {st.get('statements', 0):,} statements kept, {st.get('statements_overwritten', 0):,} "
              f"overwritten before a drain (counted); CPU not split into user and system (MariaDB keeps no "
              f"per-statement rusage: all of it shows as user); next: mwinv-correlate {out}", highlight=False)
    if st.get("prepared_recovered"):
        err.print(f"{st['prepared_recovered']:,} executions of server-side prepared statements with their text "
                  "(the general log's)", highlight=False)
    if st.get("prepared_note"):
        err.print(st["prepared_note"], highlight=False)


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
