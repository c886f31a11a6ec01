"""Attribution of every statement's wall time to resources (docs/attribution.md has the method).

One pass per node: all state-changing points of each DBMS pid — scheduler switches and wakeups,
syscall entries and exits, block requests issued and completed, PostgreSQL lock-wait probes and the
statement boundaries themselves — go into one stream ordered by (pid, time) (kernel_points.py and
sql/derived_point.sql). Forward fills carry the state, so each stretch between two points has a known
CPU state, syscall, lock state, I/O in flight and statement. Summing the stretches per statement and
component is linear in the number of events; no interval join of statements against events is needed.

The SQL modules (sql/*.sql) build the points and sum the segments; this module is the one step SQL
cannot do, the walk that carries each pid's state (`segment_walk`), and the constants the modules read
as variables (`variables`)."""

from __future__ import annotations

import ctypes
import functools
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa

from mwinv.capture.columns import numpy_ints
from mwinv.capture.tables import ATTRIBUTION_COMPONENTS
from mwinv.correlator.kernel_points import KernelPoints
from mwinv.correlator.load import CaptureDB, ident, literal
from mwinv.correlator.modules import step
from mwinv.kernel_trace.syscalls import numbers
from mwinv.native import compiled
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

# The kinds of point (kernel_points.py, sql/derived_point.sql) and the labels of the segment's code columns
# (segment_walk).
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


def _code(labels: tuple[str, ...], label: str) -> int:
    return labels.index(label)


# The components a statement all on a CPU has (sql/summed_statement.sql's simple ones), as component_ns's parameters.
SIMPLE_COMPONENTS = ("cpu_user", "cpu_sys", "run_queue", "not_allocated")


@step(builds=("component_ns",), inputs=())
def component_ns(db: CaptureDB) -> None:
    """component_ns(cpu_user, cpu_sys, run_queue, not_allocated): a statement's ns per component as
    summed_statement lists them (ATTRIBUTION_COMPONENTS' order), the others 0. A macro of a list literal:
    placed by the components variable per row (list_select) 3 M lists took 1.6 s, as a literal 0.10 s."""
    items = ", ".join(ident(c) if c in SIMPLE_COMPONENTS else "0" for c in ATTRIBUTION_COMPONENTS)
    db.con.execute(f"CREATE MACRO component_ns({', '.join(map(ident, SIMPLE_COMPONENTS))}) "
                   f"AS [{items}]::BIGINT[]")


# Points per pass of segment_walk (kernel points, and as many statement boundaries): its numpy state and
# the next slice, read meanwhile, are outside DuckDB's limit (the estimate counts a kernel event as 1.5
# points; pgbench captures have ~1). A 120 s pgbench capture (9.7 M events, DuckDB at 768 MiB), once
# a pid stopped carrying the statements between trace windows: the walk took 15.5 s at 1 M points a
# slice, the process 1,472 MiB meanwhile (before: 18.2 s and 2,300 MiB; at 250 k 29.1 s, 1,830 MiB). The
# 600 s capture (23 M statements), whole correlation, two runs each: 1 M 44.4-45.2 s at 1,193-1,251 MiB
# peak, 2 M 42.3-42.6 s at 1,276-1,351 MiB, 4 M 42.3-42.9 s at 1,470-1,540 MiB (69 slices at 1 M: each
# slice's sums are queries of their own).
CHUNK_POINTS = 2_000_000
# ... at most: the slice follows DuckDB's limit (--memory), a point per POINT_BYTES of it (2 M at 768 MiB,
# the default's cap), so that a lower limit lowers the walk's share of the process too.
POINT_BYTES = 384
# Slices read at once, in threads, while one is walked (each holds its points outside DuckDB's limit too): a
# slice's read (kernel_points.py, sql/derived_point.sql, the sort) took 0.22-0.29 s of the 600 s pgbench
# capture's 69. With one reader the walk waited 12.4 s of its 12.8 s for it; with two the walk took 10.2 s.
READERS = 2
# A statement slice's per-statement modules (sql/statement_io.sql, summed_statement.sql) hold this
# many statements' rows at once, not the capture's: on a 120 s pgbench capture (12.3 M statements) with
# DuckDB at 512 MB, slices of 1 M ran out of memory, of 250 k they took 37 s at 2.05 GiB.
CHUNK_STATEMENTS = 250_000
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


