"""Attribution of every statement's wall time to resources (docs/attribution.md has the method).

One pass per node: all state-changing points of each DBMS pid — scheduler switches and wakeups,
syscall entries and exits, block requests issued and completed, PostgreSQL lock-wait probes and the
statement boundaries themselves — go into one stream ordered by (pid, time) (sql/point.sql). Forward
fills carry the state, so each stretch between two points has a known CPU state, syscall, lock state,
I/O in flight and statement. Summing the stretches per statement and component is linear in the
number of events; no interval join of statements against events is needed.

The SQL modules (sql/*.sql) build the points and sum the segments; this module is the one step SQL
cannot do, the walk that carries each pid's state (`segment_walk`), and the constants the modules read
as variables (`variables`)."""

from __future__ import annotations

import ctypes
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from mwinv.capture.columns import numpy_ints
from mwinv.capture.tables import ATTRIBUTION_COMPONENTS
from mwinv.correlator.load import CaptureDB, literal
from mwinv.correlator.modules import step
from mwinv.kernel_trace.syscalls import numbers
from mwinv.options import memory_bytes

# x86_64 syscalls. Network: the client/remote socket calls; PostgreSQL reads its client socket
# with recv() and libpq waits with poll(). epoll_wait is PostgreSQL's latch wait (pg_sleep, parallel
# leader waiting, heavyweight lock waits) and stays "other" unless a lock probe says otherwise, or the
# syscall before it was a socket call that returned EAGAIN: PostgreSQL's non-blocking client socket
# then waits in epoll_wait until it can send (a result the client reads slowly) or receive.
NETWORK_SYSCALLS = numbers("poll", "select", "connect", "accept", "sendto", "recvfrom", "sendmsg", "recvmsg",
                           "ppoll", "accept4")
# futex (POSIX semaphores: LWLock waits) and SysV semop.
LOCK_SYSCALLS = numbers("futex", "semop", "semtimedop")
READ_SYSCALLS = numbers("read", "pread64", "readv", "preadv")
FILE_IO_SYSCALLS = numbers("read", "write", "pread64", "pwrite64", "readv", "writev", "fsync", "fdatasync",
                           "preadv", "pwritev", "readahead")
NET_RX_SYSCALLS = numbers("recvfrom", "recvmsg")
NET_TX_SYSCALLS = numbers("sendto", "sendmsg")
EPOLL_SYSCALLS = numbers("epoll_wait", "epoll_pwait")
EAGAIN = 11

# The kinds of point (sql/point.sql) and the labels of the segment's code columns (segment_walk).
POINT_KINDS = ("on", "off", "wake", "enter", "exit", "lock_start", "lock_done", "lwlock_start", "lwlock_done",
               "io_start", "io_done", "stmt_start", "stmt_end", "gap")
CPU_STATES = ("running", "runnable", "sleeping")
EVIDENCE = ("on", "off", "self")   # what the next point says of the task: switched in, out, or its own event
FILE_PATTERNS = ("seq", "rand")    # a positional read's access pattern (file_read)

# Recorded as pg_lock_wait_start_<n> etc., one uprobe per probe site.
# Points a task emits itself: it is on a CPU at that instant (evidence of a switch-in the trace lacks).
SELF_EVIDENCE_KINDS = ("enter", "exit", "lock_start", "lock_done", "lwlock_start", "lwlock_done", "io_start")

# The extension's per-thread rusage advances when the scheduler updates the task's runtime (each tick,
# 4 ms at HZ 250, and each switch): it can be a tick short at either end, which only statements much
# longer than a tick can ignore. Shorter ones take their CPU total from the scheduler events alone.
RUSAGE_MIN_WALL_NS = 50_000_000

# A request is sequential when it starts within this many sectors after the previous request of the
# same pid on the same device ends ([Taufer]: sequential accesses show a stride of ~2 blocks).
SEQ_GAP_SECTORS = 256


