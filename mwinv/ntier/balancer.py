"""The time spent in the balancer, measured: pgpool's kernel trace (`--trace`) holds each child's reads and
writes with their descriptors, and the sessions' links (mwinv/ntier/links.py) name each descriptor's
connection: the client's (client -> pgpool) or a backend's (pgpool -> node, backend pid). On one child
a statement is then

    request received   the exit of the read on the client's socket that starts it
    forwarded          the exit of the first write to the backend that answers it (the most bytes read)
    reply received     the exit of the first read on that backend after the forward
    returned           the exit of the last write to the client before the next request

and pgpool's own time is inbound (received -> forwarded) plus outbound (reply received -> returned,
less any further wait in a read on a backend). The backend execution that served it is the first
statement its backend started after the forward, which must end before the reply came back (the link's
check); its query id keys the distributions. Between the returned reply and the next request of the same
page (under half the think time) is the client's and the network's time.

Checked against an independent source: the children's time on a CPU and waiting for one (schedstat,
the sampler's process_sample) over the same intervals (_cpu_check)."""

from __future__ import annotations

import pyarrow as pa

from mwinv.correlator.load import literal

READS = ("sys_enter_read", "sys_enter_recvfrom", "sys_enter_recvmsg", "sys_enter_readv")
WRITES = ("sys_enter_write", "sys_enter_sendto", "sys_enter_sendmsg", "sys_enter_writev")
SLACK_NS = 50_000   # the extension's statement clock against the trace's (both CLOCK_MONOTONIC): margin


def _sql_list(names: tuple[str, ...]) -> str:
    return ", ".join(map(literal, names))


def _fd_table(record: dict) -> pa.Table:
    """fdmap(clients, pgpool_pid, fd, node, backend_pid): each level's pgpool children's descriptors, the
    client's with node NULL."""
    rows = set()
    for lv in record["levels"]:
        for s in lv.get("sessions", []):
            if s.get("pgpool_fd") is None:   # a run recorded before descriptors were kept
                continue
            rows.add((lv["clients"], s["pgpool_pid"], s["pgpool_fd"], s["node"], s["backend_pid"]))
            if s.get("client_fd") is not None:
                rows.add((lv["clients"], s["pgpool_pid"], s["client_fd"], None, None))
    columns = list(zip(*rows)) or [()] * 5
    types = {"clients": pa.int64(), "pgpool_pid": pa.int32(), "fd": pa.int64(), "node": pa.string(),
             "backend_pid": pa.int32()}
    return pa.table({name: pa.array(list(c), t) for (name, t), c in zip(types.items(), columns)})


