"""Attribution of every statement's wall time to resources (docs/attribution.md has the method).

One pass per node: all state-changing points of each DBMS pid — scheduler switches and wakeups,
syscall entries and exits, block requests issued and completed, PostgreSQL lock-wait probes and the
statement boundaries themselves — go into one stream ordered by (pid, time). Forward fills carry
the state, so each stretch between two points has a known CPU state, syscall, lock state,
I/O in flight and statement. Summing the stretches per statement and component is linear in the
number of events; no interval join of statements against events is needed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from mwinv.capture.columns import numpy_ints
from mwinv.capture.tables import ATTRIBUTION_COMPONENTS
from mwinv.correlator.load import CaptureDB, literal, sql_file
from mwinv.kernel_trace.syscalls import numbers

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

# The kinds of point (build_points) and the labels of the segment's code columns (build_segments).
POINT_KINDS = ("on", "off", "wake", "enter", "exit", "lock_start", "lock_done", "lwlock_start", "lwlock_done",
               "io_start", "io_done", "stmt_start", "stmt_end")
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


def _in(values) -> str:
    return "(" + ", ".join(map(literal, values)) + ")"


def build_disk_requests(db: CaptureDB) -> None:
    """disk_request: one row per disk I/O a DBMS task caused, with its sequential flag and, where the
    request's completion is known, its completion time.

    Reads come from the pages the task added to the page cache inside a read syscall (its own context,
    also for readahead and when blk-throttle dispatches the bios from a kworker), grouped into runs of
    adjacent pages; the stride between runs of one file decides sequential or random. Writes, and the
    reads of tasks that read mostly past the page cache (O_DIRECT, as InnoDB does), come from
    block_bio_queue (the submitting task's context) or else block_rq_issue; block_rq_issue can run in a
    kworker and completions in interrupts (recorded without the pid filter), so issue/complete pairs
    only serve to time requests."""
    has_bio = db.sql("SELECT count(*) FROM kernel_event WHERE event = 'block_bio_queue'").fetchone()[0] > 0
    source = "block_bio_queue" if has_bio else "block_rq_issue"
    # A request completes at the sector it was issued at: the first completion there after the issue,
    # unless the sector was issued again first (then it is the later one's; a bio merged behind
    # another has no completion of its own and stays untimed).
    db.con.execute(f"""
        CREATE OR REPLACE TABLE block_request AS
        WITH issue AS (
            SELECT node, ts_ns, pid, dev, sector, nr_bytes, rwbs,
                   lead(ts_ns) OVER (PARTITION BY node, dev, sector ORDER BY ts_ns) AS next_issue_ns
            FROM kernel_event WHERE event = '{source}' AND nr_bytes > 0),
        done AS (SELECT node, ts_ns, dev, sector FROM kernel_event WHERE event = 'block_rq_complete')
        SELECT i.node, i.pid, i.dev, NULL::BIGINT AS ino, i.sector, i.nr_bytes, i.rwbs, i.ts_ns AS issue_ns,
               CASE WHEN d.ts_ns < coalesce(i.next_issue_ns, d.ts_ns + 1) THEN d.ts_ns END AS complete_ns
        FROM issue i ASOF LEFT JOIN done d ON d.node = i.node AND d.dev = i.dev AND d.sector = i.sector
             AND d.ts_ns >= i.ts_ns""")
    db.con.execute(rf"""
        CREATE OR REPLACE TABLE page_read AS
        WITH added AS (
            SELECT node, ts_ns, pid, dev, CAST(regexp_extract(fields, 'ino=(\d+)', 1) AS BIGINT) AS ino,
                   sector, nr_bytes
            FROM kernel_event WHERE event = 'mm_filemap_add_to_page_cache'),
        -- a task is in one syscall at a time: when its last read-syscall event is an entry, it is
        -- inside that read (the other syscalls' events need not be sorted for the join)
        calls AS (
            SELECT node, pid, ts_ns, starts_with(event, 'sys_enter') AS is_enter
            FROM kernel_event WHERE (starts_with(event, 'sys_enter') OR starts_with(event, 'sys_exit'))
                                    AND syscall_nr IN {_in(READ_SYSCALLS)}),
        in_read AS (
            SELECT a.*, c.ts_ns AS call_ns FROM added a
            ASOF JOIN calls c ON a.node = c.node AND a.pid = c.pid AND a.ts_ns >= c.ts_ns
            WHERE c.is_enter),
        marked AS (
            SELECT *, CASE WHEN lag(call_ns) OVER w = call_ns AND lag(ino) OVER w = ino AND lag(dev) OVER w = dev
                                AND lag(sector + nr_bytes // 512) OVER w = sector THEN 0 ELSE 1 END AS new_run
            FROM in_read WINDOW w AS (PARTITION BY node, pid ORDER BY ts_ns)),
        runs AS (SELECT *, sum(new_run) OVER (PARTITION BY node, pid ORDER BY ts_ns) AS run FROM marked)
        SELECT node, pid, dev, ino, min(sector) AS sector, sum(nr_bytes) AS nr_bytes, 'R' AS rwbs,
               min(ts_ns) AS issue_ns, NULL::BIGINT AS complete_ns
        FROM runs GROUP BY node, pid, dev, ino, run""")
    db.con.execute(f"""
        CREATE OR REPLACE TABLE disk_request AS
        -- a task's reads are its page-cache adds, unless it reads mostly past the page cache (O_DIRECT):
        -- an InnoDB thread's one buffered read of a small file had hidden its 93 MB of direct reads
        WITH cached AS (SELECT node, pid, sum(nr_bytes) AS bytes FROM page_read GROUP BY ALL),
        direct AS (SELECT node, pid, sum(nr_bytes) AS bytes FROM block_request WHERE rwbs LIKE '%R%' GROUP BY ALL),
        requests AS (
            SELECT * FROM page_read
            UNION ALL
            SELECT b.* FROM block_request b LEFT JOIN cached c USING (node, pid) LEFT JOIN direct d USING (node, pid)
            WHERE b.rwbs NOT LIKE '%R%' OR coalesce(c.bytes, 0) * 2 < d.bytes),
        strided AS (
            SELECT *, sector - lag(sector + nr_bytes // 512) OVER w AS stride_sectors
            FROM requests WINDOW w AS (PARTITION BY node, pid, dev, ino ORDER BY issue_ns))
        SELECT *, coalesce(abs(stride_sectors) <= {SEQ_GAP_SECTORS}, false) AS sequential FROM strided""")


def build_file_reads(db: CaptureDB) -> None:
    """file_read: positional reads (pread64/preadv) with a sequential flag from the file-offset stride
    per (pid, fd): decides seq vs random for disk waits whose block requests are not the task's own."""
    db.con.execute(rf"""
        CREATE OR REPLACE TABLE file_read AS
        WITH r AS (
            -- the fields by name ("fd=9 buf=... count=8192 pos=24576"): splitting is 2.5x faster than a regexp
            SELECT node, pid, ts_ns, syscall_nr, {_field("fd")} AS fd, {_field("pos")} AS pos,
                   coalesce({_field("count")}, {_field("vlen")}, 8192) AS len
            FROM kernel_event WHERE event IN ('sys_enter_pread64', 'sys_enter_preadv'))
        SELECT node, pid, ts_ns, syscall_nr,
               coalesce(abs(pos - lag(pos + len) OVER (PARTITION BY node, pid, fd ORDER BY ts_ns))
                        <= {SEQ_GAP_SECTORS * 512}, false) AS sequential
        FROM r WHERE pos IS NOT NULL""")


def _field(name: str) -> str:
    """The integer value of `name=` in an event's fields, NULL when absent."""
    return f"TRY_CAST(split_part(split_part(' ' || fields, ' {name}=', 2), ' ', 1) AS BIGINT)"


def build_points(db: CaptureDB) -> None:
    """point: the state-changing points of every DBMS pid. The kernel's points come from one scan of
    kernel_event (a sched_switch gives two: the task switched out and the one switched in). A view:
    build_segments reads it one time slice at a time, sorted; a table of it would be one more copy."""
    db.con.execute("CREATE OR REPLACE TABLE dbms_pid AS SELECT DISTINCT node, pid FROM statement_clean")
    db.con.execute(r"""
        CREATE OR REPLACE VIEW point AS
        WITH ev AS (
            SELECT node, ts_ns, pid, prev_pid, prev_state, next_pid, target_pid, stack_id, syscall_nr, syscall_ret,
                CASE WHEN event = 'sched_switch' THEN 'switch'
                     WHEN event IN ('sched_wakeup', 'sched_wakeup_new') THEN 'wake'
                     -- positional reads come with their access pattern from file_read (below)
                     WHEN event IN ('sys_enter_pread64', 'sys_enter_preadv') THEN NULL
                     WHEN event = 'sys_enter' OR event LIKE 'sys\_enter\_%' ESCAPE '\' THEN 'enter'
                     WHEN event = 'sys_exit' OR event LIKE 'sys\_exit\_%' ESCAPE '\' THEN 'exit'
                     -- heavyweight and LWLock waits apart: the deadlock check a heavyweight wait runs
                     -- after deadlock_timeout can wait for an LWLock, whose end is not the row lock's
                     WHEN starts_with(event, 'pg_lock_wait_start') THEN 'lock_start'
                     WHEN starts_with(event, 'pg_lock_wait_done') THEN 'lock_done'
                     WHEN starts_with(event, 'pg_lwlock_wait_start') THEN 'lwlock_start'
                     WHEN starts_with(event, 'pg_lwlock_wait_done') THEN 'lwlock_done'
                END AS k
            FROM kernel_event),
        kernel_point AS (
            SELECT node,
                   CASE WHEN half = 2 THEN next_pid WHEN k = 'switch' THEN prev_pid WHEN k = 'wake' THEN target_pid
                        ELSE pid END AS pid,
                   ts_ns AS ts,
                   CASE WHEN half = 2 THEN 2 ELSE CASE k WHEN 'switch' THEN 1 WHEN 'wake' THEN 3 WHEN 'enter' THEN 4
                                                         WHEN 'lock_start' THEN 5 WHEN 'lwlock_start' THEN 5
                                                         ELSE 0 END END AS ord,
                   CASE WHEN half = 2 THEN 'on' WHEN k = 'switch' THEN 'off' ELSE k END AS kind,
                   CASE WHEN half = 1 AND k = 'switch' THEN prev_state END AS info,
                   CASE WHEN half = 1 AND k = 'switch' THEN stack_id END AS stack_id,
                   CASE WHEN k IN ('enter', 'exit') THEN syscall_nr END AS nr,
                   CASE WHEN k = 'exit' THEN syscall_ret END AS ret
            FROM ev, range(1, 3) AS h(half)
            WHERE k IS NOT NULL AND (half = 1 OR k = 'switch'))
        SELECT p.* FROM (
            SELECT node, pid, ts, ord, kind, info, stack_id, nr, ret, NULL::BIGINT AS sid, 0 AS io_seq, 0 AS io_rand
            FROM kernel_point
            UNION ALL
            SELECT node, pid, ts_ns, 4, 'enter', CASE WHEN sequential THEN 'seq' ELSE 'rand' END, NULL, syscall_nr,
                   NULL, NULL, 0, 0
            FROM file_read
            UNION ALL
            -- nr: 1 sequential, 2 random; in-flight counts only for requests whose completion is known
            SELECT node, pid, issue_ns, 6, 'io_start', NULL, NULL, CASE WHEN sequential THEN 1 ELSE 2 END,
                   nr_bytes, NULL,
                   CASE WHEN sequential AND complete_ns IS NOT NULL THEN 1 ELSE 0 END,
                   CASE WHEN NOT sequential AND complete_ns IS NOT NULL THEN 1 ELSE 0 END
            FROM disk_request
            UNION ALL
            SELECT node, pid, complete_ns, 0, 'io_done', NULL, NULL, NULL, NULL, NULL,
                   CASE WHEN sequential THEN -1 ELSE 0 END, CASE WHEN sequential THEN 0 ELSE -1 END
            FROM disk_request WHERE complete_ns IS NOT NULL
            UNION ALL
            SELECT node, pid, start_ns, -1, 'stmt_start', NULL, NULL, NULL, NULL, statement_id, 0, 0
            FROM statement_clean WHERE coalesce(nesting_level, 0) = 0
            UNION ALL
            SELECT node, pid, end_ns, -2, 'stmt_end', NULL, NULL, NULL, NULL, statement_id, 0, 0
            FROM statement_clean WHERE coalesce(nesting_level, 0) = 0
        ) p JOIN dbms_pid USING (node, pid)""")


def _forward(valid: np.ndarray, start: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per row, the index of the last row at or before it in its pid's stretch where `valid`, or -1
    (SQL's last_value(... IGNORE NULLS) OVER (ROWS UNBOUNDED PRECEDING), as one vectorised pass)."""
    idx = np.maximum.accumulate(np.where(valid, rows, -1))
    return np.where(idx >= start, idx, -1)


def _backward(valid: np.ndarray, end: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per row, the index of the first row at or after it in its pid's stretch where `valid`, or -1."""
    idx = np.minimum.accumulate(np.where(valid, rows, len(rows))[::-1])[::-1]
    return np.where(idx <= end, idx, -1)


def _carried(values: np.ndarray, idx: np.ndarray, null=-1) -> np.ndarray:
    return np.where(idx >= 0, values[np.maximum(idx, 0)], null)


def _code(labels: tuple[str, ...], label: str) -> int:
    return labels.index(label)


# Points per pass of build_segments: its numpy state takes ~150 bytes per point and the next slice
# is read meanwhile, so a pass stays under ~1 GB whatever the capture's size (the estimate counts a
# kernel event as 1.5 points; pgbench captures have ~1, so slices hold ~2 M points).
CHUNK_POINTS = 3_000_000
# A pid that never switches carries its whole tail from slice to slice: past this many rows that pid's
# tail is counted at once, as at the end of the trace (its last stretch loses the evidence of what follows).
MAX_CARRY_POINTS = 4_000_000


def build_segments(db: CaptureDB, chunk_points: int | None = None) -> None:
    """The segments' sums per statement: `seg_component` (nanoseconds per component), `seg_io`
    (request and network bytes) and `seg_off_stack` (sleeping stretches per kernel stack).

    A segment is the stretch between consecutive points of one pid, with the state carried forward.
    The points are read in time slices of about `chunk_points`, each sorted by (node, pid, ts, ord);
    every carried state is a forward (or backward) fill within a pid's rows, done with running maxima
    of row indices in numpy. A slice's state reaches the next slice as a few context rows per pid
    (the last row each fill needs) and the pid's tail from its last switch on, whose evidence of
    what comes next lies in the next slice. Memory follows the slice, not the capture."""
    chunk_points = chunk_points or CHUNK_POINTS
    # the labels points can have (build_points): nodes of the statements, switch states and access patterns
    nodes = [v for (v,) in db.sql("SELECT DISTINCT node FROM statement_clean ORDER BY node").fetchall()]
    infos = sorted({v for (v,) in db.sql("SELECT DISTINCT prev_state FROM kernel_event "
                                         "WHERE event = 'sched_switch' AND prev_state IS NOT NULL").fetchall()}
                   | set(FILE_PATTERNS))
    _create_seg_tables(db, "_part", "SMALLINT")   # per slice, the node as its code
    bounds = _slice_bounds(db, chunk_points)
    carry: dict[str, np.ndarray] | None = None
    # the next slice is read (DuckDB, its own threads) while numpy works on this one
    with ThreadPoolExecutor(1) as reader:
        reading = reader.submit(_read_slice, db.con.cursor(), nodes, infos, *bounds[0])
        for i in range(len(bounds)):
            raw = reading.result()
            if i + 1 < len(bounds):
                reading = reader.submit(_read_slice, db.con.cursor(), nodes, infos, *bounds[i + 1])
            carry = _count_slice(db, raw, carry, infos, last_slice=i == len(bounds) - 1)
    node = _label_sql("node", nodes)
    db.con.execute(f"""
        CREATE OR REPLACE TABLE seg_component AS
        SELECT {node} AS node, statement_id, component, sum(ns)::BIGINT AS ns
        FROM seg_component_part GROUP BY ALL;
        CREATE OR REPLACE TABLE seg_io AS
        SELECT {node} AS node, statement_id, sum(seq_bytes)::BIGINT AS seq_bytes,
               sum(seq_reqs)::BIGINT AS seq_reqs, sum(random_reqs)::BIGINT AS random_reqs,
               sum(random_bytes)::BIGINT AS random_bytes, sum(net_rx_bytes)::BIGINT AS net_rx_bytes,
               sum(net_tx_bytes)::BIGINT AS net_tx_bytes
        FROM seg_io_part GROUP BY ALL;
        CREATE OR REPLACE TABLE seg_off_stack AS
        SELECT {node} AS node, statement_id, stack_id, sum(segments)::BIGINT AS segments,
               sum(ns)::BIGINT AS ns
        FROM seg_off_stack_part GROUP BY ALL;
        DROP TABLE seg_component_part; DROP TABLE seg_io_part; DROP TABLE seg_off_stack_part""")


def _read_slice(con, nodes: list[str], infos: list[str], lo: int | None, hi: int | None) -> dict[str, np.ndarray]:
    """One time slice of the point stream, sorted, as numpy columns (labels as codes)."""
    # text columns come out of DuckDB as enums, i.e. Arrow dictionaries whose indices are the codes,
    # and integer columns without nulls (ret is only read on exits and request starts, where it is set)
    t = con.execute(f"""
        SELECT node::{_enum_type(nodes)} AS node, pid::BIGINT AS pid, ts::BIGINT AS ts,
               kind::{_enum_type(POINT_KINDS)} AS kind, info::{_enum_type(infos)} AS info,
               coalesce(stack_id, -1)::BIGINT AS stack_id, coalesce(nr, -1)::BIGINT AS nr,
               coalesce(ret, 0)::BIGINT AS ret, coalesce(sid, -1)::BIGINT AS sid,
               coalesce(io_seq, 0)::BIGINT AS io_seq, coalesce(io_rand, 0)::BIGINT AS io_rand
        FROM point WHERE {_range_sql('ts', lo, hi)} ORDER BY node, pid, ts, ord""").to_arrow_table()
    con.close()
    raw = {"node": _codes(t["node"]), "pid": numpy_ints(t["pid"]), "ts": numpy_ints(t["ts"]),
           "kind": _codes(t["kind"]), "info": _codes(t["info"])}
    raw.update({c: numpy_ints(t[c]) for c in ("stack_id", "nr", "ret", "sid", "io_seq", "io_rand")})
    raw["context"] = np.zeros(t.num_rows, bool)
    return raw


def _count_slice(db: CaptureDB, raw: dict[str, np.ndarray], carry: dict[str, np.ndarray] | None,
                 infos: list[str], last_slice: bool) -> dict[str, np.ndarray] | None:
    """Add one slice's segments to the per-statement sums; returns the rows the next slice needs."""
    if carry is not None:
        raw = _prepend(carry, raw)
    columns, carry = _segment_state(raw, infos, last_slice)
    del raw
    db.con.register("segment_code", columns)
    db.con.execute(f"""
        INSERT INTO seg_component_part
        SELECT node, sid, {_component_sql()} AS component, sum(ts_end - ts)
        FROM segment_code WHERE keep AND sid > 0 AND ts_end >= 0 GROUP BY ALL;
        INSERT INTO seg_io_part {_io_sql()};
        INSERT INTO seg_off_stack_part
        SELECT node, sid, off_stack, count(*), sum(ts_end - ts) FROM segment_code
        WHERE keep AND sid > 0 AND ts_end >= 0 AND off_stack >= 0
          AND cpu_state = {_code(CPU_STATES, "sleeping")} GROUP BY ALL""")
    db.con.unregister("segment_code")
    return carry


def _create_seg_tables(db: CaptureDB, suffix: str, node_type: str) -> None:
    """Empty seg_component, seg_io and seg_off_stack (names with `suffix`)."""
    db.con.execute(f"""
        CREATE OR REPLACE TABLE seg_component{suffix} (node {node_type}, statement_id BIGINT, component VARCHAR,
            ns BIGINT);
        CREATE OR REPLACE TABLE seg_io{suffix} (node {node_type}, statement_id BIGINT, seq_bytes BIGINT,
            seq_reqs BIGINT, random_reqs BIGINT, random_bytes BIGINT, net_rx_bytes BIGINT, net_tx_bytes BIGINT);
        CREATE OR REPLACE TABLE seg_off_stack{suffix} (node {node_type}, statement_id BIGINT, stack_id BIGINT,
            segments BIGINT, ns BIGINT)""")


def _slice_bounds(db: CaptureDB, chunk_points: int) -> list[tuple[int | None, int | None]]:
    """Time slices of about `chunk_points` points each ((None, None): one slice), from the
    kernel events' time quantiles; a switch gives two points, so events count one and a half."""
    events = db.sql("SELECT count(*) FROM kernel_event").fetchone()[0]
    slices = max(1, -(-events * 3 // 2 // chunk_points))
    if slices == 1:
        return [(None, None)]
    cuts = db.sql("SELECT approx_quantile(ts_ns, " + "[" + ", ".join(
        f"{k / slices:.6f}" for k in range(1, slices)) + "]) FROM kernel_event").fetchone()[0]
    cuts = sorted(set(int(c) for c in cuts))
    return list(zip([None] + cuts, cuts + [None]))


def _range_sql(col: str, lo: int | None, hi: int | None) -> str:
    conds = ([f"{col} >= {int(lo)}"] if lo is not None else []) + ([f"{col} < {int(hi)}"] if hi is not None else [])
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


def _segment_state(raw: dict[str, np.ndarray], infos: list[str],
                   last_slice: bool) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    """The segment columns of one slice (`keep`: the rows whose stretch ends in this slice) and
    the rows the next slice needs (None after the last slice)."""
    node_c, pid, ts, kind_c, info_c, nr = (raw[c] for c in ("node", "pid", "ts", "kind", "info", "nr"))
    n = len(pid)
    rows = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)

    def is_kind(*names: str) -> np.ndarray:
        wanted = np.zeros(len(POINT_KINDS) + 1, bool)   # the last entry: code -1 (none)
        wanted[[_code(POINT_KINDS, k) for k in names]] = True
        return wanted[kind_c]

    new_group = np.ones(n, bool)
    new_group[1:] = (pid[1:] != pid[:-1]) | (node_c[1:] != node_c[:-1])
    start = np.maximum.accumulate(np.where(new_group, rows, 0))
    last = np.empty(n, bool)
    last[:-1], last[-1:] = new_group[1:], True
    end = np.minimum.accumulate(np.where(last, rows, n)[::-1])[::-1]

    on, off, wake = is_kind("on"), is_kind("off"), is_kind("wake")
    enter, exit_ = is_kind("enter"), is_kind("exit")
    self_evidence = is_kind(*SELF_EVIDENCE_KINDS)
    runnable_info = np.array([v.startswith("R") for v in infos] + [False], bool)[info_c]
    last_onoff = _forward(on | off, start, rows)          # the last switch in or out, -1 none
    last_onoff_on = _carried(on, last_onoff, False)
    # CPU state an event implies: codes of CPU_STATES, -1 none
    event_state = np.full(n, -1, np.int8)
    event_state[wake] = np.where(last_onoff_on[wake], _code(CPU_STATES, "running"), _code(CPU_STATES, "runnable"))
    event_state[off] = np.where(runnable_info[off], _code(CPU_STATES, "runnable"), _code(CPU_STATES, "sleeping"))
    event_state[on | self_evidence] = _code(CPU_STATES, "running")
    evidence = np.full(n, -1, np.int8)
    evidence[self_evidence] = _code(EVIDENCE, "self")
    evidence[off], evidence[on] = _code(EVIDENCE, "off"), _code(EVIDENCE, "on")
    onoff = np.where(on, _code(EVIDENCE, "on"), np.where(off, _code(EVIDENCE, "off"), -1)).astype(np.int8)

    has_next = ~last
    following = np.full(n, -1, rows.dtype)
    following[:-1] = np.where(has_next[:-1], rows[1:], -1)
    next_evidence = np.where(following >= 0, _carried(_backward(evidence >= 0, end, rows), following), -1)
    next_evidence = _carried(evidence, next_evidence)
    call = _forward(enter | exit_, start, rows)            # the last syscall entry or exit
    stmt = _forward(is_kind("stmt_start", "stmt_end"), start, rows)
    lock, lwlock = is_kind("lock_start", "lock_done"), is_kind("lwlock_start", "lwlock_done")
    io_start = is_kind("io_start") & (nr >= 0)
    off_info = off & (info_c >= 0)
    # a socket call that would have blocked: the wait that follows (epoll) is for the network to
    # take a result, or for the client to send its next message (a portal resumed by a later Execute)
    eagain = exit_ & (raw["ret"] == -EAGAIN)
    socket_eagain = eagain & np.isin(nr, NET_TX_SYSCALLS)
    client_eagain = eagain & np.isin(nr, NET_RX_SYSCALLS)

    def waiting(start_kind: str, changes: np.ndarray) -> np.ndarray:
        return _carried(is_kind(start_kind), _forward(changes, start, rows), False)

    def group_cumsum(v: np.ndarray) -> np.ndarray:
        c = np.cumsum(v)
        return c - (c[start] - v[start])

    # an entry's access pattern (from file_read), none after an exit or a plain entry
    pattern_of_info = np.array([FILE_PATTERNS.index(v) if v in FILE_PATTERNS else -1 for v in infos] + [-1], np.int8)
    file_c = np.where(enter, pattern_of_info[info_c], -1)
    disk_sleep_info = np.array([v.startswith("D") for v in infos] + [False], bool)
    io_seq_inflight, io_rand_inflight = group_cumsum(raw["io_seq"]), group_cumsum(raw["io_rand"])

    # The pid's tail, from its last switch (in or out) on, waits for the next slice: what the task
    # did after it is told by the next switch. Context rows were counted in their own slice. A pid
    # whose tail outgrows MAX_CARRY_POINTS (it never switches) has its tail counted now.
    tail = np.zeros(n, bool)
    if not last_slice:
        last_switch = last_onoff[end]
        from_row = np.where(last_switch >= 0, last_switch, start)
        tail = ~raw["context"] & (rows >= from_row) & (end - from_row < MAX_CARRY_POINTS)
    keep = ~raw["context"] & ~tail
    columns = {
        "keep": keep, "node": node_c.astype(np.int16), "kind": kind_c.astype(np.int8), "nr": nr, "ret": raw["ret"],
        "ts": ts, "ts_end": np.where(has_next, np.append(ts[1:], 0), -1),
        "off_stack": _carried(raw["stack_id"], _forward(off, start, rows), -2),
        "syscall": _carried(np.where(enter, nr, -1), call, -2),
        "last_io_kind": _carried(nr, _forward(io_start, start, rows), -2),
        "in_lock": waiting("lock_start", lock) | waiting("lwlock_start", lwlock),
        "io_seq_inflight": io_seq_inflight, "io_rand_inflight": io_rand_inflight,
        "sid": _carried(np.where(is_kind("stmt_start"), raw["sid"], -1), stmt, -2),
        "cpu_state": _carried(event_state, _forward(event_state >= 0, start, rows)).astype(np.int8),
        "next_evidence": next_evidence.astype(np.int8),
        "next_onoff": _carried(onoff, _backward(onoff >= 0, end, rows)).astype(np.int8),
        "disk_sleep": _carried(disk_sleep_info[info_c], _forward(off_info, start, rows), False),
        "file_pattern": _carried(file_c, call).astype(np.int8),
        "socket_blocked": _carried(socket_eagain, _forward(exit_, start, rows), False),
        "client_blocked": _carried(client_eagain, _forward(exit_, start, rows), False),
    }
    if last_slice:
        return columns, None
    # Context: per pid, the last counted row of every kind a forward fill looks back for, with the
    # pid's running in-flight request counts put on its first context row.
    counted = ~tail
    picks = [_last_per_group(m & counted, start) for m in
             (on | off, event_state >= 0, enter | exit_, is_kind("stmt_start", "stmt_end"), off, io_start,
              lock, lwlock, off_info, exit_)]
    context = np.unique(np.concatenate(picks))
    carry = {c: v[context] for c, v in raw.items()}
    carry["context"][:] = True
    first = np.ones(len(context), bool)
    first[1:] = start[context][1:] != start[context][:-1]
    last_counted = _last_per_group(counted, start)
    for col, inflight in (("io_seq", io_seq_inflight), ("io_rand", io_rand_inflight)):
        running = np.zeros(n, inflight.dtype)
        running[start[last_counted]] = inflight[last_counted]   # indexed by the group's first row
        carry[col] = np.where(first, running[start[context]], 0)
    tail_rows = {c: v[tail] for c, v in raw.items()}
    return columns, _prepend(carry, tail_rows)


def _last_per_group(mask: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Row indices of the last row of each pid's group where `mask`."""
    idx = np.flatnonzero(mask)
    if not len(idx):
        return idx
    g = start[idx]
    return idx[np.append(g[1:] != g[:-1], True)]


def _io_sql() -> str:
    """The model's inputs per statement from one slice of `segment_code`: its own block requests
    (sequential bytes, random requests) and the bytes its network syscalls moved."""
    io_start, exit_ = _code(POINT_KINDS, "io_start"), _code(POINT_KINDS, "exit")
    return f"""
        SELECT node, sid,
               coalesce(sum(ret) FILTER (WHERE kind = {io_start} AND nr = 1), 0),
               count(*) FILTER (WHERE kind = {io_start} AND nr = 1),
               count(*) FILTER (WHERE kind = {io_start} AND nr = 2),
               coalesce(sum(ret) FILTER (WHERE kind = {io_start} AND nr = 2), 0),
               coalesce(sum(ret) FILTER (WHERE kind = {exit_} AND nr IN {_in(NET_RX_SYSCALLS)} AND ret > 0), 0),
               coalesce(sum(ret) FILTER (WHERE kind = {exit_} AND nr IN {_in(NET_TX_SYSCALLS)} AND ret > 0), 0)
        FROM segment_code WHERE keep AND sid > 0 GROUP BY ALL"""


def _enum_type(values) -> str:
    return "ENUM(" + ", ".join(map(literal, values)) + ")" if values else "VARCHAR"


def _label_sql(col: str, labels) -> str:
    """The label of a code column (NULL for -1)."""
    return "[" + ", ".join(map(literal, labels)) + f"][{col} + 1]"


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


def _component_sql() -> str:
    """The component of each stretch of `segment_code` (docs/attribution.md, "Components")."""
    running, runnable = _code(CPU_STATES, "running"), _code(CPU_STATES, "runnable")
    on, off = _code(EVIDENCE, "on"), _code(EVIDENCE, "off")
    seq, rand = _code(FILE_PATTERNS, "seq"), _code(FILE_PATTERNS, "rand")
    return f"""
        CASE
          WHEN cpu_state = {running} OR (cpu_state < 0 AND next_onoff = {off}) THEN 'cpu'
          WHEN cpu_state = {runnable} AND next_evidence = {on} THEN 'run_queue'
          WHEN cpu_state = {runnable} THEN 'cpu_or_queue'
          WHEN cpu_state < 0 THEN 'not_allocated'
          WHEN in_lock THEN 'lock_wait'
          WHEN io_rand_inflight > 0 THEN 'disk_random'
          WHEN io_seq_inflight > 0 THEN 'disk_seq'
          -- a file syscall that sleeps waits for the disk (a page-cache hit does not sleep)
          WHEN syscall IN {_in(FILE_IO_SYSCALLS)} OR disk_sleep THEN
               CASE WHEN file_pattern = {seq} THEN 'disk_seq' WHEN file_pattern = {rand} THEN 'disk_random'
                    WHEN last_io_kind = 1 THEN 'disk_seq' WHEN last_io_kind = 2 THEN 'disk_random'
                    ELSE 'disk_unknown' END
          WHEN syscall IN {_in(NETWORK_SYSCALLS)} THEN 'network'
          WHEN syscall IN {_in(EPOLL_SYSCALLS)} AND socket_blocked THEN 'network'
          WHEN syscall IN {_in(EPOLL_SYSCALLS)} AND client_blocked THEN 'client_wait'
          WHEN syscall IN {_in(LOCK_SYSCALLS)} THEN 'lock_wait'
          ELSE 'other_wait'
        END"""


def attribute(db: CaptureDB, progress=None) -> None:
    """The table statement_attribution: every top-level statement's wall time in components that
    sum to it (and statement_io, seg_off_stack for the hot spots).
    progress(step) is called as each step begins."""
    step = progress or (lambda _: None)
    if db.has("kernel_event"):
        step("disk requests and file reads")
        build_disk_requests(db)
        build_file_reads(db)
        build_points(db)
        step("segments (state carried per pid)")
        build_segments(db)
    else:
        _create_seg_tables(db, "", "VARCHAR")
    step("statement I/O and CPU/disk splits")
    _build_statement_io(db)
    db.con.execute(sql_file("dbms_attribution"))
    # a literal: binding a Python parameter makes DuckDB import pandas (29 s once on a slow disk)
    db.con.execute(f"SET VARIABLE rusage_min_wall_ns = {int(RUSAGE_MIN_WALL_NS)}")
    db.con.execute(sql_file("own_attribution"))
    components = ", ".join(literal(c) for c in ATTRIBUTION_COMPONENTS)
    db.con.execute(f"SET VARIABLE components = [{components}]")
    db.con.execute(sql_file("statement_attribution"))


def _build_statement_io(db: CaptureDB) -> None:
    """statement_io: the model's inputs per statement (seg_io: its own block requests, the bytes its
    network syscalls moved), zero where the trace saw none."""
    db.con.execute("""
        CREATE OR REPLACE TABLE statement_io AS
        SELECT s.node, s.statement_id, coalesce(seq_bytes, 0) AS seq_bytes, coalesce(seq_reqs, 0) AS seq_reqs,
               coalesce(random_reqs, 0) AS random_reqs, coalesce(random_bytes, 0) AS random_bytes,
               coalesce(net_rx_bytes, 0) AS net_rx_bytes, coalesce(net_tx_bytes, 0) AS net_tx_bytes
        FROM statement_clean s LEFT JOIN seg_io USING (node, statement_id)""")