def variables() -> dict[str, object]:
    """The attribution's constants, as the SQL modules read them (SET VARIABLE)."""
    return {
        "read_syscalls": READ_SYSCALLS, "file_io_syscalls": FILE_IO_SYSCALLS, "network_syscalls": NETWORK_SYSCALLS,
        "epoll_syscalls": EPOLL_SYSCALLS, "lock_syscalls": LOCK_SYSCALLS, "net_rx_syscalls": NET_RX_SYSCALLS,
        "net_tx_syscalls": NET_TX_SYSCALLS, "seq_gap_sectors": SEQ_GAP_SECTORS,
        # a literal: binding a Python parameter makes DuckDB import pandas (29 s once on a slow disk)
        "rusage_min_wall_ns": RUSAGE_MIN_WALL_NS, "components": list(ATTRIBUTION_COMPONENTS),
        "segment_codes": {
            "kind": {k: _code(POINT_KINDS, k) for k in ("io_start", "exit")},
            "cpu": {k: _code(CPU_STATES, k) for k in CPU_STATES},
            "evidence": {k: _code(EVIDENCE, k) for k in ("on", "off")},
            "pattern": {k: _code(FILE_PATTERNS, k) for k in FILE_PATTERNS}},
    }


def _forward(valid: np.ndarray, start: np.ndarray, rows: np.ndarray, at: np.ndarray | None = None) -> np.ndarray:
    """Per row (or per row of `at`), the index of the last row at or before it in its pid's stretch where
    `valid`, or -1 (SQL's last_value(... IGNORE NULLS) OVER (ROWS UNBOUNDED PRECEDING), as one vectorised
    pass)."""
    idx = np.maximum.accumulate(np.where(valid, rows, -1))
    if at is not None:
        idx, start = idx[at], start[at]
    return np.where(idx >= start, idx, -1)


def _backward(valid: np.ndarray, end: np.ndarray, rows: np.ndarray, at: np.ndarray | None = None) -> np.ndarray:
    """Per row (or per row of `at`), the index of the first row at or after it in its pid's stretch where
    `valid`, or -1."""
    idx = np.minimum.accumulate(np.where(valid, rows, len(rows))[::-1])[::-1]
    if at is not None:
        idx, end = idx[at], end[at]
    return np.where(idx <= end, idx, -1)


def _carried(values: np.ndarray, idx: np.ndarray, null=-1) -> np.ndarray:
    # index -1 takes the null. For every row, one gather of the values with the null appended (a where
    # over a clipped gather was 16 % of the state); for a few rows, a gather and a where (appending
    # copies every value)
    null = np.asarray(null, values.dtype)
    if len(idx) * 4 < len(values):
        return np.where(idx >= 0, values[idx], null)
    return np.append(values, null)[idx]


def _code(labels: tuple[str, ...], label: str) -> int:
    return labels.index(label)


# Points per pass of segment_walk (kernel points, and as many statement boundaries): its numpy state and
# the next slice, read meanwhile, are outside DuckDB's limit (the estimate counts a kernel event as 1.5
# points; pgbench captures have ~1). A 120 s pgbench capture (9.7 M events, DuckDB at 768 MiB), once
# a pid stopped carrying the statements between trace windows: the walk took 15.5 s at 1 M points a
# slice, the process 1,472 MiB meanwhile (before: 18.2 s and 2,300 MiB; at 250 k 29.1 s, 1,830 MiB).
CHUNK_POINTS = 1_000_000
# ... at most: the slice follows DuckDB's limit (--memory), a point per POINT_BYTES of it (1 M at 768 MiB,
# the default's cap), so that a lower limit lowers the walk's share of the process too.
POINT_BYTES = 768
# A statement slice's per-statement modules (sql/own_attribution.sql, summed_statement.sql) hold this
# many statements' rows at once, not the capture's: on a 120 s pgbench capture (12.3 M statements) with
# DuckDB at 512 MB, slices of 1 M ran out of memory, of 250 k they took 37 s at 2.05 GiB.
CHUNK_STATEMENTS = 250_000
# A statement slice's statements in all, most of them rusage-only in a duty-cycled capture: only
# statement_io reads those, a join with the few statements with requests (seg_io), nothing held.
CHUNK_RUSAGE_ONLY = 4_000_000
# A pid that never switches carries its whole tail from slice to slice: past this many rows that pid's
# tail is counted at once, as at the end of the trace (its last stretch loses the evidence of what follows).
MAX_CARRY_POINTS = 4_000_000


