"""The capture directory: the contract between the parts (see docs/capture.md).

One directory per run:
    manifest.json
    <table>/<node>-<part>.parquet      one or more parts per table and node

Every table has a `node` column; times are integer nanoseconds on the node's clock named in the
manifest (CLOCK_MONOTONIC unless it says otherwise)."""

from __future__ import annotations

import contextlib
import hashlib
import fcntl
import itertools
import json
import os
import re
import socket
import threading
import time
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mwinv import privfile
from mwinv.capture.columns import empty_table, table_from_rows
from mwinv.capture.manifest import check_manifest
from mwinv.errors import MwinvError

i32, i64, f64, s, b = pa.int32(), pa.int64(), pa.float64(), pa.string(), pa.bool_()

ATTRIBUTION_COMPONENTS = ("cpu_user", "cpu_sys", "disk_seq", "disk_random", "network", "remote_wait", "lock_wait",
                          "run_queue", "other_wait", "client_wait",
                          "not_allocated")
# The components of a statement attributed from its rusage alone (rusage_attribution)
RUSAGE_COMPONENTS = ("cpu_user", "cpu_sys", "client_wait", "not_allocated")


SCHEMAS: dict[str, pa.Schema] = {
    # DBMS side
    "statement": pa.schema([
        ("node", s), ("dbms", s), ("pid", i32), ("leader_pid", i32), ("statement_id", i64),
        ("parent_statement_id", i64), ("query_id", i64), ("query_text_hash", i64), ("database", s),
        ("username", s), ("start_ns", i64), ("end_ns", i64), ("start_wall_ns", i64),
        ("plan_ns", i64), ("parse_ns", i64), ("client_wait_ns", i64), ("cpu_user_ns", i64), ("cpu_sys_ns", i64), ("read_bytes", i64),
        ("write_bytes", i64), ("minflt", i64), ("majflt", i64), ("inblock", i64), ("oublock", i64),
        ("nvcsw", i64), ("nivcsw", i64), ("rows", i64), ("nesting_level", i32), ("errored", b),
    ]),
    "statement_text": pa.schema([("query_text_hash", i64), ("query_id", i64), ("text", s)]),
    # A DBMS session (connection) seen during the capture: who connected, e.g. a coordinator's backend
    # (postgres_fdw.application_name 'mwinv-fdw:<pid>') on a data node
    "session": pa.schema([
        ("node", s), ("pid", i32), ("application_name", s), ("client_addr", s), ("client_port", i32),
        ("backend_start_wall_ns", i64), ("first_seen_ns", i64),
    ]),
    # The DBMS's own account of a statement, where it keeps one (Oracle's extended SQL trace): its
    # database calls, its wait events (component: the attribution component the engine maps the event
    # to) and its plan's row source operations. statement_id: the execution the row belongs to (for a
    # wait between calls, the execution whose cursor it names); top_statement_id: its top-level
    # execution, the one a wait inside a call is attributed to. A call's sql_id and plh: its cursor's
    # SQL_ID and plan hash value, the identifiers tkprof shows.
    "dbms_call": pa.schema([
        ("node", s), ("pid", i32), ("file", s), ("line", i64), ("cursor", i64), ("call", s), ("dep", i32),
        ("statement_id", i64), ("top_statement_id", i64), ("start_ns", i64), ("end_ns", i64), ("c_ns", i64),
        ("e_ns", i64), ("p", i64), ("cr", i64), ("cu", i64), ("mis", i64), ("r", i64), ("og", i32),
        ("plh", i64), ("detail", s), ("binds", pa.list_(s)), ("sql_id", s),
    ]),
    "dbms_wait": pa.schema([
        ("node", s), ("pid", i32), ("file", s), ("line", i64), ("cursor", i64), ("event", s), ("component", s),
        ("ela_ns", i64), ("end_ns", i64), ("p1_name", s), ("p1", s), ("p2_name", s), ("p2", s), ("p3_name", s),
        ("p3", s), ("obj", i64), ("statement_id", i64), ("top_statement_id", i64), ("in_call", b),
        ("call_dep", i32),
    ]),
    "plan_operation": pa.schema([
        ("node", s), ("pid", i32), ("statement_id", i64), ("cursor", i64), ("plh", i64), ("id", i32),
        ("parent_id", i32), ("pos", i32), ("obj", i64), ("operation", s), ("cnt", i64), ("cr", i64), ("pr", i64),
        ("pw", i64), ("starts", i64), ("time_ns", i64), ("cost", i64), ("size", i64), ("card", i64),
    ]),
    # The DBMS's own counters of one statement, by name (MariaDB's rows_examined, created_tmp_disk_tables,
    # sort_merge_passes, no_index_used, lock_time_ns, ...)
    "statement_stat": pa.schema([("node", s), ("statement_id", i64), ("name", s), ("value", i64)]),
    # OS side
    "process": pa.schema([
        ("node", s), ("pid", i32), ("ppid", i32), ("comm", s), ("role", s), ("start_ns", i64),
        ("end_ns", i64),
    ]),
    "kernel_event": pa.schema([
        ("node", s), ("ts_ns", i64), ("cpu", i32), ("pid", i32), ("event", s),
        # sched_switch / sched_wakeup / fork / exit
        ("prev_pid", i32), ("prev_state", s), ("next_pid", i32), ("target_pid", i32),
        # block_rq_issue / block_rq_complete
        ("dev", s), ("sector", i64), ("nr_bytes", i64), ("rwbs", s),
        # sys_enter / sys_exit (syscall number and return value)
        ("syscall_nr", i32), ("syscall_ret", i64),
        ("stack_id", i64), ("fields", s),  # fields: the remaining fields as text, for other events
    ]),
    "kernel_stack": pa.schema([("node", s), ("stack_id", i64), ("frames", pa.list_(s))]),
    # the function tracer's entries (where the kernel allows it): a call of `function` from `parent`
    "kernel_function_call": pa.schema([("node", s), ("ts_ns", i64), ("cpu", i32), ("pid", i32), ("function", s),
                                       ("parent", s)]),
    # when the recorder had every event on (one window, or one per duty cycle: events off between)
    "trace_window": pa.schema([("node", s), ("lo", i64), ("hi", i64)]),
    # perf cpu-clock samples (kernel hot spots where the function tracer is not allowed)
    "cpu_sample": pa.schema([("node", s), ("ts_ns", i64), ("cpu", i32), ("pid", i32), ("stack_id", i64),
                             ("kernel", b)]),
    "node_sample": pa.schema([
        ("node", s), ("ts_ns", i64), ("interval_ns", i64), ("cpu_user_ns", i64), ("cpu_sys_ns", i64),
        ("cpu_iowait_ns", i64), ("cpu_idle_ns", i64), ("disk", s), ("read_bytes", i64), ("write_bytes", i64),
        ("read_reqs", i64), ("write_reqs", i64), ("seq_reqs", i64), ("nonseq_reqs", i64),
        ("avg_stride_sectors", f64), ("seq_source", s), ("net_iface", s), ("net_rx_bytes", i64),
        ("net_tx_bytes", i64), ("net_rx_packets", i64), ("net_tx_packets", i64),
    ]),
    "process_sample": pa.schema([
        ("node", s), ("pid", i32), ("ts_ns", i64), ("interval_ns", i64), ("utime_ns", i64), ("stime_ns", i64),
        ("read_bytes", i64), ("write_bytes", i64), ("run_ns", i64), ("runqueue_wait_ns", i64),
    ]),
    "tcp_sample": pa.schema([
        ("node", s), ("pid", i32), ("ts_ns", i64), ("local", s), ("peer", s), ("accepted", b),
        ("srtt_ns", i64), ("rttvar_ns", i64), ("min_rtt_ns", i64), ("bytes_acked", i64), ("bytes_received", i64),
        ("segs_out", i64), ("segs_in", i64), ("retrans", i64),
    ]),
    # Derived by the correlator
    # Its parts hold the rows of the statements whose rows are summed; a statement of its rusage alone is
    # stored as one row of rusage_attribution and read as its rows (COMPACT)
    "statement_attribution": pa.schema([
        ("node", s), ("statement_id", i64), ("query_id", i64), ("component", s), ("ns", i64),
        ("from_workers_ns", i64),
    ]),
    # A statement attributed from its rusage alone (no trace window covers it, no parallel worker, no DBMS
    # account; ~93 % of a duty-cycled capture's): its components' ns, every other component 0
    "rusage_attribution": pa.schema([
        ("node", s), ("statement_id", i64), ("query_id", i64),
        *[(f"{c}_ns", i64) for c in RUSAGE_COMPONENTS],
    ]),
    "statement_kernel_function": pa.schema([
        ("node", s), ("statement_id", i64), ("query_id", i64), ("function", s), ("stack", s),
        ("samples", i64), ("ns", i64), ("share", f64), ("source", s),
    ]),
    "statement_class": pa.schema([
        ("node", s), ("statement_id", i64), ("query_id", i64), ("limit", s), ("allocated_share", f64),
        ("confidence", f64), ("evidence", s),
    ]),
    "prediction": pa.schema([
        ("statement_id", i64), ("query_id", i64), ("what_if", s), ("factor", f64), ("predicted_ns", i64),
        ("measured_ns", i64),  # measured under the what-if (a checking re-run), null until then
        ("baseline_ns", i64),  # measured wall time of the captured run
    ]),
    # A statement run on a node for a statement of another node (postgres_fdw's cursor statements on a
    # data node for the coordinator's query); offset_ns: the node's clock minus the parent node's
    "statement_link": pa.schema([
        ("node", s), ("statement_id", i64), ("parent_node", s), ("parent_statement_id", i64),
        ("offset_ns", i64), ("offset_error_ns", i64),
    ]),
    # The statements a kernel trace window covers whole, attributed from the kernel's events (the rest:
    # from their rusage or their DBMS's own account); in a duty-cycled capture, a sample of them
    "traced_statement": pa.schema([("node", s), ("statement_id", i64)]),
    # Per statement x node I/O counts the model needs ([Taufer]'s response variables), from the correlator.
    "statement_io": pa.schema([
        ("node", s), ("statement_id", i64), ("seq_bytes", i64), ("seq_reqs", i64), ("random_reqs", i64),
        ("random_bytes", i64), ("net_rx_bytes", i64), ("net_tx_bytes", i64),
    ]),
    # [Taufer]'s Table 1 per statement: component times (max over nodes), estimate vs measured wall time.
    "statement_estimate": pa.schema([
        ("statement_id", i64), ("query_id", i64), ("t_cpu_ns", i64), ("t_seq_ns", i64), ("t_no_seq_ns", i64),
        ("t_net_ns", i64), ("estimated_ns", i64), ("measured_ns", i64), ("allocated_share", f64),
        ("error", f64), ("critical_node", s),
    ]),
    # What to change for a statement the terminal or the report shows (its query id's executions when
    # it is too short alone): one row per rule that fired, the model's expected gain where it can say
    "statement_advice": pa.schema([
        ("statement_id", i64), ("query_id", i64), ("rule", s), ("advice", s), ("evidence", s),
        ("expected_gain_ns", i64), ("basis", s),
    ]),
    # The statements the advice was derived for (a statement on which no rule fired has no advice row)
    "advised_statement": pa.schema([("statement_id", i64)]),
    # An advised coordinator statement's part on each data node (correlator/nodes.py): its remote
    # statements' count, fetches, rows and bytes sent, their execution by component, the node's idle
    # time between them, when its first part began and its last fetch ended (from the coordinator
    # statement's start, on the coordinator's clock), and whether it is the critical (last) node
    "statement_node_part": pa.schema([
        ("statement_id", i64), ("node", s), ("statements", i64), ("fetches", i64), ("rows", i64),
        ("sent_bytes", i64), ("execution_ns", i64), ("idle_ns", i64), ("first_start_ns", i64),
        ("last_end_ns", i64), ("critical", b),
        *[(f"{c}_ns", i64) for c in ATTRIBUTION_COMPONENTS],
    ]),
    # The disk's access time as the run saw it next to the calibrated one (model.DiskWaitCheck): a row
    # when enough short reads were measured
    "disk_wait_check": pa.schema([("requests", i64), ("observed_s", f64), ("calibrated_s", f64)]),
}

