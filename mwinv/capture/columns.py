"""numpy -> Arrow columns built from buffers. pa.array() of a Python list (and DictionaryArray.from_arrays)
imports pandas, which takes seconds; these do not."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mwinv.errors import MwinvError

_ARROW_TYPES = {np.dtype(np.int64): pa.int64(), np.dtype(np.int32): pa.int32(), np.dtype(np.float64): pa.float64()}
_NUMPY_TYPES = {pa.int64(): np.int64, pa.int32(): np.int32, pa.float64(): np.float64}


def _bitmap(valid: np.ndarray | None):
    if valid is None or valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def int_array(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """An integer (or float64) column, null where `valid` is False."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(_ARROW_TYPES[values.dtype], len(values), [_bitmap(valid), pa.py_buffer(values)])


def string_array(values: list[str], valid: np.ndarray | None = None) -> pa.Array:
    """A string column, null where `valid` is False (those values are ignored)."""
    encoded = [v.encode("utf-8", "replace") if v is not None else b"" for v in values]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return pa.StringArray.from_buffers(len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded)),
                                       _bitmap(valid))


def _fits(v, dtype) -> bool:
    try:
        np.array([v or 0], dtype)
    except (OverflowError, TypeError, ValueError):
        return False
    return True


def table_from_rows(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """pa.Table.from_pylist(rows, schema) without the pandas import it triggers (for the flat types)."""
    columns = []
    for f in schema:
        values = [r.get(f.name) for r in rows]
        valid = np.fromiter((v is not None for v in values), bool, len(values))
        if pa.types.is_string(f.type):
            columns.append(string_array(values, valid))
        elif f.type in _NUMPY_TYPES:
            dtype = _NUMPY_TYPES[f.type]
            try:
                columns.append(int_array(np.fromiter((v or 0 for v in values), dtype, len(values)), valid))
            except (OverflowError, TypeError, ValueError):   # a reader's value from a corrupt file
                bad = next(i for i, v in enumerate(values) if not _fits(v, dtype))
                raise MwinvError(f"column {f.name}: {values[bad]!r} is out of its range "
                                 f"(row {bad + 1} of {len(values)})") from None
        elif pa.types.is_boolean(f.type):
            bits = pa.py_buffer(np.packbits(np.fromiter((bool(v) for v in values), bool, len(values)),
                                            bitorder="little"))
            columns.append(pa.Array.from_buffers(pa.bool_(), len(values), [_bitmap(valid), bits]))
        else:
            columns.append(pa.array(values, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def rows_to_tables(path, tables) -> list[tuple[str, pa.Table]]:
    """(table, rows) a reader made of `path` as Arrow tables, all made before any is written (a value
    out of its column's range in a corrupt file: a one-line error naming it, and no table half
    imported)."""
    from mwinv.capture.tables import SCHEMAS

    try:
        return [(table, table_from_rows(rows, SCHEMAS[table])) for table, rows in tables if rows]
    except MwinvError as exc:
        raise MwinvError(f"{path}: {exc}") from None


def coded_strings(codes: np.ndarray, values: list[str]) -> pa.Array:
    """values[code] per row, null where code < 0, as a dictionary column (written to Parquet and
    scanned by DuckDB as it is; Capture.read gives plain strings)."""
    return coded_array(codes, string_array(values))


def coded_array(codes: np.ndarray, values: pa.Array) -> pa.Array:
    """coded_strings with the dictionary already a string column."""
    codes = codes.astype(np.int32, copy=False)
    indices = int_array(codes, codes >= 0)
    return pa.DictionaryArray.from_buffers(pa.dictionary(pa.int32(), pa.string()), len(codes), indices.buffers(),
                                           values)


def numpy_ints(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """An integer column without nulls as numpy, read from its buffers (to_numpy() imports pandas)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    parts = []
    for c in chunks:
        if c.null_count or not pa.types.is_integer(c.type):
            raise ValueError(f"numpy_ints: a column of {c.type} with {c.null_count} nulls")
        dtype = np.dtype(("i" if pa.types.is_signed_integer(c.type) else "u") + str(c.type.bit_width // 8))
        parts.append(np.frombuffer(c.buffers()[1], dtype)[c.offset:c.offset + len(c)])
    if not parts:
        return np.zeros(0, np.int64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def empty_table(schema: pa.Schema) -> pa.Table:
    """schema.empty_table() without the pandas import it triggers."""
    return pa.Table.from_batches([], schema=schema)
