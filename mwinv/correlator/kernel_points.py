"""The segment walk's points from kernel events, streamed from kernel_event's parts: per time slice, those
of the DBMS pids (dbms_pid), as numpy columns. What an event is, sql/point_kind.sql says (event_kind,
point_ord); here its columns are placed: a switch gives two points, the task switched out ('off', with
its state and stack) and the one switched in ('on'), a wakeup is its target's, an entry or exit carries
its syscall number, an exit its return value.

A part holds its node's events in time order, in row groups of about a million (the recorder's), each
with its time range in the part's statistics. Each row group is decoded once, when the first slice it
overlaps is read, and its points kept until the walk is past it: DuckDB's scan of kernel_event for each
slice of a 600 s pgbench capture decoded every row group again for each of the ~2 slices it overlaps and
took 0.27 s of the 0.43 s a slice's read took (one slice's EXPLAIN ANALYZE; ~18.6 s over its 69 slices
at that rate); Arrow decodes its 41.7 M events once in 2.0 s."""

from __future__ import annotations

import ctypes
import functools
import threading
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mwinv.capture.tables import unreadable
from mwinv.correlator.load import ident, literal
from mwinv.errors import MwinvError
from mwinv.native import compiled

# the event columns the points take, with the value each takes where it is null (or its part lacks it; never
# ts_ns's: an event without a time gives no point), and the label columns, in kernelpoints.c's order
COLUMNS = {"ts_ns": 0, "pid": -1, "prev_pid": -1, "next_pid": -1, "target_pid": -1, "stack_id": -1,
           "syscall_nr": -1, "syscall_ret": 0}
LABELS = ("node", "event", "prev_state")
# the points' columns, in kernelpoints.c's order (attribution._read_slice's, but sid and the in-flight
# counts, which no event has)
POINT_COLUMNS = {"node": np.int32, "pid": np.int64, "ts": np.int64, "ord": np.int64, "kind": np.int32,
                 "info": np.int32, "stack_id": np.int64, "nr": np.int64, "ret": np.int64}


class KernelPoints:
    """The kernel points of one walk, slice after slice in time order (read(lo, hi)). con: a cursor of
    the session's of its own (closed by close()), kinds: the walk's point kinds (attribution.POINT_KINDS),
    nodes and infos: the labels whose codes the points hold."""

    def __init__(self, con, parts: list[Path], kinds: tuple[str, ...], nodes: list[str], infos: list[str]):
        self.con, self.kinds = con, kinds
        self.nodes = {n: i for i, n in enumerate(nodes)}
        self.infos = {v: i for i, v in enumerate(infos)}
        self.event_kinds: dict[str, int] = {}
        self.switch = len(kinds)   # event_kind's 'switch': two points
        ords = dict(con.execute(_over_values("point_ord", kinds)).fetchall())
        self.ords = np.array([ords[k] for k in kinds], np.int64)
        # a statement without a pid (a slow query log's) has no task to follow
        pids = con.execute("SELECT node, pid FROM dbms_pid WHERE pid IS NOT NULL").fetchall()
        self.pids = np.unique(np.array([self.nodes[n] << 32 | p for n, p in pids if n in self.nodes], np.int64))
        self.codes = _Kinds(*[kinds.index(k) for k in ("on", "off", "wake", "enter", "exit")], self.switch,
                            self.ords.ctypes.data, self.pids.ctypes.data, len(self.pids))
        self.groups = []
        for path in parts:
            with unreadable(path):
                md = pq.read_metadata(path)
            self.groups += [(path, i, *_time_range(md.row_group(i))) for i in range(md.num_row_groups)]
        # by row group: its last ts, and its points and whether they are in time order (_decoded) once read
        self.kept: dict[tuple[Path, int], tuple[int, Future]] = {}
        self.lock = threading.Lock()

    def read(self, lo: int | None, hi: int | None) -> list[dict[str, np.ndarray]]:
        """The points in [lo, hi) (None: open-ended), per row group, each in its events' order. Slices
        may be read at once, in threads; a row group is decoded by the first that needs it."""
        got = []
        for path, i, first, last in self.groups:
            if (lo is not None and last is not None and last < lo) or (hi is not None and first is not None
                                                                       and first >= hi):
                continue
            points, ordered = self._group(path, i, last)
            ts = points["ts"]
            if ordered:   # the recorder's parts: a slice's points are a range of them
                a, b = (np.searchsorted(ts, v) if v is not None else d for v, d in ((lo, 0), (hi, len(ts))))
                got.append({c: v[a:b] for c, v in points.items()})
            else:
                inside = np.ones(len(ts), bool)
                if lo is not None:
                    inside &= ts >= lo
                if hi is not None:
                    inside &= ts < hi
                got.append({c: v[inside] for c, v in points.items()})
        return got

    def walked(self, until: int | None) -> None:
        """The walk has read every slice before `until` (None: all of them): the row groups that end
        before it are dropped."""
        with self.lock:
            for key in [k for k, (last, _) in self.kept.items() if until is None or last < until]:
                del self.kept[key]

    def _group(self, path: Path, i: int, last: int | None) -> tuple[dict[str, np.ndarray], bool]:
        """A row group's points and whether they are in time order, decoded once while kept (a row
        group without statistics is decoded for every slice)."""
        if last is None:
            return self._decoded(path, i)
        with self.lock:
            entry = self.kept.get((path, i))
            if entry is None:
                entry = self.kept[path, i] = (last, Future())
                mine = True
            else:
                mine = False
        if mine:
            try:
                entry[1].set_result(self._decoded(path, i))
            except BaseException as exc:
                entry[1].set_exception(exc)
        return entry[1].result()

    def _decoded(self, path: Path, i: int) -> tuple[dict[str, np.ndarray], bool]:
        points = self._points(path, i)
        ts = points["ts"]
        return points, bool((ts[1:] >= ts[:-1]).all())

    def _points(self, path: Path, i: int) -> dict[str, np.ndarray]:
        """The points of one row group (kernelpoints.c)."""
        with unreadable(path):
            f = pq.ParquetFile(path)
            t = f.read_row_group(i, columns=[c for c in (*LABELS, *COLUMNS) if c in f.schema_arrow.names])
        keep = []   # the arrays the C reads stay alive until it is done
        columns = (_Column * len(COLUMNS))(*[_column(t, c, null, keep) for c, null in COLUMNS.items()])
        dictionaries = {c: _dictionary(_array(t, c)) for c in LABELS if c in t.column_names}
        if "event" in dictionaries:
            self._event_kinds(dictionaries["event"].dictionary.to_pylist())
        labels = (_Labels * len(LABELS))(*[_labels(dictionaries.get(c), t.num_rows, codes, keep) for c, codes in zip(
            LABELS, (self.nodes, self.event_kinds, self.infos))])
        lib = _lib()
        n = lib.kernel_points(t.num_rows, columns, labels, ctypes.byref(self.codes), None)
        points = {c: np.empty(n, dtype) for c, dtype in POINT_COLUMNS.items()}
        lib.kernel_points(t.num_rows, columns, labels, ctypes.byref(self.codes),
                          (ctypes.c_void_p * len(points))(*[v.ctypes.data for v in points.values()]))
        return points

    def _event_kinds(self, names: list[str | None]) -> None:
        """event_kind of every event name not seen before, as a point kind code (self.switch: a switch,
        -1: no point)."""
        with self.lock:
            new = sorted({n for n in names if n is not None} - set(self.event_kinds))
            if new:
                kinds = self.con.execute(_over_values("event_kind", new)).fetchall()
                self.event_kinds.update({e: -1 if k is None else self.switch if k == "switch" else
                                         self.kinds.index(k) for e, k in kinds})

    def close(self) -> None:
        self.con.close()
        self.kept.clear()