# Columns added to the format since its first version: a part of an older recorder lacks them (read
# as NULL); every other column is in every part.
NEWER_COLUMNS = ("parse_ns", "client_wait_ns", "baseline_ns")

# Tables the correlator derives (recomputed on every run, never read back as input).
DERIVED_TABLES = ("statement_attribution", "rusage_attribution", "statement_kernel_function", "statement_class", "prediction",
                  "statement_io", "statement_estimate", "statement_link", "traced_statement",
                  "statement_advice", "advised_statement", "statement_node_part", "disk_wait_check")
# A table whose rows are partly stored compactly in another: statement_attribution's rows of a statement of
# its rusage alone are one rusage_attribution row, up to 4 once read (rusage_rows). Written as they are read,
# they took 60 of 208 s of a 600 s pgbench capture's correlation (661 M rows)
COMPACT = {"statement_attribution": "rusage_attribution"}
# A part of such a table written with its rows so stored says so in its footer: one an older mwinv wrote
# has every row, and the compact parts of its name (left by a later mwinv's correlation) are stale
COMPACT_MARK = b"mwinv.compact"


def rusage_rows(relation: str, keys: tuple[str, ...] = ("node", "statement_id", "query_id")) -> str:
    """SQL: statement_attribution's rows of the statements in `relation` (rusage_attribution's columns), one
    per component of some time (of RUSAGE_COMPONENTS; none for one of 0, as in every part): the one
    expansion every reader of statement_attribution goes through (the correlation's session, a correlated
    capture's read back, Capture.read). A cross join with a table of the components, not an unnest of a
    list per statement: summed per component over 10.5 M statements in 0.28 s against 1.67 s, and a filter
    on the component or the statement reaches the statements' scan. `relation`: a table's name or a
    parenthesized query (its values through load's quoting helpers); `keys`: the columns kept (a relation
    of sums per query keeps its own)."""
    from mwinv.correlator.load import ident, literal

    ns = " ".join(f"WHEN {literal(c)} THEN {ident(c + '_ns')}" for c in RUSAGE_COMPONENTS)
    components = ", ".join(f"({literal(c)})" for c in RUSAGE_COMPONENTS)
    return (f"SELECT * FROM (SELECT {', '.join(map(ident, keys))}, component, CASE component {ns} END::BIGINT AS ns, "
            f"0::BIGINT AS from_workers_ns FROM {relation}, (VALUES {components}) AS c(component)) WHERE ns <> 0")