@step(builds=("segment_code",), inputs=("derived_point", "event_kind", "point_ord", "dbms_node", "dbms_pid",
                                        "kernel_event", "traced_statement", "traced_window"), slice="pid")
def segment_walk(db: CaptureDB, bounds: list[tuple[int | None, int | None]]):
    """The segments of one time slice at a time as `segment_code` (their code columns, numpy), for the
    sliced modules that sum them per statement (sql/seg_*_part.sql).

    A segment is the stretch between consecutive points of one pid, with the state carried forward.
    The points are read in time slices, each sorted by (node, pid, ts, ord); every carried state is a
    forward (or backward) fill within a pid's rows, done in one pass over the pid's rows in C (walkstate.c).
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
    kernel = KernelPoints(db.con.cursor(), db.sources.get("kernel_event", []), POINT_KINDS, nodes, infos)
    try:
        # the next slices are read (in threads, Arrow's and DuckDB's too) while this one is walked
        with ThreadPoolExecutor(READERS) as reader:
            reading = deque(reader.submit(_read_slice, db.con.cursor(), kernel, nodes, infos, windows, *b)
                            for b in bounds[:READERS])
            try:
                for i in range(len(bounds)):
                    raw = reading.popleft().result()
                    kernel.walked(bounds[i][1])
                    if i + READERS < len(bounds):
                        reading.append(reader.submit(_read_slice, db.con.cursor(), kernel, nodes, infos, windows,
                                                     *bounds[i + READERS]))
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
    finally:   # after the reader's last read
        kernel.close()


def _read_slice(con, kernel: KernelPoints, nodes: list[str], infos: list[str],
                windows: dict[int, tuple[np.ndarray, np.ndarray]], lo: int | None,
                hi: int | None) -> dict[str, np.ndarray]:
    """One time slice of the point stream, sorted by (node, pid, ts, ord), as numpy columns (labels as
    codes), each point marked seen where a trace window of its node covers it (windows: per node code,
    their sorted lo and hi): the kernel's points (kernel_points.py) and those of derived tables."""
    # text columns come out of DuckDB as enums, i.e. Arrow dictionaries whose indices are the codes,
    # and integer columns without nulls (ret is only read on exits and request starts, where it is set)
    t = con.execute(f"""
        SELECT node::{_enum_type(nodes)} AS node, pid::BIGINT AS pid, ts::BIGINT AS ts, ord::BIGINT AS ord,
               kind::{_enum_type(POINT_KINDS)} AS kind, info::{_enum_type(infos)} AS info,
               coalesce(nr, -1)::BIGINT AS nr, coalesce(ret, 0)::BIGINT AS ret, coalesce(sid, -1)::BIGINT AS sid,
               io_seq::BIGINT AS io_seq, io_rand::BIGINT AS io_rand
        FROM derived_point WHERE {range_sql('ts', lo, hi)}""").to_arrow_table()
    con.close()
    derived = {"node": _codes(t["node"]), "kind": _codes(t["kind"]), "info": _codes(t["info"])}
    derived.update({c: numpy_ints(t[c]) for c in ("pid", "ts", "ord", "nr", "ret", "sid", "io_seq", "io_rand")})
    return _in_order([*kernel.read(lo, hi), derived], kernel.pids, windows)


