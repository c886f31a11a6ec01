"""What Oracle DBAs read from a 10046 trace, from the capture tables: tkprof's table (literals folded
into one query id), a response-time profile that counts every microsecond once with its
unaccounted-for time explicit (by file, statement, call type or wait event, filtered and grouped by
SQL expressions like mrskew's --where/--group), the skew of durations as histograms, the plan
operators behind the disk waits, and the fetch array size what-if."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb

from mwinv.correlator.load import CaptureDB, literal, open_correlated
from mwinv.engines.oracle.executions import fetch_calls
from mwinv.errors import MwinvError

SQL_DIR = Path(__file__).parent / "sql"
# Histogram buckets of durations (upper bounds): 1 µs, 10 µs, ... 10 s, then everything above.
BUCKETS_NS = tuple(10 ** k for k in range(3, 11))
BUCKET_LABELS = ("<1µs", "<10µs", "<100µs", "<1ms", "<10ms", "<100ms", "<1s", "<10s", "≥10s")


def open_oracle(capture_dir: str | Path, rtt_ms: float | None = None) -> CaptureDB:
    """The capture's session with the profiles' tables. SQL*Net message from client is split into the
    network round trip and the client's think time by the round trip of each session's connection
    that the host's kernel measured (a kernel capture of the host holds its tcp_sample), else by rtt_ms
    (e.g. from `ping`), which also overrides the measured one: the trace alone cannot tell them apart."""
    if rtt_ms is not None and rtt_ms < 0:
        raise MwinvError(f"--rtt {rtt_ms:g}: a round trip of 0 ms or more")
    db = open_correlated(capture_dir)
    if not db.has("dbms_call") and not db.has("dbms_wait"):
        raise MwinvError(f"{capture_dir}: no Oracle trace in this capture (import one with `mwinv oracle import`)")
    db.con.execute(f"SET VARIABLE client_rtt_ns = {round(rtt_ms * 1e6) if rtt_ms is not None else 'NULL'}")
    for name in ("client_rtt", "response_item", "tkprof", "tkprof_waits", "plan_waits", "client_trip", "trip_cost",
                 "statement_trip", "fetch_trips"):
        db.con.execute((SQL_DIR / f"{name}.sql").read_text())
    return db


def unaccounted_rows(db: CaptureDB, top: int = 10) -> list[dict]:
    """Oracle's unaccounted-for time split by the kernel's view (sql/unaccounted_split.sql), for the
    longest statements a kernel trace covers; empty without one (or before `mwinv-correlate`)."""
    if not db.has("kernel_event") or not db.has("statement_attribution"):
        return []
    db.con.execute((SQL_DIR / "unaccounted_split.sql").read_text())
    cur = db.sql(f"SELECT * FROM unaccounted_split ORDER BY wall_ns DESC LIMIT {int(top)}")
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


@dataclass
class ProfileRow:
    group: str
    duration_ns: int
    share: float
    count: int
    mean_ns: float
    min_ns: int
    max_ns: int
    histogram: list[tuple[int, int]]   # (count, ns) per bucket of BUCKET_LABELS


def profile(db: CaptureDB, group: str = "name", where: str | None = None) -> tuple[list[ProfileRow], int]:
    """Response-time profile over response_item: rows grouped by the SQL expression `group`, filtered by
    `where`; the total is the sum of every selected item (the files' response time when unfiltered)."""
    cond = f"WHERE {where}" if where else ""
    bucket = "CASE " + " ".join(f"WHEN abs(dur_ns) < {b} THEN {k}" for k, b in enumerate(BUCKETS_NS)) + \
        f" ELSE {len(BUCKETS_NS)} END"
    hist = ", ".join(f"count(*) FILTER (WHERE b = {k}), coalesce(sum(dur_ns) FILTER (WHERE b = {k}), 0)"
                     for k in range(len(BUCKET_LABELS)))
    try:
        rows = db.sql(f"""
            WITH sel AS (SELECT CAST(({group}) AS VARCHAR) AS g, dur_ns, {bucket} AS b FROM response_item {cond})
            SELECT g, sum(dur_ns), count(*), avg(dur_ns), min(dur_ns), max(dur_ns), {hist}
            FROM sel GROUP BY g ORDER BY 2 DESC NULLS LAST""").fetchall()
    except duckdb.Error as exc:
        raise MwinvError(f"--group/--where: {str(exc).splitlines()[0]}") from None
    total = sum(r[1] or 0 for r in rows)
    return [ProfileRow(str(r[0]), int(r[1] or 0), (r[1] or 0) / total if total else 0.0, int(r[2]), float(r[3] or 0),
                       int(r[4] or 0), int(r[5] or 0), [(int(r[6 + 2 * k]), int(r[7 + 2 * k]))
                                                        for k in range(len(BUCKET_LABELS))])
            for r in rows], int(total)


def tkprof_rows(db: CaptureDB, query_id: int | None = None) -> list[tuple]:
    where = f"WHERE query_id = {literal(query_id)}" if query_id is not None else ""
    return db.sql(f"""
        SELECT query_id, text, recursive, call, count, cpu_ns, elapsed_ns, disk, query, current, rows, misses
        FROM tkprof {where}
        ORDER BY sum(elapsed_ns) OVER (PARTITION BY query_id) DESC, query_id,
                 CASE call WHEN 'Parse' THEN 0 WHEN 'Execute' THEN 1 ELSE 2 END""").fetchall()


def overall(db: CaptureDB) -> list[tuple]:
    """tkprof's OVERALL TOTALS, non-recursive and recursive statements apart."""
    return db.sql("""
        SELECT recursive, call, sum(count), sum(cpu_ns), sum(elapsed_ns), sum(disk), sum(query), sum(current),
               sum(rows), sum(misses)
        FROM tkprof GROUP BY recursive, call ORDER BY recursive, CASE call WHEN 'Parse' THEN 0 WHEN 'Execute' THEN 1 ELSE 2 END
        """).fetchall()


def tkprof_ids(db: CaptureDB, query_id: int) -> tuple[list[str], list[int]]:
    """The SQL_IDs and plan hash values of a query id's executions (several where texts differ only in
    literals, or where the plan changed), most executed first."""
    ids = [db.sql(f"""SELECT {col} FROM dbms_call c JOIN statement s ON s.node = c.node AND s.statement_id = c.statement_id
                      WHERE s.query_id = {literal(query_id)} AND {col} IS NOT NULL
                      GROUP BY {col} ORDER BY count(DISTINCT c.statement_id) DESC, {col}""").fetchall()
           for col in ("c.sql_id", "c.plh")]
    return [r[0] for r in ids[0]], [r[0] for r in ids[1]]


def tkprof_waits(db: CaptureDB, query_id: int | None = None, recursive: bool | None = None) -> list[tuple]:
    """(event, waits, max_ns, total_ns) of one query id's executions, or (query_id None) of all statements,
    recursive or not, as tkprof's OVERALL TOTALS list them; the longest total first."""
    cond = [f"query_id = {literal(query_id)}"] if query_id is not None else []
    if recursive is not None:
        cond.append(f"recursive = {bool(recursive)}")
    where = f"WHERE {' AND '.join(cond)}" if cond else ""
    return db.sql(f"""SELECT event, sum(waits), max(max_ns), sum(total_ns) FROM tkprof_waits {where}
                      GROUP BY event ORDER BY 4 DESC, event""").fetchall()


def plan_rows(db: CaptureDB, query_id: int) -> list[tuple]:
    return db.sql(f"""SELECT id, parent_id, operation, obj, cnt, cr, pr, time_ns, disk_waits, disk_wait_ns
                      FROM plan_waits WHERE query_id = {literal(query_id)} ORDER BY id""").fetchall()


@dataclass
class FetchWhatIf:
    query_id: int
    executions: int
    fetches: int
    rows: int
    bytes: int                 # what its round trips carried beyond their first packets
    trip_wait_ns: int          # their mean cost: SQL*Net waits to and from the client per trip
    base_ns: int               # what a trip costs whatever it carries (trip_cost), at most trip_wait_ns
    ns_per_byte: float | None  # the per-byte part (None: the trips' bytes did not vary)
    array_size: int
    fetches_after: int
    saved_ns: int
    saved_rtt_ns: int | None = None   # the same trips at the client's network round trip (when known)

    @property
    def byte_ns(self) -> int:
        """The per-byte part of the trips' cost: the same bytes flow at any array size, so it stays."""
        return round(self.bytes * self.ns_per_byte) if self.ns_per_byte else 0


def fetch_whatif(db: CaptureDB, query_id: int, array_sizes=(100, 500)) -> list[FetchWhatIf]:
    """Fetch calls a larger array size would need (each execution's rows // size + 1: the last is partial)
    and the client round trips saved, each at the trip's base cost measured on its node (trip_cost): the
    same bytes then flow in fewer, bigger calls, so their per-byte cost stays. An upper bound: the base
    holds the client's time between calls that does not grow with the bytes, its think time too, which
    fewer calls need not save. With a known round trip (client_rtt: measured or given) also the trips at
    it: the lower bound."""
    row = db.con.execute("SELECT executions, fetches, rows, rows_per_execution, bytes, trip_wait_ns, base_ns, "
                         "ns_per_byte, rtt_ns FROM fetch_trips WHERE query_id = ?", [query_id]).fetchone()
    if not row:
        return []
    execs, fetches, rows, per_exec, nbytes, trip, base, per_byte, rtt = row
    out = []
    for size in array_sizes:
        after = sum(fetch_calls(r or 0, size) for r in per_exec)
        saved = max(0, fetches - after)
        out.append(FetchWhatIf(query_id, execs, fetches, rows, nbytes, trip, base, per_byte, size, after,
                               saved * base, saved * min(base, rtt) if rtt is not None else None))
    return out