class _Column(ctypes.Structure):
    """kernelpoints.c's Column."""
    _fields_ = [("values", ctypes.c_void_p), ("valid", ctypes.c_void_p), ("offset", ctypes.c_int64),
                ("width", ctypes.c_int64), ("null_value", ctypes.c_int64)]


class _Labels(ctypes.Structure):
    """kernelpoints.c's Labels."""
    _fields_ = [("idx", _Column), ("codes", ctypes.c_void_p)]


class _Kinds(ctypes.Structure):
    """kernelpoints.c's Kinds."""
    _fields_ = [(f, ctypes.c_int32) for f in ("on", "off", "wake", "enter", "exit", "sw")] + \
        [("ords", ctypes.c_void_p), ("pids", ctypes.c_void_p), ("n_pids", ctypes.c_int64)]


@functools.cache
def _lib() -> ctypes.CDLL:
    lib = compiled(Path(__file__).with_name("kernelpoints.c"), "the correlator's kernel points")
    lib.kernel_points.restype = ctypes.c_int64
    lib.kernel_points.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def _array(t: pa.Table, column: str) -> pa.Array:
    c = t[column]
    return c.chunk(0) if c.num_chunks == 1 else c.combine_chunks()


def _column(t: pa.Table, column: str, null: int, keep: list) -> _Column:
    """An integer column for the C (all nulls where the part lacks it)."""
    a = _array(t, column) if column in t.column_names else pa.nulls(t.num_rows, pa.int64())
    if not pa.types.is_integer(a.type):
        raise MwinvError(f"kernel_event's {column}: {a.type}, not an integer")
    return _column_of(a, null, keep)


def _column_of(a: pa.Array, null: int, keep: list) -> _Column:
    if pa.types.is_unsigned_integer(a.type):   # the C reads signed values
        a = a.cast(pa.int64())
    keep.append(a)
    valid, values = a.buffers()[:2]
    return _Column(values.address if values is not None else None, valid.address if valid is not None else None,
                   a.offset, a.type.bit_width // 8, null)


def _labels(d: pa.DictionaryArray | None, n: int, codes: dict[str, int], keep: list) -> _Labels:
    """A label column's indices and its dictionary's codes for the C (None: a part without it, all null)."""
    indices, names = (d.indices, d.dictionary.to_pylist()) if d is not None else (pa.nulls(n, pa.int32()), [])
    lookup = np.array([codes.get(v, -1) for v in names] + [-1], np.int32)
    keep.append(lookup)
    return _Labels(_column_of(indices, -1, keep), lookup.ctypes.data)


def _over_values(macro: str, values) -> str:
    """A query of (value, macro(value)) over these values (the names through the one quoting helper)."""
    return f"SELECT v, {ident(macro)}(v) FROM (VALUES " + ", ".join(f"({literal(v)})" for v in values) + ") t(v)"


def _dictionary(chunk: pa.Array) -> pa.DictionaryArray:
    return chunk if pa.types.is_dictionary(chunk.type) else pc.dictionary_encode(chunk)


def _time_range(rg: pq.RowGroupMetaData) -> tuple[int | None, int | None]:
    """A row group's first and last ts_ns (None, None: its part has no statistics of them)."""
    for j in range(rg.num_columns):
        c = rg.column(j)
        if c.path_in_schema == "ts_ns" and c.statistics is not None and c.statistics.has_min_max:
            return int(c.statistics.min), int(c.statistics.max)
    return None, None