def _in_order(runs: list[dict[str, np.ndarray]], pids: np.ndarray,
              windows: dict[int, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """The points of the runs (SLICE_COLUMNS each, those missing at their default) as the walk's input
    columns, sorted by (node, pid, ts, ord), ties in the runs' order, each marked seen where a trace
    window of its node covers it (slicepoints.c); pids: the DBMS pids' keys (node code << 32 | pid),
    sorted, every point's among them."""
    lib = _slice_lib()
    kept = [np.ascontiguousarray(r[c], t) for r in runs for c, t in SLICE_COLUMNS if c in r]
    at = iter(kept)
    structs = (_Run * len(runs))(*[_Run(len(r["ts"]), (ctypes.c_void_p * len(SLICE_COLUMNS))(
        *[next(at).ctypes.data if c in r else None for c, _ in SLICE_COLUMNS])) for r in runs])
    bounds = [windows.get(code, (np.zeros(0, np.int64),) * 2) for code in range(max(windows, default=-1) + 1)]
    bounds = [(np.ascontiguousarray(lo, np.int64), np.ascontiguousarray(hi, np.int64)) for lo, hi in bounds]
    wins = (_Windows * len(bounds))(*[_Windows(lo.ctypes.data, hi.ctypes.data, len(lo)) for lo, hi in bounds])
    raw = {c: np.empty(sum(len(r["ts"]) for r in runs), t) for c, t in WALK_INPUTS}
    rc = lib.slice_points(structs, len(runs), pids.ctypes.data, len(pids), wins, len(bounds),
                          _code(POINT_KINDS, "gap"), _pointers(list(raw.values())))
    if rc == -1:
        raise MemoryError("the walk's slice")
    if rc:
        raise ValueError("a point of the walk's slice is of a pid that ran no statement")
    return raw


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
    modules, each of about `chunk_statements` statements whose own rows are summed (not rusage_only: the
    others they filter out as they scan, holding none); the cuts are statements' keys (exact quantiles:
    0.35 s for 13 M)."""
    n = db.sql(f"SELECT count(*) FROM slice_statement WHERE NOT rusage_only AND {range_sql('key_ns', lo, hi)}"
               ).fetchone()[0]
    return _quantile_bounds(db, "slice_statement", "key_ns", -(-n // chunk_statements), "quantile_disc", lo, hi,
                            "NOT rusage_only")


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


# The walk's state is computed in C (walkstate.c, which names POINT_KINDS' codes in their order), one
# pass over each pid's rows: its input columns, in the order the C reads them, and the columns it gives
# (segment_code's, in this order).
WALK_INPUTS = (("node", np.int32), ("pid", np.int64), ("ts", np.int64), ("kind", np.int32), ("info", np.int32),
               ("stack_id", np.int64), ("nr", np.int64), ("ret", np.int64), ("sid", np.int64),
               ("io_seq", np.int64), ("io_rand", np.int64), ("context", bool), ("seen", bool))
WALK_COLUMNS = (("node", np.int16), ("kind", np.int8), ("nr", np.int64), ("ret", np.int64), ("ts", np.int64),
                ("ts_end", np.int64), ("off_stack", np.int64), ("syscall", np.int64), ("last_io_kind", np.int64),
                ("in_lock", bool), ("io_seq_inflight", np.int64), ("io_rand_inflight", np.int64), ("sid", np.int64),
                ("cpu_state", np.int8), ("next_evidence", np.int8), ("next_onoff", np.int8), ("disk_sleep", bool),
                ("file_pattern", np.int8), ("socket_blocked", bool), ("client_blocked", bool))
TAIL, CARRIED = 1, 2   # a row's roles (walkstate.c's walk_roles)


class _Codes(ctypes.Structure):
    """walkstate.c's Codes: the tables a point's label codes index (entry 0: code -1) and the state codes."""
    _fields_ = [(f, ctypes.c_void_p) for f in ("self_kind", "runnable_info", "disk_sleep_info", "pattern_info",
                                               "net_tx", "net_rx")] + \
        [(f, ctypes.c_int64) for f in ("n_net_tx", "n_net_rx", "eagain")] + \
        [(f, ctypes.c_int8) for f in ("running", "runnable", "sleeping", "ev_on", "ev_off", "ev_self")]


@functools.cache
def _walk_lib() -> ctypes.CDLL:
    lib = compiled(Path(__file__).with_name("walkstate.c"), "the correlator's segment walk")
    p = ctypes.c_void_p
    lib.walk_roles.restype = ctypes.c_int64
    lib.walk_roles.argtypes = [p, ctypes.c_int64, p, p, ctypes.c_int64, ctypes.c_int, ctypes.c_int64, p, p]
    lib.walk_columns.restype = None
    lib.walk_columns.argtypes = [p, ctypes.c_int64, p, p, p]
    return lib


# A slice's points as slicepoints.c reads them (a run's columns, in this order) before they are put in order.
SLICE_COLUMNS = (("node", np.int32), ("pid", np.int64), ("ts", np.int64), ("ord", np.int64), ("kind", np.int32),
                 ("info", np.int32), ("stack_id", np.int64), ("nr", np.int64), ("ret", np.int64), ("sid", np.int64),
                 ("io_seq", np.int64), ("io_rand", np.int64))


class _Run(ctypes.Structure):
    """slicepoints.c's Run."""
    _fields_ = [("n", ctypes.c_int64), ("cols", ctypes.c_void_p * len(SLICE_COLUMNS))]


class _Windows(ctypes.Structure):
    """slicepoints.c's Windows."""
    _fields_ = [("lo", ctypes.c_void_p), ("hi", ctypes.c_void_p), ("n", ctypes.c_int64)]


@functools.cache
def _slice_lib() -> ctypes.CDLL:
    lib = compiled(Path(__file__).with_name("slicepoints.c"), "the correlator's segment walk")
    p = ctypes.c_void_p
    lib.slice_points.restype = ctypes.c_int
    lib.slice_points.argtypes = [p, ctypes.c_int64, p, ctypes.c_int64, p, ctypes.c_int64, ctypes.c_int32, p]
    return lib


def _pointers(arrays: list[np.ndarray]):
    return (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])


