"""numpy -> Arrow columns built from buffers. pa.array() of a Python list (and DictionaryArray.from_arrays)
imports pandas, which takes seconds; these do not."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_ARROW_TYPES = {np.dtype(np.int64): pa.int64(), np.dtype(np.int32): pa.int32()}


def int_array(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """An integer column, null where `valid` is False."""
    values = np.ascontiguousarray(values)
    bitmap = None
    if valid is not None and not valid.all():
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(_ARROW_TYPES[values.dtype], len(values), [bitmap, pa.py_buffer(values)])


def string_array(values: list[str]) -> pa.Array:
    encoded = [v.encode("utf-8", "replace") for v in values]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return pa.StringArray.from_buffers(len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded)))


def coded_strings(codes: np.ndarray, values: list[str]) -> pa.Array:
    """values[code] per row, null where code < 0."""
    codes = codes.astype(np.int32, copy=False)
    return string_array(values).take(int_array(codes, codes >= 0))