def balancer_time(con, record: dict, summaries) -> dict:
    """Per statement through pgpool its inbound, outbound and own time and the backend wait, keyed by the
    linked execution's query id (summaries: analyse._summaries), the links' count and check, the client's
    gaps, and the check against the children's CPU. Needs the views levels, stmt, kernel_event and (for
    the check) psample; empty without pgpool's kernel trace or the descriptors."""
    fdmap = _fd_table(record)
    if not fdmap.num_rows or not con.execute("SELECT count(*) FROM kernel_event WHERE node = 'pgpool' "
                                             "AND starts_with(event, 'sys_')").fetchone()[0]:
        return {}
    con.register("fdmap", fdmap)
    half_think = int(record["config"]["think_ms"] * 1e6 / 2)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE pool_io AS
        WITH sc AS (
            SELECT pid, ts_ns, event, lead(ts_ns) OVER w AS exit_ns, lead(event) OVER w AS exit_event,
                   lead(syscall_ret) OVER w AS ret,
                   TRY_CAST(regexp_extract(fields, '(?:^| )fd=(\\d+)', 1) AS BIGINT) AS fd
            FROM kernel_event
            WHERE node = 'pgpool' AND (event IN ({_sql_list(READS + WRITES)})
                                       OR replace(event, 'sys_exit', 'sys_enter') IN ({_sql_list(READS + WRITES)}))
            WINDOW w AS (PARTITION BY pid ORDER BY ts_ns))
        SELECT l.clients, sc.pid, sc.ts_ns AS enter_ns, sc.exit_ns, sc.ret,
               sc.event IN ({_sql_list(WRITES)}) AS is_write, f.node, f.backend_pid
        FROM sc JOIN fdmap f ON f.pgpool_pid = sc.pid AND f.fd = sc.fd
                JOIN levels l ON l.clients = f.clients AND sc.ts_ns >= l.lo AND sc.ts_ns < l.hi
        WHERE sc.exit_event = replace(sc.event, 'sys_enter', 'sys_exit') AND sc.ret > 0""")
    # a request: the reads on the client's socket in a row; every I/O until the next one is its statement's
    con.execute("""
        CREATE OR REPLACE TEMP TABLE pool_stmt AS
        WITH io AS (
            SELECT *, sum(starts::int) OVER (PARTITION BY clients, pid ORDER BY enter_ns) AS seq FROM (
                SELECT *, node IS NULL AND NOT is_write AND NOT coalesce(lag(node IS NULL AND NOT is_write) OVER
                          (PARTITION BY clients, pid ORDER BY enter_ns), false) AS starts FROM pool_io)),
        served AS (   -- the backend that answered: the most bytes read
            SELECT clients, pid, seq, arg_max(node, b) AS node, arg_max(backend_pid, b) AS backend_pid FROM (
                SELECT clients, pid, seq, node, backend_pid, sum(ret) AS b FROM io
                WHERE node IS NOT NULL AND NOT is_write GROUP BY ALL) GROUP BY ALL),
        marks AS (
            SELECT io.clients, io.pid, io.seq, any_value(s.node) AS node, any_value(s.backend_pid) AS backend_pid,
                   min(io.exit_ns) FILTER (WHERE io.node IS NULL AND NOT io.is_write) AS received,
                   min(io.enter_ns) FILTER (WHERE io.is_write AND io.backend_pid = s.backend_pid) AS fwd_enter,
                   min(io.exit_ns) FILTER (WHERE io.is_write AND io.backend_pid = s.backend_pid) AS forwarded,
                   max(io.exit_ns) FILTER (WHERE io.node IS NULL AND io.is_write) AS returned
            FROM io JOIN served s USING (clients, pid, seq) WHERE io.seq > 0 GROUP BY ALL),
        replies AS (
            SELECT m.clients, m.pid, m.seq, min(io.exit_ns) AS reply
            FROM marks m JOIN io USING (clients, pid, seq)
            WHERE NOT io.is_write AND io.backend_pid = m.backend_pid AND io.enter_ns >= m.forwarded GROUP BY ALL),
        waits AS (   -- reads on a backend after the reply's first: waits for the rest (and their copies)
            SELECT r.clients, r.pid, r.seq, sum(io.exit_ns - io.enter_ns) AS later_wait
            FROM replies r JOIN io USING (clients, pid, seq)
            WHERE NOT io.is_write AND io.node IS NOT NULL AND io.enter_ns >= r.reply GROUP BY ALL)
        SELECT m.*, r.reply, coalesce(w.later_wait, 0) AS later_wait,
               lead(m.received) OVER (PARTITION BY m.clients, m.pid ORDER BY m.seq) - m.returned AS client_gap
        FROM marks m JOIN replies r USING (clients, pid, seq) LEFT JOIN waits w USING (clients, pid, seq)
        WHERE m.received IS NOT NULL AND m.returned IS NOT NULL
          AND m.received <= m.forwarded AND r.reply <= m.returned""")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE pool_link AS
        SELECT p.*, s.key, s.start_ns, s.end_ns,
               s.start_ns >= p.fwd_enter - {SLACK_NS} AND s.end_ns <= p.reply + {SLACK_NS} AS inside,
               p.forwarded - p.received AS inbound, p.returned - p.reply - p.later_wait AS outbound,
               p.reply - p.forwarded AS backend_wait
        FROM pool_stmt p ASOF LEFT JOIN stmt s
             ON s.node = p.node AND s.pid = p.backend_pid AND s.start_ns >= p.fwd_enter - {SLACK_NS}""")
    n, linked, inside = con.execute("SELECT count(*), count(key), count(*) FILTER (WHERE inside) "
                                    "FROM pool_link").fetchone()
    out: dict = {"statements": n, "linked": linked, "inside": inside}
    for part, expr in (("own", "inbound + outbound"), ("inbound", "inbound"), ("outbound", "outbound"),
                       ("backend_wait", "backend_wait")):
        con.execute(f"CREATE OR REPLACE TEMP VIEW pool_part AS SELECT clients, key::varchar AS key, {expr} AS d, "
                    "NULL::bigint AS cpu, NULL::bigint AS rb FROM pool_link WHERE inside")
        table: dict = {}
        for (clients, key), s in summaries(con, "pool_part").items():
            table.setdefault(str(key), {})["all" if clients is None else str(clients)] = s
        out[part] = table
    for part, expr, where in (("own_all", "inbound + outbound", "inside"),
                              ("client_gap", "client_gap", f"client_gap BETWEEN 0 AND {half_think}")):
        con.execute(f"CREATE OR REPLACE TEMP VIEW pool_part AS SELECT clients, '' AS key, {expr} AS d, "
                    f"NULL::bigint AS cpu, NULL::bigint AS rb FROM pool_link WHERE {where}")
        out[part] = {"all" if c is None else str(c): s for (c, _), s in summaries(con, "pool_part").items()}
    out["check"] = _cpu_check(con)
    return out


def _cpu_check(con) -> dict:
    """Per level: pgpool's own time summed over the statements against its children's time on a CPU and
    waiting in a run queue (schedstat) over the sample intervals that cover them. Own time is pgpool
    running or runnable, so it is at most their sum; the CPU's rest went to the reads it blocked in
    (their syscalls and the wake-ups, counted in the backend's and the client's time)."""
    if not con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'psample'").fetchone()[0]:
        return {}
    out = {}
    for clients, own, run, runq, n in con.execute("""
            WITH span AS (
                SELECT l.clients, p.pid, min(p.ts_ns - p.interval_ns) AS lo, max(p.ts_ns) AS hi,
                       sum(p.run_ns) AS run, sum(coalesce(p.runqueue_wait_ns, 0)) AS runq
                FROM psample p JOIN levels l ON p.ts_ns > l.lo AND p.ts_ns <= l.hi
                WHERE p.node = 'pgpool' AND p.pid IN (SELECT pid FROM pool_link) GROUP BY ALL)
            SELECT s.clients, sum(k.own), sum(s.run), sum(s.runq), sum(k.n)
            FROM span s, LATERAL (SELECT sum(inbound + outbound) AS own, count(*) AS n FROM pool_link k
                                  WHERE k.inside AND k.clients = s.clients AND k.pid = s.pid
                                    AND k.received >= s.lo AND k.returned <= s.hi) k
            GROUP BY s.clients ORDER BY 1""").fetchall():
        out[str(clients)] = {"own_ns": int(own or 0), "run_ns": int(run), "runqueue_ns": int(runq),
                             "statements": int(n or 0), "own_of_run": round((own or 0) / run, 3) if run else None}
    return out