def _segment_state(raw: dict[str, np.ndarray], infos: list[str], last_slice: bool,
                   traced: np.ndarray | None = None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    """The segment columns of one slice (its rows within a statement whose stretch ends in it) and
    the rows the next slice needs (None after the last slice): per pid, the last counted row of every
    kind a fill looks back for (context), with the pid's running in-flight request counts on its first
    context row, then its tail from its last switch (in or out) on, whose evidence of what the task
    did lies in the next switch. A pid whose tail outgrows MAX_CARRY_POINTS (it never switches) has
    its tail counted now. traced: the sorted ids of the statements a trace window covers whole (None:
    every statement may be); the stretches of the others wait for no switch, their pid carries its
    last row only (between the windows of a duty-cycled capture their boundaries piled up in its tail).

    One pass over each pid's rows in C: the state of a 600 s pgbench capture's 69 slices (0.5 M points
    each) took 1.8 s in all, against 13.4 s as numpy fills (~15 fills of several full-array passes)."""
    lib = _walk_lib()
    n = len(raw["pid"])
    inputs = [np.ascontiguousarray(raw[c], t) for c, t in WALK_INPUTS]
    tables = [np.array([0] + [k in SELF_EVIDENCE_KINDS for k in POINT_KINDS], np.uint8),
              np.array([0] + [v.startswith("R") for v in infos], np.uint8),
              np.array([0] + [v.startswith("D") for v in infos], np.uint8),
              np.array([-1] + [FILE_PATTERNS.index(v) if v in FILE_PATTERNS else -1 for v in infos], np.int8),
              np.array(NET_TX_SYSCALLS, np.int64), np.array(NET_RX_SYSCALLS, np.int64)]
    codes = _Codes(*[t.ctypes.data for t in tables], len(NET_TX_SYSCALLS), len(NET_RX_SYSCALLS), EAGAIN,
                   *[_code(CPU_STATES, k) for k in ("running", "runnable", "sleeping")],
                   *[_code(EVIDENCE, k) for k in ("on", "off", "self")])
    ids = np.ascontiguousarray(traced if traced is not None else [], np.int64)
    role = np.empty(n, np.uint8)
    n_carried = ctypes.c_int64()
    counted = lib.walk_roles(_pointers(inputs), n, ctypes.byref(codes), ids.ctypes.data,
                             len(ids) if traced is not None else -1, last_slice, MAX_CARRY_POINTS, role.ctypes.data,
                             ctypes.byref(n_carried))
    columns = {c: np.empty(counted, t) for c, t in WALK_COLUMNS}
    carried_io = {c: np.empty(n_carried.value, np.int64) for c in ("io_seq", "io_rand")}
    lib.walk_columns(_pointers(inputs), n, ctypes.byref(codes), role.ctypes.data,
                     _pointers(list(columns.values()) + list(carried_io.values())))
    if last_slice:
        return columns, None
    context, tail = (role & CARRIED) != 0, (role & TAIL) != 0
    carry = {c: v[context] for c, v in raw.items()}
    carry["context"][:] = True
    carry.update(carried_io)
    return columns, _prepend(carry, {c: v[tail] for c, v in raw.items()})


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


