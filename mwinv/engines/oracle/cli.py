"""`mwinv oracle`: Oracle extended SQL traces (event 10046) into a capture, and the profiles Oracle
DBAs read from them."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from mwinv.cli.common import group_option, progress_console
from mwinv.errors import MwinvError
from mwinv.fmt import duration, ms


@click.group("oracle", help=__doc__)
def oracle_cli() -> None:
    pass


def _console() -> Console:
    """Wide enough for the tables when piped (rich assumes 80 columns there)."""
    c = Console()
    return c if c.is_terminal else Console(width=200)


@oracle_cli.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out", required=True, type=click.Path(file_okay=False),
              help="capture directory to write (created; several imports may add to one).")
@click.option("--node", default=None, help="node name (default: the host in each file's header).")
@click.option("--pid", type=int, default=None, help="the server process's OS pid, where the header lacks it.")
@click.option("--clock-offset", type=float, default=0.0, show_default=True,
              help="seconds the database host's wall clock was ahead of the capture host's.")
@click.option("--lenient", is_flag=True, help="exit 0 even when lines were malformed or a file was truncated.")
@group_option
def import_cmd(files, out, node, pid, clock_offset, lenient) -> None:
    """Read 10046 trace files (sessions, RAC instances) into one capture: one statement per execution,
    the trace's calls, waits and plans; then `mwinv-correlate OUT` attributes them and `mwinv oracle
    profile OUT` profiles them. Malformed and truncated lines are skipped, everything else is kept,
    and the exit is non-zero with the first such line named (unless --lenient). Into a kernel capture
    of the host (--node naming that capture's node) the statements are placed on the kernel trace's
    clock and attributed from its events, and `mwinv oracle unaccounted OUT` splits Oracle's
    unaccounted-for time by what the kernel saw (docs/oracle.md).

    \b
    Examples:
      mwinv oracle import orcl_ora_9854.trc -o out/ora
      mwinv oracle import trace/*_ora_*.trc -o out/rac --node db1
      mwinv oracle import orcl_ora_9854.trc -o out/host --node dbhost --clock-offset 0.25
    """
    from mwinv.engines.oracle.importer import import_files

    err = progress_console()
    done = import_files(out, [Path(f) for f in files], node=node, pid=pid, clock_offset_s=clock_offset,
                        progress=lambda s: err.print(s, highlight=False))
    problems = [p for d in done for p in d.problems]
    for d in done:
        other = f", {d.other_lines} other lines skipped (no 10046 record)" if d.other_lines else ""
        err.print(f"{d.path}: node {d.node}, pid {d.pid}: {d.statements} executions, {d.waits} waits{other}",
                  highlight=False)
    for p in problems[1:6]:
        err.print(f"warning: {p}", highlight=False)
    if problems and not lenient:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise MwinvError(f"{problems[0]}{more}; the rest was imported into {out}")


@oracle_cli.command("profile")
@click.argument("capture", type=click.Path(file_okay=False))
@click.option("--group", default="name", show_default=True,
              help="SQL expression to group by: name, kind, call, file, statement_id, query_id, text, obj, ...")
@click.option("--where", default=None, help="SQL condition on the items, e.g. \"dur_ns > 1e6\" or \"kind = 'wait'\".")
@click.option("--skew", is_flag=True, help="add each group's histogram of durations.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--rtt", "rtt_ms", type=float, default=None, metavar="MS",
              help="the client's network round trip (e.g. from ping): splits SQL*Net message from client into "
                   "the round trip and the client's think time; without it, the round trip the host's kernel "
                   "measured on each session's connection, where a kernel capture of the host has one.")
def profile_cmd(capture, group, where, skew, fmt, rtt_ms) -> None:
    """Response-time profile of the traced sessions: every microsecond once (the CPU of top-level calls,
    every wait, unaccounted-for time within and between calls, possibly negative), grouped and
    filtered by SQL expressions over the items (columns: node, pid, file, line, statement_id,
    query_id, text, kind, name, call, dep, dur_ns, obj).

    \b
    Examples:
      mwinv oracle profile out/ora
      mwinv oracle profile out/ora --group file
      mwinv oracle profile out/ora --where "name = 'db file sequential read'" --group obj --skew
      mwinv oracle profile out/ora --group "query_id || ' ' || left(text, 40)" --format json
      mwinv oracle profile out/ora --rtt 0.4
    """
    from mwinv.engines.oracle import profile as prof

    db = prof.open_oracle(capture, rtt_ms)
    rows, total = prof.profile(db, group=group, where=where)
    rtts = db.sql("SELECT node, pid, rtt_ns, source FROM client_rtt WHERE rtt_ns IS NOT NULL ORDER BY ALL").fetchall()
    if fmt == "json":
        click.echo(json.dumps({"total_ns": total, "client_rtt": [
            {"node": n, "pid": p, "rtt_ns": r, "source": src} for n, p, r, src in rtts], "rows": [{
            "group": r.group, "duration_ns": r.duration_ns, "share": r.share, "count": r.count, "mean_ns": r.mean_ns,
            "min_ns": r.min_ns, "max_ns": r.max_ns,
            "histogram": [{"bucket": b, "count": c, "ns": s} for b, (c, s) in zip(prof.BUCKET_LABELS, r.histogram)]}
            for r in rows]}, indent=2))
        return
    t = Table(title=f"response-time profile ({total / 1e9:,.6f} s)")
    for col, just in ((group, "left"), ("duration ms", "right"), ("%", "right"), ("count", "right"),
                      ("mean ms", "right"), ("min ms", "right"), ("max ms", "right")):
        t.add_column(col, justify=just, overflow="fold")
    if skew:
        for label in prof.BUCKET_LABELS:
            t.add_column(label, justify="right")
    for r in rows:
        cells = [r.group, ms(r.duration_ns, 3), f"{100 * r.share:.1f}", f"{r.count:,}", ms(r.mean_ns, 3), ms(r.min_ns, 3),
                 ms(r.max_ns, 3)]
        if skew:
            cells += [str(c) if c else "" for c, _ in r.histogram]
        t.add_row(*cells)
    t.add_row("total", ms(total, 3), "100.0", f"{sum(r.count for r in rows):,}", "", "", "")
    _console().print(t)
    for node, pid, rtt, source in rtts:
        how = "given (--rtt)" if source == "given" else "the least the host's kernel measured on its connection"
        _console().print(f"SQL*Net message from client of {node} pid {pid} split at a round trip of "
                         f"{duration(rtt)}: {how}")


@oracle_cli.command("unaccounted")
@click.argument("capture", type=click.Path(file_okay=False))
@click.option("--top", type=int, default=10, show_default=True, help="statements to show, by wall time.")
def unaccounted_cmd(capture, top) -> None:
    """Oracle's unaccounted-for time split by what the kernel saw the server process do, for statements
    a kernel capture of the host covers (import the trace into that capture, then run mwinv-correlate):
    run queue, CPU that c= missed, block I/O outside any wait event, and the rest.

    \b
    Example:
      mwinv oracle unaccounted out/host
    """
    from mwinv.engines.oracle import profile as prof

    rows = prof.unaccounted_rows(prof.open_oracle(capture), top)
    if not rows:
        raise MwinvError(f"{capture}: no Oracle statement is covered by a kernel trace (import the trace into a "
                         "kernel capture of its host, then run mwinv-correlate)")
    t = Table(title="Oracle's unaccounted-for time, split by the kernel (ms)")
    cols = ("statement_id", "wall_ns", "oracle_cpu_ns", "kernel_cpu_ns", "oracle_wait_ns", "unaccounted_ns",
            "run_queue_ns", "cpu_missed_ns", "io_outside_waits_ns", "rest_ns")
    for c in cols:
        t.add_column(c.removesuffix("_ns"), justify="right")
    for r in rows:
        t.add_row(str(r["statement_id"]), *(ms(r[c], 3) for c in cols[1:]))
    _console().print(t)


@oracle_cli.command("tkprof")
@click.argument("capture", type=click.Path(file_okay=False))
@click.option("--query-id", type=int, default=None, help="one statement (its query id from the table).")
@click.option("--top", type=int, default=10, show_default=True, help="statements to show, by elapsed time.")
@click.option("--rtt", "rtt_ms", type=float, default=None, metavar="MS",
              help="the client's network round trip (e.g. from ping): the fetch what-if's lower bound.")
def tkprof_cmd(capture, query_id, top, rtt_ms) -> None:
    """tkprof's tables — count, cpu, elapsed, disk, query, current, rows per Parse/Execute/Fetch and misses
    in library cache — with statements that differ only in literals under one query id (its SQL IDs
    and plan hash values listed), the waits its elapsed times include, each statement's row source
    operations with the disk waits on their objects, the fetch array size what-if, and the overall
    totals with recursive statements apart.

    \b
    Examples:
      mwinv oracle tkprof out/ora
      mwinv oracle tkprof out/ora --query-id 2744760496109356605
      mwinv oracle tkprof out/ora --rtt 0.4
    """
    from mwinv.engines.oracle import profile as prof

    db = prof.open_oracle(capture, rtt_ms)
    rows = prof.tkprof_rows(db, query_id)
    console = _console()
    order = list(dict.fromkeys(r[0] for r in rows))[:top]
    if query_id is not None and not order:
        raise MwinvError(f"{capture}: no statement with query id {query_id}")
    for qid in order:
        mine = [r for r in rows if r[0] == qid]
        console.rule(f"query id {qid}{' (recursive)' if mine[0][2] else ''}")
        sql_ids, plans = prof.tkprof_ids(db, qid)
        console.print(f"SQL ID: {', '.join(sql_ids) or 'unknown'} Plan Hash: {', '.join(map(str, plans)) or 'unknown'}",
                      highlight=False)
        console.print(mine[0][1][:2000], highlight=False)
        console.print(_call_table(mine))
        for r in mine:
            if r[11]:
                console.print(f"misses in library cache during {r[3].lower()}: {r[11]}", highlight=False)
        _print_waits(console, prof.tkprof_waits(db, qid))
        plan = prof.plan_rows(db, qid)
        if plan:
            t = Table(title="row source operations (disk waits on their object)")
            for col in ("id", "operation", "rows", "cr", "pr", "time ms", "disk waits", "disk wait ms"):
                t.add_column(col, justify="left" if col == "operation" else "right")
            depth = {}
            for pid_, parent, op, obj, cnt, cr, pr, time_ns, n, wait_ns in plan:
                depth[pid_] = depth.get(parent, -1) + 1
                t.add_row(str(pid_), "  " * depth[pid_] + op, f"{cnt:,}", str(cr), str(pr), ms(time_ns, 3),
                          str(n) if n else "", ms(wait_ns, 3) if n else "")
            console.print(t)
        for w in prof.fetch_whatif(db, qid):
            if w.saved_ns:
                at_rtt = (f"; {ms(w.saved_rtt_ns, 3)} ms at the network round trip alone (the rest of a "
                          "trip's wait is the client's own work, which the array does not save)"
                          if w.saved_rtt_ns is not None else "")
                per_byte = (f" + {w.ns_per_byte:.0f} ns per byte; the {w.bytes:,} bytes' {ms(w.byte_ns, 3)} ms stay, "
                            f"{w.bytes // max(w.fetches_after, 1):,} bytes a call"
                            if w.ns_per_byte and w.bytes else "")
                console.print(f"what-if fetch array size {w.array_size}: {w.fetches} → {w.fetches_after} fetch calls "
                              f"for {w.rows} rows in {w.executions} executions, up to {ms(w.saved_ns, 3)} ms of "
                              f"client round trips saved (at their base {ms(w.base_ns, 3)} ms per trip{per_byte}; "
                              f"{ms(w.trip_wait_ns, 3)} ms per trip measured){at_rtt}", highlight=False)
    for recursive in (False, True):
        mine = [(None, None, r[0], *r[1:]) for r in prof.overall(db) if r[0] == recursive]
        if mine:
            console.rule(f"OVERALL TOTALS FOR ALL {'RECURSIVE' if recursive else 'NON-RECURSIVE'} STATEMENTS")
            console.print(_call_table(mine))
            _print_waits(console, prof.tkprof_waits(db, recursive=recursive))


def _print_waits(console: Console, waits: list[tuple]) -> None:
    """tkprof's wait table, in seconds as tkprof prints it."""
    if not waits:
        return
    t = Table(title="Elapsed times include waiting on following events:", title_justify="left")
    for col in ("Event waited on", "Times Waited", "Max. Wait s", "Total Waited s"):
        t.add_column(col, justify="left" if col.startswith("Event") else "right")
    for event, n, longest, total in waits:
        t.add_row(event, f"{n:,}", f"{longest / 1e9:.6f}", f"{total / 1e9:.6f}")
    console.print(t)


def _call_table(rows) -> Table:
    t = Table()
    for col in ("call", "count", "cpu s", "elapsed s", "disk", "query", "current", "rows"):
        t.add_column(col, justify="left" if col == "call" else "right")
    tot = [0] * 7
    for r in rows:
        vals = (r[4], r[5], r[6], r[7], r[8], r[9], r[10])
        tot = [a + (b or 0) for a, b in zip(tot, vals)]
        t.add_row(r[3], f"{vals[0]:,}", f"{vals[1] / 1e9:.6f}", f"{vals[2] / 1e9:.6f}", *(f"{v:,}" for v in vals[3:]))
    t.add_row("total", f"{tot[0]:,}", f"{tot[1] / 1e9:.6f}", f"{tot[2] / 1e9:.6f}", *(f"{v:,}" for v in tot[3:]))
    return t


@oracle_cli.command("trace")
@click.option("--dsn", required=True, help="Oracle connect string, e.g. dbhost:1521/orclpdb1.")
@click.option("--user", required=True, help="a user allowed to run DBMS_MONITOR and read V$ views.")
@click.option("--sid", type=int, default=None, help="the session to trace (with --serial); default: a module's sessions, "
              "or with neither, the hook's own session.")
@click.option("--serial", type=int, default=None)
@click.option("--service", default=None, help="trace every session of this service and --module.")
@click.option("--module", default=None)
@click.option("--seconds", type=float, default=None, help="trace this long (default: until Ctrl-C).")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False), default=None,
              help="where to write the session's trace file, fetched from the server.")
@group_option
def trace_cmd(dsn, user, sid, serial, service, module, seconds, out) -> None:
    """Switch the extended SQL trace (waits and binds) on for a session or a service/module, wait, switch
    it off again (also on Ctrl-C and SIGTERM), and fetch the session's trace file from the server
    (V$DIAG_TRACE_FILE_CONTENTS), ready for `mwinv oracle import`. The password is read from
    ORACLE_PASSWORD. UNVERIFIED against a live server (none runs where mwinv is tested): the
    statements follow Oracle's documentation; see docs/oracle.md.

    \b
    Examples:
      ORACLE_PASSWORD=... mwinv oracle trace --dsn db1:1521/app --user perf --sid 123 --serial 4567 --seconds 60 -o s123.trc
      ORACLE_PASSWORD=... mwinv oracle trace --dsn db1:1521/app --user perf --service app --module billing --seconds 300
    """
    import os
    import time

    from mwinv.engines.oracle import session as hook

    if (sid is None) != (serial is None):
        raise MwinvError("--sid and --serial go together")
    if (service is None) != (module is None):
        raise MwinvError("--service and --module go together")
    password = os.environ.get("ORACLE_PASSWORD")
    if password is None:
        raise MwinvError("set ORACLE_PASSWORD (the password is never taken on the command line)")
    err = progress_console()
    conn = hook.connect(dsn, user, password)
    ctx = hook.traced_module(conn, service, module) if service else hook.traced_session(conn, sid, serial)
    with ctx as traced:
        err.print(f"tracing {'module ' + module if service else f'session {traced.sid},{traced.serial}'}"
                  + (f" (server pid {traced.spid}, {traced.trace_file})" if traced.spid else ""), highlight=False)
        try:
            time.sleep(seconds) if seconds else time.sleep(1e9)
        except KeyboardInterrupt:
            err.print("stopping the trace", highlight=False)
    if out and traced.trace_file:
        err.print(f"trace file: {hook.fetch_trace(conn, traced.trace_file, out)}", highlight=False)
