"""The extension's raw statement records (numpy, in its own layout: mwinv_record_layout()) as the
capture tables `statement` and `statement_text`, built from buffers (reader.py takes the records)."""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mwinv.capture.columns import coded_strings, int_array
from mwinv.capture.tables import SCHEMAS, Capture, text_hash

DBMS = "postgresql"

# a raw record's fields -> their numpy type (the extension gives offsets and sizes: mwinv_record_layout())
_FIELD_TYPES = {"pid": np.int32, "leader_pid": np.int32, "nesting_level": np.int32, "dbid": np.uint32,
                "userid": np.uint32, "errored": np.bool_, "has_resources": np.bool_, "utility": np.bool_}
TRANSPOSE_BLOCK = 4096   # records per block of the transpose (~790 KB of slots; 34 ns a record measured at it)
_RESOURCES = ("cpu_user_ns", "cpu_sys_ns", "minflt", "majflt", "inblock", "oublock", "nvcsw", "nivcsw")


def record_dtype(layout: list[tuple[str, int, int]]) -> np.dtype:
    """The numpy type of one record from the extension's layout rows (field, offset, size; the row
    without a field name gives the record's size)."""
    fields = [(name, off) for name, off, _ in layout if name]
    return np.dtype({"names": [n for n, _ in fields], "formats": [_FIELD_TYPES.get(n, np.int64) for n, _ in fields],
                     "offsets": [off for _, off in fields],
                     "itemsize": next(size for name, _, size in layout if not name)})