# glibc's malloc serves an array of up to 32 MiB from its heaps once one that size was freed (its dynamic
# mmap threshold) and keeps what is freed there: the walk's slices, made in two threads, left the
# process 650 MiB larger than before the walk (2,103 MiB peak on a 120 s pgbench capture, slices of
# 250 k points). Arrays from 1 MiB on mapped on their own go back to the system when freed: 1,840 MiB.
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1 << 20


def _arrays_mapped() -> None:
    try:
        ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    except (OSError, AttributeError):   # not glibc: its allocator's own ways
        pass


@step(builds=("segment_code",), inputs=("point", "dbms_node", "kernel_event", "traced_statement", "traced_window"),
      slice="pid")
def segment_walk(db: CaptureDB, bounds: list[tuple[int | None, int | None]]):
    """The segments of one time slice at a time as `segment_code` (their code columns, numpy), for the
    sliced modules that sum them per statement (sql/seg_*_part.sql).

    A segment is the stretch between consecutive points of one pid, with the state carried forward.
    The points are read in time slices, each sorted by (node, pid, ts, ord); every carried state is a
    forward (or backward) fill within a pid's rows, done with running maxima of row indices in numpy.
    A slice's state reaches the next slice as a few context rows per pid (the last row each fill
    needs) and the pid's tail from its last switch on, whose evidence of what comes next lies in the
    next slice. Memory follows the slice, not the capture.

    A point outside every trace window of its node (traced_window), and the 'gap' point at a window's
    end, shows nothing of the task's state: each fill stops there, and the stretch from it on has its
    state unknown (outside a window some events are off, so what a switch or syscall began may have
    ended unseen) until a point inside a window tells it again."""
    nodes = [v for (v,) in db.sql("SELECT node FROM dbms_node ORDER BY code").fetchall()]
    # the labels points can have: switch states and access patterns
    infos = sorted({v for (v,) in db.sql("SELECT DISTINCT prev_state FROM kernel_event "
                                         "WHERE event = 'sched_switch' AND prev_state IS NOT NULL").fetchall()}
                   | set(FILE_PATTERNS))
    # a capture correlated in parts (incremental.py): the walk goes on from the earlier part's carry, and
    # stops short of the trace's end with its own carry kept for the next part
    parts = db.parts
    carry = parts.carry_in(nodes, infos) if parts else None
    _arrays_mapped()
    windows = {code: (numpy_ints(t["lo"]), numpy_ints(t["hi"])) for code in range(len(nodes)) for t in [db.sql(
        f"SELECT lo::BIGINT AS lo, hi::BIGINT AS hi FROM traced_window WHERE node = {literal(nodes[code])} ORDER BY lo"
    ).to_arrow_table()]}
    traced = np.sort(numpy_ints(db.sql("SELECT DISTINCT statement_id::BIGINT AS id FROM traced_statement")
                                .to_arrow_table()["id"])) if db.duty_cycled else None
    # the next slice is read (DuckDB, its own threads) while numpy works on this one
    with ThreadPoolExecutor(1) as reader:
        reading = reader.submit(_read_slice, db.con.cursor(), nodes, infos, windows, *bounds[0])
        try:
            for i in range(len(bounds)):
                raw = reading.result()
                if i + 1 < len(bounds):
                    reading = reader.submit(_read_slice, db.con.cursor(), nodes, infos, windows, *bounds[i + 1])
                if carry is not None:
                    raw = _prepend(carry, raw)
                last = i == len(bounds) - 1
                columns, carry = _segment_state(raw, infos, last and not (parts and parts.until_ns), traced)
                del raw
                if last and parts:
                    parts.walked(carry, nodes, infos)
                db.con.register("segment_code", columns)
                yield
        finally:
            db.con.unregister("segment_code")