# Those derived from the attribution by the derivation step (correlator/derive.py): a new correlation
# makes them stale, and removes them.
FROM_ATTRIBUTION = ("statement_class", "prediction", "statement_estimate", "statement_advice",
                    "advised_statement", "statement_node_part", "disk_wait_check")

# Columns that grow with time, stored as deltas: a million pgbench statement records were written in 142
# ns each instead of 179 (the capture's reader writes them while the server runs), 6.7 bytes each on
# disk instead of 9.2, and read back by DuckDB in 9 ms instead of 23. The attribution's tables come out
# in statement slices, their ids near each other: a 600 s capture's rusage_attribution took 63.9 MiB
# instead of 72.0, statement_attribution 9.4 instead of 11.8, statement_io 4.3 instead of 6.0,
# traced_statement 0.7 instead of 3.3 (their writing times within this machine's noise)
DELTA_ENCODED = {"statement": ("statement_id", "start_ns", "end_ns", "start_wall_ns"),
                 **dict.fromkeys(("rusage_attribution", "statement_attribution", "statement_io", "traced_statement"),
                                 ("statement_id",))}
# written while the server is under load: lz4 wrote pgbench -S records in 107 ns each against zstd's
# 136, at the same size (6.8 bytes a record); the other tables keep zstd
CODEC = {"statement": "lz4"}