def _fields(recs: np.ndarray) -> dict[str, np.ndarray]:
    """Each field of the records as a column of its own (strided by 8 bytes at most). The records'
    8-byte words are transposed in blocks first: copying each field out of the ~190-byte records passes
    over all of them once per field, 134 ns a record for the 28 fields, the blocked transpose 34 ns."""
    dt, n = recs.dtype, len(recs)
    if not n:
        return {name: np.empty(0, dt.fields[name][0]) for name in dt.names}
    offsets = {name: dt.fields[name][1] for name in dt.names}
    lo = min(offsets.values()) // 8 * 8
    hi = max(off + dt.fields[name][0].itemsize for name, off in offsets.items())
    k = -(-(hi - lo) // 8)
    words = np.ndarray((n, k), np.uint64, recs, lo, (dt.itemsize, 8))
    out = np.empty((k, n), np.uint64)
    for i in range(0, n, TRANSPOSE_BLOCK):
        out[:, i:i + TRANSPOSE_BLOCK] = words[i:i + TRANSPOSE_BLOCK].T
    return {name: np.ndarray((n,), dt.fields[name][0], out, (off - lo) // 8 * 8 * n + (off - lo) % 8, (8,))
            for name, off in offsets.items()}


_NULLS: dict[pa.DataType, pa.Array] = {}


def _nulls(type_: pa.DataType, n: int) -> pa.Array:
    """n nulls: a slice of one array kept per type (pa.nulls zeroes fresh memory each time, and the
    kernel faulted it in: a fifth of the drain thread's page faults under pgbench -S)."""
    if type_ not in _NULLS or len(_NULLS[type_]) < n:
        _NULLS[type_] = pa.nulls(max(n, 2**16), type_)
    return _NULLS[type_].slice(0, n)


def _bits(valid: np.ndarray | None) -> pa.Buffer | None:
    return None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


def _array(values: np.ndarray, type_: pa.DataType, bits: pa.Buffer | None = None) -> pa.Array:
    """An Arrow array from buffers, null where `bits` (a validity bitmap) says so (pa.array on a strided
    field cost 58 ms per million values; on numpy or Python values it imports pandas: 0.2 s)."""
    if pa.types.is_boolean(type_):
        return pa.Array.from_buffers(type_, len(values), [bits, pa.py_buffer(np.packbits(values, bitorder="little"))])
    data = np.ascontiguousarray(values, dtype=type_.to_pandas_dtype())
    return pa.Array.from_buffers(type_, len(data), [bits, pa.py_buffer(data)])


class RecordConverter:
    """Records -> rows of `statement` (and the texts of query ids this capture does not have yet).
    `texts(query_ids)` gives {query id: text} for the ids it knows; `names(kind, oids)` {oid: name} of
    databases ('database') or roles ('username'). With since_ns, records of statements that ended
    before it are left out and counted (the ring also holds what ran before a capture began)."""

    def __init__(self, capture: Capture, node: str, texts: Callable[[list[int]], dict[int, str]],
                 names: Callable[[str, list[int]], dict[int, str | None]], since_ns: int | None = None):
        self.capture, self.node, self.since_ns = capture, node, since_ns
        self._texts, self._lookup = texts, names
        self.before = 0
        self._lock = threading.Lock()
        self.names: dict[str, dict[int, str | None]] = {"database": {}, "username": {}}
        self.hashes: dict[int, int] = {}
        if capture.has("statement_text"):
            t = capture.read("statement_text")
            self.hashes = dict(zip(t.column("query_id").to_pylist(), t.column("query_text_hash").to_pylist()))

    def convert(self, recs: np.ndarray) -> tuple[pa.Table, list[dict]]:
        # one batch at a time: a spool's files are converted in the writer thread while the drain thread
        # may convert what a restarted server's ring gives through SQL (a new query id's text once)
        with self._lock:
            return self._convert(recs)

    def _convert(self, recs: np.ndarray) -> tuple[pa.Table, list[dict]]:
        # (only when some record is older: filtering copies every field)
        if self.since_ns is not None and len(recs) and recs["end_ns"].min() < self.since_ns:
            keep = recs["end_ns"] >= self.since_ns
            self.before += len(recs) - int(keep.sum())
            recs = recs[keep]
        records = self._table(recs)
        query_ids = records.column("query_id")
        new_ids = {q for q in pc.unique(query_ids).to_pylist() if q is not None} - self.hashes.keys()
        texts = []
        for query_id, text in (self._texts(sorted(new_ids)) if new_ids else {}).items():
            h = text_hash(text)
            self.hashes[query_id] = h
            texts.append({"query_text_hash": h, "query_id": query_id, "text": text})
        n = records.num_rows
        # (from buffers: pa.array imports pandas, 0.2 s)
        known = int_array(np.fromiter(self.hashes, np.int64, len(self.hashes)))
        hashes = pc.take(int_array(np.fromiter(self.hashes.values(), np.int64, len(self.hashes))),
                         pc.index_in(query_ids, known))
        records = (records.append_column("node", coded_strings(np.zeros(n, np.int32), [self.node]))
                   .append_column("dbms", coded_strings(np.zeros(n, np.int32), [DBMS]))
                   .append_column("query_text_hash", hashes))
        return records, texts

    def _table(self, recs: np.ndarray) -> pa.Table:
        """Raw records as the `statement` table's columns (without node, dbms, text hash): NULL where the
        extension's record says 'none' (0 ids, negative times, no resources measured)."""
        schema = SCHEMAS["statement"]
        r = _fields(recs)
        res = r["has_resources"]

        def col(name, valid=None):
            return _array(r[name], schema.field(name).type, _bits(valid))

        if res.any():   # (a cheap statement has none: below mwinv.resource_min_cost)
            io = _bits(res & (r["read_bytes"] >= 0))
            res_bits = _bits(res)
            measured = {c: _array(r[c], schema.field(c).type, res_bits) for c in _RESOURCES}
            measured.update({c: _array(r[c], schema.field(c).type, io) for c in ("read_bytes", "write_bytes")})
        else:
            measured = {c: _nulls(schema.field(c).type, len(recs)) for c in (*_RESOURCES, "read_bytes", "write_bytes")}
        cols = {
            "statement_id": col("statement_id"),
            "parent_statement_id": col("parent_statement_id", r["parent_statement_id"] != 0),
            "query_id": col("query_id", r["query_id"] != 0),
            "pid": col("pid"),
            "leader_pid": col("leader_pid", r["leader_pid"] != 0),
            "database": self._names("database", r["dbid"]),
            "username": self._names("username", r["userid"]),
            **{c: col(c) for c in ("start_ns", "end_ns", "start_wall_ns", "client_wait_ns", "rows")},
            "plan_ns": col("plan_ns", r["plan_ns"] >= 0),
            "parse_ns": col("parse_ns", r["parse_ns"] >= 0),
            **measured,
            "nesting_level": col("nesting_level"),
            "errored": col("errored"),
        }
        return pa.table(cols)

    def _names(self, kind: str, oids: np.ndarray) -> pa.Array:
        """Database or role names of the records' oids (looked up once per oid and capture), as a
        dictionary column: the Parquet writer hashed each value of a plain one, 12 ns a record."""
        known = self.names[kind]
        uniq = oids[:1] if len(oids) and (oids == oids[0]).all() else np.unique(oids)   # one sort less, usually
        if new := [int(o) for o in uniq if int(o) not in known]:
            found = self._lookup(kind, new)
            known.update({o: found.get(o) for o in new})
        names = [known[int(o)] for o in uniq]
        codes = np.zeros(len(oids), np.int32) if len(uniq) == 1 else np.searchsorted(uniq, oids).astype(np.int32)
        if None in names:   # an oid gone before it was looked up: NULL (a code < 0), not a null in the dictionary
            codes = np.where(np.array([n is None for n in names])[codes], -1, codes)
        return coded_strings(codes, [n or "" for n in names])

    def write(self, records: pa.Table | list[pa.Table], texts: list[dict]) -> int:
        if texts:
            self.capture.write_part("statement_text", texts, node=self.node)
        tables = [t for t in (records if isinstance(records, list) else [records]) if t.num_rows]
        if tables:
            self.capture.write_part("statement", pa.concat_tables(tables), node=self.node)
        return sum(t.num_rows for t in tables)