def _read_slice(con, nodes: list[str], infos: list[str], windows: dict[int, tuple[np.ndarray, np.ndarray]],
                lo: int | None, hi: int | None) -> dict[str, np.ndarray]:
    """One time slice of the point stream, sorted, as numpy columns (labels as codes), each point marked
    seen where a trace window of its node covers it (windows: per node code, their sorted lo and hi)."""
    # text columns come out of DuckDB as enums, i.e. Arrow dictionaries whose indices are the codes,
    # and integer columns without nulls (ret is only read on exits and request starts, where it is set)
    t = con.execute(f"""
        SELECT node::{_enum_type(nodes)} AS node, pid::BIGINT AS pid, ts::BIGINT AS ts,
               kind::{_enum_type(POINT_KINDS)} AS kind, info::{_enum_type(infos)} AS info,
               coalesce(stack_id, -1)::BIGINT AS stack_id, coalesce(nr, -1)::BIGINT AS nr,
               coalesce(ret, 0)::BIGINT AS ret, coalesce(sid, -1)::BIGINT AS sid,
               coalesce(io_seq, 0)::BIGINT AS io_seq, coalesce(io_rand, 0)::BIGINT AS io_rand
        FROM point WHERE {range_sql('ts', lo, hi)} ORDER BY node, pid, ts, ord""").to_arrow_table()
    con.close()
    raw = {"node": _codes(t["node"]), "pid": numpy_ints(t["pid"]), "ts": numpy_ints(t["ts"]),
           "kind": _codes(t["kind"]), "info": _codes(t["info"])}
    raw.update({c: numpy_ints(t[c]) for c in ("stack_id", "nr", "ret", "sid", "io_seq", "io_rand")})
    raw["context"] = np.zeros(t.num_rows, bool)
    raw["seen"] = _in_windows(raw["node"], raw["ts"], windows) & (raw["kind"] != _code(POINT_KINDS, "gap"))
    return raw