def text_hash(text: str) -> int:
    """A stable signed 64-bit hash of a query text (the `query_text_hash` key)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)


def conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """`data`'s columns in `schema`'s order and types, except that a dictionary-encoded string column
    stays encoded (Parquet stores it as strings with its dictionary; casting would copy every value)."""
    columns, fields = [], []
    for f in schema:
        col = data[f.name]
        if col.type != f.type and not (pa.types.is_dictionary(col.type) and col.type.value_type == f.type == pa.string()):
            col = col.cast(f.type)
        columns.append(col)
        fields.append(pa.field(f.name, col.type))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _type_kind(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "list of " + _type_kind(t.value_type)
    for kind, test in (("string", pa.types.is_string), ("string", pa.types.is_large_string),
                       ("integer", pa.types.is_integer), ("number", pa.types.is_floating),
                       ("boolean", pa.types.is_boolean), ("null", pa.types.is_null)):
        if test(t):
            return kind
    return str(t)


def _check_types(path: Path, got: pa.Schema, want: pa.Schema) -> None:
    """A column of a part whose type is not its schema's (an integer column is a number too), or one
    missing that every recorder wrote, or one missing next to one the table lacks (a name corrupted
    in the footer, a part of another table)."""
    missing = [n for n in want.names if n not in got.names]
    unknown = [n for n in got.names if n not in want.names]
    if missing and (unknown or any(n not in NEWER_COLUMNS for n in missing)):
        raise MwinvError(f"{path}: no column {missing[0]}"
                         + (f" (but a column {unknown[0]}, not one of the table's)" if unknown else ""))
    for f in want:
        if f.name in got.names:
            have, need = _type_kind(got.field(f.name).type), _type_kind(f.type)
            if have != need and have != "null" and not (have == "integer" and need == "number"):
                raise MwinvError(f"{path}: column {f.name} holds {have} values, expected {need}")


@contextlib.contextmanager
def unreadable(path: Path):
    """A part Arrow cannot read (corrupt pages, a checksum that does not match, a value that does not
    fit its column): a one-line error naming it."""
    try:
        yield
    except (pa.ArrowException, OSError, ValueError) as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise MwinvError(f"{path}: unreadable Parquet part ({why})") from None


def _open(path: Path) -> pq.ParquetFile:
    """A part with its pages' checksums verified on read and its footer checked: no checksum covers
    the footer, and zeroed bytes in it end its Thrift struct early, which Arrow read as a part of no
    rows (a footer of 692 bytes decoded as 57, its row groups lost)."""
    f = pq.ParquetFile(path, page_checksum_verification=True)
    md = f.metadata
    with open(path, "rb") as fh:
        fh.seek(-8, os.SEEK_END)
        length = int.from_bytes(fh.read(4), "little")
    if md.serialized_size != length:
        raise MwinvError(f"{path}: corrupt Parquet footer ({md.serialized_size} of its {length} bytes decoded)")
    rows = sum(md.row_group(i).num_rows for i in range(md.num_row_groups))
    if rows != md.num_rows:
        raise MwinvError(f"{path}: corrupt Parquet footer ({md.num_rows} rows, its row groups hold {rows})")
    return f


# A part's seal: the CRC-32 and size of its bytes as written, in `<part>.crc` beside it. Its pages were
# checksummed as they were written, and any byte changed since (a page, its header, the footer) changes the
# CRC, so a part that still matches its seal needs no read page by page; one without a seal, or that does
# not match it, is read through, which names what is wrong. A 600 s capture's 55 parts (434 MB): read
# through in 8.1 s, their CRCs in 0.4 s.
def _seal_path(part: Path) -> Path:
    return part.with_name(part.name + ".crc")


def _crc(path: Path) -> tuple[int, int]:
    crc = size = 0
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as fh:
        while chunk := fh.read(1 << 23):
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
    return crc, size


def _seal(part: Path) -> None:
    crc, size = _crc(part)
    privfile.write(_seal_path(part), f"{crc:08x} {size}\n")


def _sealed(part: Path) -> bool:
    """Whether the part's bytes are those its seal recorded (no seal, or an unreadable one: no)."""
    try:
        with os.fdopen(os.open(_seal_path(part), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as fh:
            crc, size = fh.read(64).split()
        want = (int(crc, 16), int(size))
    except (OSError, ValueError):
        return False
    return os.stat(part, follow_symlinks=False).st_size == want[1] and _crc(part) == want


def _check_part(path: Path, schema: pa.Schema) -> None:
    with unreadable(path):
        f = _open(path)
        _check_types(path, f.schema_arrow, schema)
        if _sealed(path):
            return
        # the parts are in threads; batches of 256 k rows: a dictionary column of ~200 k texts per row group
        # (kernel_event's fields) is sliced per batch, and the 600 s capture's parts took 7.6 s at 64 k rows,
        # 5.8 s at 256 k (1 M: 5.8 s, 220 MiB more)
        for _ in f.iter_batches(batch_size=1 << 18, use_threads=False):
            pass


_MIXED = object()   # a column of more than one value (one_valued)


def one_valued(parts: list[Path], names: list[str]) -> dict[str, object] | None:
    """The columns of `names` that hold one value in every row of `parts` (None: NULL in all, as in a
    part without the column), read from the row groups' statistics in the footers (a 600 s capture's 25
    statement parts in 0.03 s, against 3.3 s to scan every column for its minimum and maximum); None when
    a row group has no statistics for one of them (the caller scans them)."""
    seen: dict[str, object] = {}

    def meet(name: str, value: object) -> None:
        seen[name] = value if seen.get(name, value) == value else _MIXED

    for p in parts:
        with unreadable(p):
            md = pq.read_metadata(p)
        index = {md.schema.column(i).name: i for i in range(md.num_columns)}
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            if not rg.num_rows:
                continue
            for name in names:
                if name not in index:
                    meet(name, None)
                    continue
                st = rg.column(index[name]).statistics
                if st is None or not st.has_null_count:
                    return None
                if st.null_count == rg.num_rows:
                    meet(name, None)
                elif not st.has_min_max:
                    return None
                else:   # a NULL beside a value, or two values, are two
                    meet(name, st.min if st.null_count == 0 and st.min == st.max else _MIXED)
    return {n: seen.get(n) for n in names if seen.get(n) is not _MIXED}


def _marked(p: Path) -> bool:
    """A part written with its table's compact rows apart (COMPACT_MARK)."""
    with unreadable(p):
        return COMPACT_MARK in (pq.read_schema(p).metadata or {})


def _next_part(d: Path, prefix: str) -> Path:
    # the node's own parts: a name with glob characters or another node's prefix matched others
    n = sum(1 for p in d.iterdir() if re.fullmatch(re.escape(prefix) + r"-\d{5}\.parquet", p.name))
    return d / f"{prefix}-{n:05d}.parquet"


def node_name() -> str:
    return os.environ.get("MWINV_NODE", socket.gethostname())


class Capture:
    """A capture directory: write parts of tables, read whole tables, keep the manifest."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def create(self, **manifest) -> "Capture":
        privfile.make_dir(self.path)
        with self._manifest_lock():
            m = {"format": "mwinv-capture", "version": 1, "created_wall_ns": time.time_ns(), "nodes": {},
                 **self.manifest(), **manifest}
            self.write_manifest(m)
        return self

    @contextlib.contextmanager
    def _manifest_lock(self):
        """Several writers (one per node of a cluster capture) update one manifest: read-modify-write
        under an exclusive lock."""
        with privfile.append(self.path / ".manifest.lock") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    # ---- manifest
    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    def manifest(self) -> dict:
        if not self.manifest_path.exists():
            return {}
        try:
            return check_manifest(json.loads(self.manifest_path.read_text()), self.manifest_path)
        except json.JSONDecodeError as exc:
            raise MwinvError(f"{self.manifest_path}: line {exc.lineno}: invalid JSON ({exc.msg})") from None
        except UnicodeDecodeError as exc:
            raise MwinvError(f"{self.manifest_path}: byte {exc.start}: not UTF-8 text") from None
        except OSError as exc:
            raise MwinvError(f"{self.manifest_path}: cannot read ({exc.strerror})") from None

    def write_manifest(self, m: dict) -> None:
        with privfile.replacing(self.manifest_path, binary=False, tmp=self.manifest_path.with_suffix(".tmp")) as f:
            f.write(json.dumps(m, indent=2, sort_keys=True, default=str))

    def update_manifest(self, **changes) -> dict:
        with self._manifest_lock():
            m = self.manifest()
            for k, v in changes.items():
                if isinstance(v, dict) and isinstance(m.get(k), dict):
                    m[k] = {**m[k], **v}
                else:
                    m[k] = v
            self.write_manifest(m)
        return m

    # ---- tables
    def table_dir(self, table: str) -> Path:
        if table not in SCHEMAS:
            raise MwinvError(f"unknown capture table {table!r}")
        return self.path / table

    def write_part(self, table: str, data: pa.Table | pa.RecordBatchReader | list[dict] | dict,
                   node: str | None = None) -> Path:
        """Write one part of `table` (typed by SCHEMAS); parts are never rewritten. A record batch
        reader is written batch by batch, so a large derived table is never whole in memory."""
        schema = SCHEMAS[table]
        if table in COMPACT:
            schema = schema.with_metadata({COMPACT_MARK: COMPACT[table].encode()})
        if isinstance(data, list):
            data = table_from_rows(data, schema)
        elif isinstance(data, dict):
            data = pa.Table.from_pydict(data, schema=schema)
        elif isinstance(data, pa.Table):
            data = conform(data, schema)
        d = self.table_dir(table)
        privfile.make_dir(d)
        path = _next_part(d, node or node_name())
        # dictionaries only where values repeat (names): tried on every column, they cost a quarter of
        # the writing time of a million statement records and made the file larger
        # page checksums: a corrupt page is found on reading (Capture.check), not read as other values
        options = {"compression": CODEC.get(table, "zstd"), "write_page_checksum": True,
                   "use_dictionary": [f.name for f in schema if pa.types.is_string(f.type)]}
        if delta := [c for c in DELTA_ENCODED.get(table, ()) if c in schema.names]:
            options["column_encoding"] = dict.fromkeys(delta, "DELTA_BINARY_PACKED")
        with privfile.replacing(path, tmp=path.with_suffix(".tmp")) as f:
            if isinstance(data, pa.RecordBatchReader):
                with pq.ParquetWriter(f, schema, **options) as writer:
                    for batch in data:
                        writer.write_table(conform(pa.Table.from_batches([batch]), schema).cast(schema))
            else:
                pq.write_table(data.replace_schema_metadata(schema.metadata), f, **options)
        _seal(path)
        return path

    def take_parts(self, other: "Capture") -> None:
        """Every part of `other` (written aside, to be added all or not at all) moved into this capture,
        after this one's parts of the same node."""
        for table in SCHEMAS:
            for p in other.parts(table):
                d = self.table_dir(table)
                privfile.make_dir(d)
                to = _next_part(d, p.name.rsplit("-", 1)[0])
                os.replace(p, to)
                if _seal_path(p).exists():
                    os.replace(_seal_path(p), _seal_path(to))

    @staticmethod
    def remove_part(part: Path) -> None:
        """A part gone, and its seal."""
        part.unlink()
        _seal_path(part).unlink(missing_ok=True)

    def parts(self, table: str) -> list[Path]:
        d = self.table_dir(table)
        found = sorted(d.glob("*.parquet")) if d.exists() else []
        for full in (t for t, compact in COMPACT.items() if compact == table and found):
            # an older mwinv's correlation (every row, no mark) supersedes the compact parts of its name
            older = {p.name.rsplit("-", 1)[0] for p in self.parts(full) if not _marked(p)}
            found = [p for p in found if p.name.rsplit("-", 1)[0] not in older]
        return found

    def has(self, table: str) -> bool:
        return bool(self.parts(table)) or (table in COMPACT and self.has(COMPACT[table]))

    def read(self, table: str) -> pa.Table:
        """Every row of `table`, those stored compactly (COMPACT) too."""
        parts = self.parts(table)
        rows = [self._read_part(p, table) for p in parts]
        if table in COMPACT and (compact := self.parts(COMPACT[table])):
            import duckdb

            from mwinv.correlator.load import read_parquet

            self.check(COMPACT[table])
            query = rusage_rows(f"(SELECT * FROM {read_parquet(compact)})")
            rows.append(duckdb.connect().execute(query).to_arrow_table().cast(SCHEMAS[table]))
        return pa.concat_tables(rows) if rows else empty_table(SCHEMAS[table])

    def _read_part(self, p: Path, table: str) -> pa.Table:
        """One part in its table's schema (a column an older recorder did not write: NULL)."""
        schema = SCHEMAS[table]
        with unreadable(p):
            t = _open(p).read()
            _check_types(p, t.schema, schema)
            return pa.Table.from_arrays([t[f.name].cast(f.type) if f.name in t.column_names
                                         else pa.nulls(t.num_rows, f.type) for f in schema], schema=schema)

    def check(self, *tables: str) -> None:
        """Every part of `tables` checked once: its footer and its columns' types, and its pages' checksums
        (read through) unless its bytes match its seal (_seal_path): DuckDB verifies no checksum (a flipped
        bit changed a sum silently) and a column of another type turned a query's comparison into a string
        one. A bad part: a one-line error, the first bad one in the order of the tables and their parts.
        Reading parts through runs in threads (Arrow's reader releases the GIL): a 600 s capture's 60 M
        statements and 52 M kernel events in 4.9 s on 2 cores, 7.0-7.3 s one part at a time."""
        todo = [(p, SCHEMAS[t]) for t in tables for p in self.parts(t)]
        taken, failed = itertools.count(), []

        def work() -> None:
            i = -1
            try:
                while not failed and (i := next(taken)) < len(todo):
                    _check_part(*todo[i])
            except BaseException as exc:   # Ctrl-C too: the other threads stop at their next part
                failed.append((i, exc))
            finally:   # Arrow's mimalloc keeps the pages a thread read into (234 MiB of a 120 s capture's)
                pa.default_memory_pool().release_unused()

        # each thread holds a row group's batch: 4 threads peaked at 907 MiB on the 600 s capture
        threads = [threading.Thread(target=work) for _ in range(min(len(os.sched_getaffinity(0)), 4) - 1)]
        for t in threads:
            t.start()
        work()
        for t in threads:
            t.join()
        if failed:   # every part before the first bad one was taken, hence checked
            raise min(failed, key=lambda f: f[0])[1]

    def glob(self, table: str) -> str:
        """A glob DuckDB's read_parquet() takes."""
        return str(self.table_dir(table) / "*.parquet")
