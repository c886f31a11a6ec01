"""The C walk over ftrace ring-buffer pages and its one-pass field decoder, compiled on first use
(gcc) and called via ctypes."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np
import pyarrow as pa

from mwinv.errors import MwinvError
from mwinv.native import compiled

_SOURCE = Path(__file__).with_name("ringwalk.c")


@functools.cache
def _load():
    lib = compiled(_SOURCE, "the trace.dat parser")
    p = ctypes.c_void_p
    lib.ring_walk.restype = ctypes.c_int64
    lib.ring_walk.argtypes = [p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                              p, p, p, ctypes.c_int64, p, p]
    lib.ring_decode.restype = None
    lib.ring_decode.argtypes = [p, p, p, ctypes.c_int64, p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                ctypes.c_int64, p, p, p, p, p, p, p]
    lib.format_int_fields.restype = ctypes.c_int64
    lib.format_int_fields.argtypes = [p, ctypes.c_int64, p, ctypes.c_int64, p, ctypes.c_int64, ctypes.c_char_p,
                                      p, ctypes.c_int64, p]
    return lib


class RingWalk:
    """Records found in a buffer of whole ring-buffer pages."""

    def __init__(self, ts: np.ndarray, off: np.ndarray, length: np.ndarray, pages: int, lost: int,
                 bad_offset: int | None):
        self.ts, self.off, self.length = ts, off, length
        self.pages, self.lost, self.bad_offset = pages, lost, bad_offset


def walk_pages(buf: np.ndarray, page_size: int, data_off: int = 16, commit_size: int = 8) -> RingWalk:
    """Walk `buf` (uint8, a multiple of page_size). On a corrupt page the records before it are
    returned and `bad_offset` is its byte offset in `buf`."""
    lib = _load()
    max_out = len(buf) // 4 + 16
    ts = np.empty(max_out, np.int64)
    off = np.empty(max_out, np.int64)
    length = np.empty(max_out, np.int32)
    pages = np.zeros(1, np.int64)
    lost = np.zeros(1, np.int64)
    n = lib.ring_walk(buf.ctypes.data, len(buf), page_size, data_off, commit_size, ts.ctypes.data,
                      off.ctypes.data, length.ctypes.data, max_out, pages.ctypes.data, lost.ctypes.data)
    bad = None
    if n < 0:
        bad = -n - 1
        # redo up to the last good page so the records before the fault are kept
        good = (bad // page_size) * page_size
        if good:
            w = walk_pages(buf[:good], page_size, data_off, commit_size)
            return RingWalk(w.ts, w.off, w.length, w.pages, w.lost, bad)
        return RingWalk(ts[:0], off[:0], length[:0], 0, 0, bad)
    return RingWalk(ts[:n], off[:n], length[:n], int(pages[0]), int(lost[0]), None)


class Decoded:
    """ring_decode's output for n records: type and pid of each; per decoded column (rows of `cols`
    and `valid`) its value and whether the record's type has that field; per record the hash, the
    offset and the depth (frames the record holds) of the kernel stack recorded right after it
    (offset -1: none)."""

    def __init__(self, n: int, ncols: int):
        self.types = np.empty(n, np.int32)
        self.pids = np.empty(n, np.int32)
        self.cols = np.zeros((ncols, n), np.int64)
        self.valid = np.empty((ncols, n), bool)
        self.stack_hash = np.empty(n, np.uint64)
        self.stack_off = np.empty(n, np.int64)
        self.stack_depth = np.empty(n, np.int32)


def decode_records(buf: np.ndarray, off: np.ndarray, length: np.ndarray, spec: np.ndarray, stack_type: int,
                   stack_depth_off: int, stack_addr_off: int) -> Decoded:
    """Decode the records a walk found (spec: per type and column, (offset, size, signed, shift))."""
    lib = _load()
    n = len(off)
    spec = np.ascontiguousarray(spec, np.int32)
    off = np.ascontiguousarray(off, np.int64)
    length = np.ascontiguousarray(length, np.int32)
    d = Decoded(n, spec.shape[1])
    lib.ring_decode(buf.ctypes.data, off.ctypes.data, length.ctypes.data, n, spec.ctypes.data, spec.shape[0] - 1,
                    stack_type, stack_depth_off, stack_addr_off, d.types.ctypes.data, d.pids.ctypes.data,
                    d.cols.ctypes.data, d.valid.ctypes.data, d.stack_hash.ctypes.data, d.stack_off.ctypes.data,
                    d.stack_depth.ctypes.data)
    return d


def format_int_fields(buf: np.ndarray, off: np.ndarray, fields: list[tuple[str, int, int, bool]]) -> pa.Array:
    """`name=value ...` per record for integer fields (name, offset, size, signed), as a string column."""
    lib = _load()
    off = np.ascontiguousarray(off, np.int64)
    spec = np.array([(o, size, int(signed)) for _, o, size, signed in fields], np.int32).reshape(-1, 3)
    names = b"\0".join(name.encode() for name, *_ in fields) + b"\0"
    cap = len(off) * sum(len(name) + 23 for name, *_ in fields) + 1   # " name=-" and 20 digits per field
    out = np.empty(cap, np.uint8)
    offsets = np.empty(len(off) + 1, np.int32)
    size = lib.format_int_fields(buf.ctypes.data, len(buf), off.ctypes.data, len(off), spec.ctypes.data, len(fields),
                                 names, out.ctypes.data, cap, offsets.ctypes.data)
    if size < 0:
        raise MwinvError(f"{len(off)} records' fields do not fit a string column")
    return pa.StringArray.from_buffers(len(off), pa.py_buffer(offsets), pa.py_buffer(out[:size]))