def _in_windows(node: np.ndarray, ts: np.ndarray, windows: dict[int, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Whether each (node code, ts) lies in one of its node's windows [lo, hi] (sorted, disjoint)."""
    seen = np.zeros(len(ts), bool)
    for code, (lo, hi) in windows.items():
        mine = node == code
        at = np.searchsorted(lo, ts[mine], side="right") - 1
        seen[mine] = (at >= 0) & (ts[mine] <= hi[np.maximum(at, 0)])
    return seen


def slice_bounds(db: CaptureDB, chunk_points: int, lo: int | None = None,
                 hi: int | None = None) -> list[tuple[int | None, int | None]]:
    """Time slices of [lo, hi) (None: open-ended) of at most about `chunk_points` kernel points and as
    many statement boundaries each: the cuts of the kernel events' time quantiles (a switch gives two
    points, so events count one and a half) and of the walked statements' starts (two points each,
    sql/walked_statement.sql). A statement between the trace windows of a duty-cycled capture is walked
    where it holds a kernel point: cut by the events alone, a window's statements made one slice."""
    cuts = set()
    for table, column, per in (("kernel_event", "ts_ns", 1.5), ("walked_statement", "start_ns", 2)):
        n = db.sql(f"SELECT count(*) FROM {table} WHERE {range_sql(column, lo, hi)}").fetchone()[0]
        bounds = _quantile_bounds(db, table, column, -(-int(n * per) // chunk_points), "approx_quantile", lo, hi)
        cuts |= {c for c, _ in bounds[1:]}
    cuts = sorted(cuts)
    return list(zip([lo] + cuts, cuts + [hi]))


def chunk_points(db: CaptureDB) -> int:
    """Points per slice of the walk under this session's DuckDB limit (CHUNK_POINTS at most)."""
    limit = memory_bytes(db.sql("SELECT current_setting('memory_limit')").fetchone()[0])
    return max(1, min(CHUNK_POINTS, limit // POINT_BYTES))


def statement_bounds(db: CaptureDB, chunk_statements: int, lo: int | None = None,
                     hi: int | None = None) -> list[tuple[int | None, int | None]]:
    """Slices of [lo, hi) of the statements' slice keys (sql/slice_statement.sql) for the `slice: statement`
    modules, each of about `chunk_statements` statements whose own rows are summed (not rusage_only) and
    at most CHUNK_RUSAGE_ONLY in all; the cuts are statements' keys (exact quantiles: 0.35 s for 13 M)."""
    cuts = set()
    for only, chunk in (("NOT rusage_only", chunk_statements), ("true", max(chunk_statements, CHUNK_RUSAGE_ONLY))):
        where = f"{only} AND {range_sql('key_ns', lo, hi)}"
        n = db.sql(f"SELECT count(*) FROM slice_statement WHERE {where}").fetchone()[0]
        bounds = _quantile_bounds(db, "slice_statement", "key_ns", -(-n // chunk), "quantile_disc", lo, hi, only)
        cuts |= {c for c, _ in bounds[1:]}
    cuts = sorted(cuts)
    return list(zip([lo] + cuts, cuts + [hi]))


def _quantile_bounds(db: CaptureDB, table: str, column: str, slices: int, quantile: str,
                     lo: int | None, hi: int | None, only: str = "true") -> list[tuple[int | None, int | None]]:
    """`slices` ranges of `column` within [lo, hi) from its quantiles there over the rows where `only`
    (`quantile`: DuckDB's function), the first from lo and the last to hi: every row in [lo, hi) lies
    in exactly one."""
    if slices <= 1:
        return [(lo, hi)]
    cuts = db.sql(f"SELECT {quantile}({column}, " + "[" + ", ".join(
        f"{k / slices:.6f}" for k in range(1, slices)) + f"]) FROM {table} WHERE {only} AND {range_sql(column, lo, hi)}"
                  ).fetchone()[0]
    cuts = sorted(set(int(c) for c in cuts if lo is None or c > lo))
    return list(zip([lo] + cuts, cuts + [hi]))


def range_sql(col: str, lo: int | None, hi: int | None) -> str:
    """The condition that `col` (a column name of the code's) lies in [lo, hi) (None: open-ended), the
    bounds through the one quoting helper (load.literal: parameters would import pandas)."""
    conds = ([f"{col} >= {literal(int(lo))}"] if lo is not None else []) + \
        ([f"{col} < {literal(int(hi))}"] if hi is not None else [])
    return " AND ".join(conds) or "true"


def _codes(column: pa.ChunkedArray) -> np.ndarray:
    """The int32 codes of an enum column (-1 null; all -1 when the column is all null)."""
    if not pa.types.is_dictionary(column.type):
        return np.full(len(column), -1, np.int32)
    return _dictionary_codes(column.combine_chunks() if column.num_chunks != 1 else column.chunk(0))


def _prepend(carry: dict[str, np.ndarray], raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The carried rows inserted before the slice's rows of the same pid (both are sorted by node
    and pid, and a pid's carried rows are all earlier than its new ones)."""
    def key(t: dict[str, np.ndarray]) -> np.ndarray:
        return t["node"].astype(np.int64) << 32 | t["pid"].astype(np.int64)

    at = np.searchsorted(key(raw), key(carry), side="left")
    return {c: np.insert(raw[c], at, carry[c]) for c in raw}


class _Pids:
    """One slice's rows grouped by pid (sorted by node, pid, ts): each row's group start and end, and the
    fills within a group that carry the state."""

    def __init__(self, raw: dict[str, np.ndarray]):
        node_c, pid = raw["node"], raw["pid"]
        n = len(pid)
        self.kind = raw["kind"]
        self.unseen = ~raw["seen"]
        self.unseen_at = np.append(self.unseen, True)   # index -1 (no row): unknown too
        self.all_seen = not self.unseen.any()           # a slice within one window
        self.rows = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
        new_group = np.ones(n, bool)
        new_group[1:] = (pid[1:] != pid[:-1]) | (node_c[1:] != node_c[:-1])
        self.start = np.maximum.accumulate(np.where(new_group, self.rows, 0))
        self.last = np.empty(n, bool)
        self.last[:-1], self.last[-1:] = new_group[1:], True
        self.end = np.minimum.accumulate(np.where(self.last, self.rows, n)[::-1])[::-1]

    def is_kind(self, *names: str) -> np.ndarray:
        wanted = np.zeros(len(POINT_KINDS) + 1, bool)   # the last entry: code -1 (none)
        wanted[[_code(POINT_KINDS, k) for k in names]] = True
        return wanted[self.kind]

    def forward(self, valid: np.ndarray, at: np.ndarray | None = None) -> np.ndarray:
        return _forward(valid, self.start, self.rows, at)

    def backward(self, valid: np.ndarray, at: np.ndarray | None = None) -> np.ndarray:
        return _backward(valid, self.end, self.rows, at)

    def state(self, valid: np.ndarray, fill=None, at: np.ndarray | None = None) -> np.ndarray:
        """forward (or backward, `fill`) over the points a window covers, at every row or at the rows
        `at`: -1 where an unseen point comes first (the state there is unknown)."""
        fill = fill or self.forward
        if self.all_seen:
            return fill(valid, at)
        idx = fill(valid | self.unseen, at)
        return np.where(self.unseen_at[idx], -1, idx)

    def cumsum(self, v: np.ndarray) -> np.ndarray:
        c = np.cumsum(v)
        return c - (c[self.start] - v[self.start])


def _segment_state(raw: dict[str, np.ndarray], infos: list[str], last_slice: bool,
                   traced: np.ndarray | None = None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    """The segment columns of one slice (its rows within a statement whose stretch ends in it) and
    the rows the next slice needs (None after the last slice). traced: the sorted ids of the statements
    a trace window covers whole (None: every statement may be)."""
    g = _Pids(raw)
    event_state, last_onoff = _cpu_state(g, raw, infos)
    sid = _carried(np.where(g.is_kind("stmt_start"), raw["sid"], -1), g.forward(g.is_kind("stmt_start", "stmt_end")), -2)
    # The pid's tail, from its last switch (in or out) on, waits for the next slice: what the task
    # did after it is told by the next switch. Context rows were counted in their own slice. A pid
    # whose tail outgrows MAX_CARRY_POINTS (it never switches) has its tail counted now.
    tail = np.zeros(len(g.rows), bool)
    if not last_slice:
        last_switch = last_onoff[g.end]
        from_row = np.where(last_switch >= 0, last_switch, g.start)
        if traced is not None:
            # what the next switch tells classifies only a traced statement's stretches (own_attribution
            # reads the components of those alone): a pid with none since its last switch waits with its
            # last row only. Between the windows of a duty-cycled capture (no kernel events) its
            # statements' boundaries piled up in its tail, carried and walked again slice after slice.
            found = traced[np.minimum(np.searchsorted(traced, sid), max(len(traced) - 1, 0))] == sid \
                if len(traced) else np.zeros(len(sid), bool)
            waits = np.zeros(len(g.rows) + 1, bool)
            waits[g.start[_last_per_group(found & (g.rows >= from_row), g.start)]] = True
            from_row = np.where(waits[g.start], from_row, g.end)
        tail = ~raw["context"] & (g.rows >= from_row) & (g.end - from_row < MAX_CARRY_POINTS)
    inflight = {"io_seq": g.cumsum(raw["io_seq"]), "io_rand": g.cumsum(raw["io_rand"])}
    columns = _segment_columns(g, raw, infos, event_state, inflight, sid, keep=~raw["context"] & ~tail)
    if last_slice:
        return columns, None
    return columns, _carry(g, raw, event_state, inflight, tail)


def _cpu_state(g: _Pids, raw: dict[str, np.ndarray], infos: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The CPU state each point implies (codes of CPU_STATES, -1 none) and each row's last switch in or
    out (-1 none)."""
    on, off, wake = g.is_kind("on"), g.is_kind("off"), g.is_kind("wake")
    runnable_info = np.array([v.startswith("R") for v in infos] + [False], bool)[raw["info"]]
    last_onoff = g.forward(on | off)
    last_onoff_on = _carried(on, g.state(on | off), False)
    event_state = np.full(len(g.rows), -1, np.int8)
    event_state[wake] = np.where(last_onoff_on[wake], _code(CPU_STATES, "running"), _code(CPU_STATES, "runnable"))
    event_state[off] = np.where(runnable_info[off], _code(CPU_STATES, "runnable"), _code(CPU_STATES, "sleeping"))
    event_state[on | g.is_kind(*SELF_EVIDENCE_KINDS)] = _code(CPU_STATES, "running")
    return event_state, last_onoff


def _segment_columns(g: _Pids, raw: dict[str, np.ndarray], infos: list[str], event_state: np.ndarray,
                     inflight: dict[str, np.ndarray], sid: np.ndarray, keep: np.ndarray) -> dict[str, np.ndarray]:
    """Per row this slice counts (`keep`) within a statement, the state of the stretch from it to the pid's
    next row: the rows the per-slice sums (sql/seg_*_part.sql) read. Each fill runs over every row, its
    values are taken at these rows only (13 % of a duty-cycled pgbench capture's points: the others lie
    between statements)."""
    at = np.flatnonzero(keep & (sid > 0))
    ts, info_c, nr = raw["ts"], raw["info"], raw["nr"]
    on, off = g.is_kind("on"), g.is_kind("off")
    enter, exit_ = g.is_kind("enter"), g.is_kind("exit")
    evidence = np.full(len(g.rows), -1, np.int8)
    evidence[g.is_kind(*SELF_EVIDENCE_KINDS)] = _code(EVIDENCE, "self")
    evidence[off], evidence[on] = _code(EVIDENCE, "off"), _code(EVIDENCE, "on")
    onoff = np.where(on, _code(EVIDENCE, "on"), np.where(off, _code(EVIDENCE, "off"), -1)).astype(np.int8)
    has_next = ~g.last[at]
    following = np.where(has_next, at + 1, -1)
    next_evidence = np.where(following >= 0, g.state(evidence >= 0, g.backward, np.maximum(following, 0)), -1)
    call = g.state(enter | exit_, at=at)              # the last syscall entry or exit
    last_exit = g.state(exit_, at=at)
    # a socket call that would have blocked: the wait that follows (epoll) is for the network to
    # take a result, or for the client to send its next message (a portal resumed by a later Execute)
    eagain = _carried(exit_ & (raw["ret"] == -EAGAIN), last_exit, False)
    exit_nr = _carried(nr, last_exit)
    # an entry's access pattern (from file_read), none after an exit or a plain entry
    pattern_of_info = np.array([FILE_PATTERNS.index(v) if v in FILE_PATTERNS else -1 for v in infos] + [-1], np.int8)
    disk_sleep_info = np.array([v.startswith("D") for v in infos] + [False], bool)

    def waiting(start_kind: str, *changes: str) -> np.ndarray:
        return _carried(g.is_kind(start_kind), g.state(g.is_kind(start_kind, *changes), at=at), False)

    return {
        "node": raw["node"][at].astype(np.int16), "kind": raw["kind"][at].astype(np.int8), "nr": nr[at],
        "ret": raw["ret"][at], "ts": ts[at], "ts_end": np.where(has_next, ts[np.maximum(following, 0)], -1),
        "off_stack": _carried(raw["stack_id"], g.state(off, at=at), -2),
        "syscall": _carried(np.where(enter, nr, -1), call, -2),
        "last_io_kind": _carried(nr, g.state(g.is_kind("io_start") & (nr >= 0), at=at), -2),
        "in_lock": waiting("lock_start", "lock_done") | waiting("lwlock_start", "lwlock_done"),
        "io_seq_inflight": inflight["io_seq"][at], "io_rand_inflight": inflight["io_rand"][at],
        "sid": sid[at],
        "cpu_state": _carried(event_state, g.state(event_state >= 0, at=at)).astype(np.int8),
        "next_evidence": _carried(evidence, next_evidence).astype(np.int8),
        "next_onoff": _carried(onoff, g.state(onoff >= 0, g.backward, at)).astype(np.int8),
        "disk_sleep": _carried(disk_sleep_info[info_c], g.state(off & (info_c >= 0), at=at), False),
        "file_pattern": _carried(np.where(enter, pattern_of_info[info_c], -1), call).astype(np.int8),
        "socket_blocked": eagain & np.isin(exit_nr, NET_TX_SYSCALLS),
        "client_blocked": eagain & np.isin(exit_nr, NET_RX_SYSCALLS),
    }


def _carry(g: _Pids, raw: dict[str, np.ndarray], event_state: np.ndarray, inflight: dict[str, np.ndarray],
           tail: np.ndarray) -> dict[str, np.ndarray]:
    """The rows the next slice needs: per pid, the last counted row of every kind a forward fill looks
    back for (context), with the pid's running in-flight request counts put on its first context row,
    then its tail."""
    counted = ~tail
    off = g.is_kind("off")
    fills = (g.is_kind("on", "off"), event_state >= 0, g.is_kind("enter", "exit"), g.is_kind("stmt_start", "stmt_end"),
             off, g.is_kind("io_start") & (raw["nr"] >= 0), g.is_kind("lock_start", "lock_done"),
             g.is_kind("lwlock_start", "lwlock_done"), off & (raw["info"] >= 0), g.is_kind("exit"), g.unseen)
    context = np.unique(np.concatenate([_last_per_group(m & counted, g.start) for m in fills]))
    carry = {c: v[context] for c, v in raw.items()}
    carry["context"][:] = True
    first = np.ones(len(context), bool)
    first[1:] = g.start[context][1:] != g.start[context][:-1]
    last_counted = _last_per_group(counted, g.start)
    for col, running_count in inflight.items():
        running = np.zeros(len(g.rows), running_count.dtype)
        running[g.start[last_counted]] = running_count[last_counted]   # indexed by the group's first row
        carry[col] = np.where(first, running[g.start[context]], 0)
    return _prepend(carry, {c: v[tail] for c, v in raw.items()})


def _last_per_group(mask: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Row indices of the last row of each pid's group where `mask`."""
    idx = np.flatnonzero(mask)
    if not len(idx):
        return idx
    g = start[idx]
    return idx[np.append(g[1:] != g[:-1], True)]


def _enum_type(values) -> str:
    return "ENUM(" + ", ".join(map(literal, values)) + ")" if values else "VARCHAR"


def _dictionary_codes(arr: pa.DictionaryArray) -> np.ndarray:
    """The indices of a dictionary array as int32, -1 where null (read from its buffers)."""
    idx = arr.indices
    kind = "u" if pa.types.is_unsigned_integer(idx.type) else "i"
    codes = np.frombuffer(idx.buffers()[1], f"{kind}{idx.type.bit_width // 8}")
    codes = codes[idx.offset:idx.offset + len(idx)].astype(np.int32)
    validity = idx.buffers()[0]
    if validity is not None:
        bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
        codes[~bits[idx.offset:idx.offset + len(idx)].astype(bool)] = -1
    return codes


