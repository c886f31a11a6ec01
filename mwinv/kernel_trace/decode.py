"""Binary ring-buffer records -> typed `kernel_event` batches, vectorised per event type with numpy.

Each event type is decoded once per chunk: the field offsets come from the event's format, the
values are gathered for all its records at once. Stack records (ftrace `kernel_stack`, written by
options/stacktrace right after the event they belong to) become `stack_id`s of the event before; the
function tracer's entries (ftrace `function`) become `kernel_function_call` rows, not events."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from mwinv.capture.columns import coded_array, coded_strings, int_array, string_array
from mwinv.capture.tables import SCHEMAS
from mwinv.kernel_trace.formats import EventFormat, Field, state_bits, state_text
from mwinv.kernel_trace.ringwalk import Decoded, decode_records, format_int_fields

KERNEL_EVENT = SCHEMAS["kernel_event"]
PID_MAX_LIMIT = 4 * 1024 * 1024   # the kernel's upper bound of pid_max (64-bit)


def stack_id_of(key: bytes) -> int:
    """A stable 63-bit id of a stack (the same stack gets the same id in every part and run)."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


class Kallsyms:
    """Kernel addresses -> function names (text symbols of /proc/kallsyms); built on first use,
    since only traces with stacks need it."""

    def __init__(self, text: bytes):
        self.text = text
        self.addrs: np.ndarray | None = None
        self._name_at: np.ndarray | None = None    # byte offset of each sorted symbol's name
        self._names: dict[int, str] = {}

    def _build(self) -> None:
        # "<address> <type> <name>[\t[module]]": the addresses of one file have one width, so the
        # lines are split, filtered and converted from hex as arrays; a name is decoded when a stack
        # needs it (a stack trace names a few thousand of the ~200,000 symbols)
        buf = np.frombuffer(self.text, np.uint8)
        ends = np.flatnonzero(buf == ord("\n"))
        if len(buf) and buf[-1] != ord("\n"):
            ends = np.append(ends, len(buf))
        starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
        first_space = self.text.find(b" ")
        width = first_space if first_space > 0 else 0
        ok = (ends - starts > width + 3) & (starts + width + 3 < len(buf))
        starts = starts[ok]
        if width and len(starts):
            spaced = (buf[starts + width] == ord(" ")) & (buf[starts + width + 2] == ord(" "))
            starts = starts[spaced & np.isin(buf[starts + width + 1], np.frombuffer(b"tTwW", np.uint8))]
        else:
            starts = starts[:0]
        digits = buf[starts[:, None] + np.arange(width)]
        nibbles = np.where(digits >= ord("a"), digits - ord("a") + 10, digits - ord("0")).astype(np.uint64)
        addrs = np.zeros(len(starts), np.uint64)
        for col in range(width):
            addrs = (addrs << np.uint64(4)) | nibbles[:, col]
        order = np.argsort(addrs, kind="stable")
        self.addrs = addrs[order]
        self._name_at = starts[order] + width + 3

    def _name(self, i: int) -> str:
        name = self._names.get(i)
        if name is None:
            at = int(self._name_at[i])
            end = self.text.find(b"\n", at)
            name = self.text[at:end if end >= 0 else len(self.text)].split(b"\t", 1)[0].decode(errors="replace")
            self._names[i] = name
        return name

    def names(self, addrs: list[int]) -> list[str]:
        """The function of each address (one vectorised lookup per stack)."""
        if self.addrs is None:
            self._build()
        idx = np.searchsorted(self.addrs, np.array(addrs, np.uint64), side="right") - 1
        return [self._name(i) if i >= 0 else f"0x{a:x}" for i, a in zip(idx.tolist(), addrs)]


@dataclass
class DecodeState:
    """What outlives one chunk: stacks seen, processes seen, counts."""
    node: str
    formats: dict[int, EventFormat]
    kallsyms: Kallsyms | None = None
    stacks: dict[int, tuple[str, ...]] = field(default_factory=dict)   # stack_id -> function names
    raw_stack_ids: dict[int, int] = field(default_factory=dict)       # hash of raw addresses -> stack_id
    comms: dict[int, str] = field(default_factory=dict)
    # pids whose comm is known, as a bitmap: the per-chunk check of every record's pid stays in numpy
    comm_known: np.ndarray = field(default_factory=lambda: np.zeros(PID_MAX_LIMIT + 1, bool))
    forks: dict[int, int] = field(default_factory=dict)                 # child -> parent
    first_ts: dict[int, int] = field(default_factory=dict)
    exits: dict[int, int] = field(default_factory=dict)
    events: int = 0
    lost: int = 0
    spec: np.ndarray | None = None      # ring_decode's field table, built on first use
    calls: list[pa.Table] = field(default_factory=list)   # kernel_function_call parts not yet written

    def __post_init__(self):
        self.stack_type = next((i for i, f in self.formats.items() if f.name == "kernel_stack"), -1)
        self.function_type = next((i for i, f in self.formats.items()
                                   if f.system == "ftrace" and f.name == "function"), -1)
        sw = next((f for f in self.formats.values() if f.name == "sched_switch"), None)
        self.state_bits = state_bits(sw.print_fmt if sw else "")

    def stack_id(self, raw: bytes) -> int:
        """The id of a raw stack (addresses), identified by its function names, so the same stack
        has the same id in binary and text traces and in perf samples."""
        addrs = np.frombuffer(raw, "<u8").tolist()
        return self.stack_id_of_names(
            without_tracing_frames(self.kallsyms.names(addrs) if self.kallsyms else [f"0x{a:x}" for a in addrs]))

    def stack_id_of_names(self, names: list[str]) -> int:
        sid = stack_id_of("\n".join(names).encode())
        self.stacks.setdefault(sid, tuple(names))
        return sid

    def stack_frames(self) -> pa.Table:
        n = len(self.stacks)
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum([len(f) for f in self.stacks.values()], out=offsets[1:])
        frames = pa.ListArray.from_arrays(int_array(offsets), string_array([fn for f in self.stacks.values() for fn in f]))
        return pa.Table.from_arrays([coded_strings(np.zeros(n, np.int32), [self.node]),
                                     int_array(np.fromiter(self.stacks, np.int64, n)), frames],
                                    names=SCHEMAS["kernel_stack"].names)


_TRACING_FRAMES = ("trace_event_raw_event_", "__traceiter_", "trace_event_buffer_", "event_triggers_",
                   "stacktrace_trigger", "__trace_stack", "__ftrace_trace_stack")


def without_tracing_frames(frames) -> list[str]:
    """Drop the tracing machinery's own frames from the top of a stack."""
    frames = list(frames)
    i = 0
    while i < len(frames) - 1 and frames[i].startswith(_TRACING_FRAMES):
        i += 1
    return frames[i:]


def _gather(buf: np.ndarray, off: np.ndarray, f: Field) -> np.ndarray:
    """The field `f` of every record starting at `off` in `buf`, as integers."""
    dtype = {1: "i1", 2: "<i2", 4: "<i4", 8: "<i8"}[f.size] if f.signed else \
        {1: "u1", 2: "<u2", 4: "<u4", 8: "<u8"}[f.size]
    idx = (off + f.offset)[:, None] + np.arange(f.size)
    return buf[idx].view(dtype).ravel()


def _strings(buf: np.ndarray, off: np.ndarray, f: Field, length: np.ndarray | None = None) -> np.ndarray:
    """A char[N] or __data_loc char[] field of every record, as str."""
    if f.is_data_loc:
        ends = off + (length if length is not None else 0xFFFF)
        return np.array([_data_loc_string(buf, int(o), f, int(e)) for o, e in zip(off, ends)], dtype=object)
    idx = (off + f.offset)[:, None] + np.arange(f.size)
    raw = np.ascontiguousarray(buf[idx]).view(f"S{f.size}").ravel()
    return np.char.decode(raw, "utf-8", "replace").astype(object) if len(raw) else raw.astype(str).astype(object)


def _data_loc_string(buf: np.ndarray, o: int, f: Field, end: int) -> str:
    loc = int.from_bytes(buf[o + f.offset:o + f.offset + 4].tobytes(), "little")
    start, n = o + (loc & 0xFFFF), loc >> 16
    if start + n > end:
        return ""
    return buf[start:start + n].tobytes().split(b"\0", 1)[0].decode(errors="replace")


def _fields_text(buf: np.ndarray, off: np.ndarray, length: np.ndarray, fmt: EventFormat) -> list[str] | pa.Array:
    """`name=value ...` of the non-common fields of every record (for event types without columns):
    in C when every field is an integer (syscall entries: most records of a trace), else each field
    gathered for all records at once and one format call per record."""
    own = [f for f in fmt.fields.values() if not fmt.common(f)]
    if not own:
        return [""] * len(off)
    if all(f.size in (1, 2, 4, 8) and f.array_len == 1 and not (f.is_data_loc or f.is_string) for f in own):
        return format_int_fields(buf, off, [(f.name, f.offset, f.size, f.signed) for f in own])
    columns = []
    for f in own:
        if f.is_data_loc or f.is_string:
            columns.append(_strings(buf, off, f, length).tolist())
        elif f.size in (1, 2, 4, 8) and f.array_len == 1:
            columns.append(_gather(buf, off, f).tolist())
        else:
            idx = (off + f.offset)[:, None] + np.arange(f.size)
            columns.append([bytes(r).hex() for r in buf[idx]])
    template = " ".join(f"{f.name}={{}}" for f in own).format
    return [template(*values) for values in zip(*columns)]


def _dev_text(dev: int) -> str:
    return f"{dev >> 20},{dev & 0xFFFFF}"


class _StringColumn:
    """A string column of a chunk as codes into its values (lists of str, or string columns made in C):
    per-record Python objects would cost more than the rest of the decoding."""

    def __init__(self, n: int):
        self.codes = np.full(n, -1, np.int32)
        self.values: list[pa.Array] = []
        self.count = 0

    def put(self, sel: np.ndarray, values: list[str] | pa.Array) -> None:
        """values[i] for record sel[i]."""
        self.codes[sel] = self.count + np.arange(len(sel))
        self.values.append(values if isinstance(values, pa.Array) else string_array(values))
        self.count += len(sel)

    def arrow(self, rows: np.ndarray) -> pa.Array:
        values = pa.concat_arrays(self.values) if self.values else string_array([])
        return coded_array(self.codes[rows], values)


# kernel_event's integer-valued columns, in the order of ringwalk.c's ring_decode output; prev_state,
# dev and rwbs are decoded as integers there and become text once per distinct value here
DECODED = ("prev_pid", "next_pid", "target_pid", "sector", "nr_bytes", "syscall_nr", "syscall_ret",
           "prev_state", "dev", "rwbs")
_COL = {name: i for i, name in enumerate(DECODED)}
_WAKE_EVENTS = ("sched_wakeup", "sched_wakeup_new", "sched_waking", "sched_process_exit", "sched_process_free",
                "sched_migrate_task")


def _is_syscall(fmt: EventFormat) -> bool:
    return fmt.system == "raw_syscalls" or (fmt.system == "syscalls" and "__syscall_nr" in fmt.fields)


def column_fields(fmt: EventFormat) -> dict[str, tuple[Field, int]]:
    """Which field of `fmt` fills which kernel_event column, with a left shift of its value."""
    F, name = fmt.fields, fmt.name
    out: dict[str, tuple[Field, int]] = {}
    if name == "sched_switch":
        out = {"prev_pid": (F["prev_pid"], 0), "next_pid": (F["next_pid"], 0), "prev_state": (F["prev_state"], 0)}
    elif name in _WAKE_EVENTS and "pid" in F:
        out = {"target_pid": (F["pid"], 0)}
    elif name == "sched_process_fork":
        out = {"target_pid": (F["child_pid"], 0)}
    elif name.startswith(("block_rq", "block_bio")) and "sector" in F:
        out = {"dev": (F["dev"], 0), "sector": (F["sector"], 0)}
        if "bytes" in F:
            out["nr_bytes"] = (F["bytes"], 0)
        elif "nr_sector" in F:
            out["nr_bytes"] = (F["nr_sector"], 9)
        if "rwbs" in F and F["rwbs"].size == 8:
            out["rwbs"] = (F["rwbs"], 0)
    elif name == "mm_filemap_add_to_page_cache" and "index" in F:
        # a file page entering the page cache: sector = file offset / 512
        out = {"dev": (F["s_dev"], 0), "sector": (F["index"], 3)}
    elif _is_syscall(fmt):
        out = {"syscall_nr": (F.get("id") or F["__syscall_nr"], 0)}
        if "ret" in F:
            out["syscall_ret"] = (F["ret"], 0)
    elif name in ("sock_recv_length", "sock_send_length") and "ret" in F:
        out = {"nr_bytes": (F["ret"], 0)}
    return out


# the fields decode_chunk reads besides column_fields' (processes' names, forks)
_NOTED = {"sched_switch": ("prev_comm", "next_comm"), "sched_process_fork": ("child_comm", "parent_pid"),
          "mm_filemap_add_to_page_cache": ("i_ino",), "function": ("ip", "parent_ip")}


def missing_field(fmt: EventFormat) -> str | None:
    """A field the decoding of a known event needs and `fmt` lacks (a corrupt trace's format)."""
    try:
        column_fields(fmt)
    except KeyError as exc:
        return exc.args[0]
    if fmt.name == "mm_filemap_add_to_page_cache" and "index" not in fmt.fields:
        return None
    return next((f for f in _NOTED.get(fmt.name, ()) if f not in fmt.fields), None)


def decode_spec(formats: dict[int, EventFormat]) -> np.ndarray:
    """ring_decode's table: per event type and column, (offset, size, signed, shift)."""
    spec = np.full((max(formats, default=0) + 1, len(DECODED), 4), -1, np.int32)
    for t, fmt in formats.items():
        for col, (f, shift) in column_fields(fmt).items():
            if f.size in (1, 2, 4, 8):
                spec[t, _COL[col]] = (f.offset, f.size, int(f.signed), shift)
    return spec


def _text_codes(values: np.ndarray, valid: np.ndarray, text) -> pa.Array:
    """A dictionary column of text(value) per valid row, each distinct value turned to text once."""
    codes = np.full(len(values), -1, np.int32)
    uniq, inv = np.unique(values[valid], return_inverse=True)
    codes[valid] = inv.ravel()
    return coded_strings(codes, [text(v) for v in uniq.tolist()])


def _rwbs_text(raw: int) -> str:
    return raw.to_bytes(8, "little", signed=True).split(b"\0", 1)[0].decode(errors="replace")


@dataclass
class _Chunk:
    """One walked chunk (one CPU, time-ordered) as decode_chunk works through it: the records, the
    columns ring_decode filled (cols/valid, per DECODED column) and the text columns Python fills."""
    buf: np.ndarray
    ts: np.ndarray
    off: np.ndarray
    length: np.ndarray
    cols: np.ndarray
    valid: np.ndarray
    fields_txt: _StringColumn
    rwbs_text: _StringColumn


def decode_chunk(state: DecodeState, buf: np.ndarray, cpu: int, ts: np.ndarray, off: np.ndarray,
                 length: np.ndarray) -> pa.RecordBatch:
    """Decode the records of one walked chunk (one CPU, time-ordered) into a kernel_event batch: the
    columns in one C pass, then per event type only what needs Python (comms, forks, text fields)."""
    if state.spec is None:
        state.spec = decode_spec(state.formats)
    n = len(ts)
    stack_fmt = state.formats.get(state.stack_type)
    depth_off = stack_fmt.fields["size"].offset if stack_fmt and "size" in stack_fmt.fields else 8
    addr_off = stack_fmt.fields["caller"].offset if stack_fmt and "caller" in stack_fmt.fields else 16
    d = decode_records(buf, off, length, state.spec, state.stack_type, depth_off, addr_off)
    stack_id = _stack_ids(state, buf, d, addr_off)
    c = _Chunk(buf, ts, off, length, d.cols, d.valid, _StringColumn(n), _StringColumn(n))
    event_idx = np.zeros(n, np.int32)      # into event_names
    event_names: list[str] = []
    # the records of each type, from one stable sort (not one scan of the chunk per type)
    order = np.argsort(d.types, kind="stable")
    bounds_t, bounds = np.unique(d.types[order], return_index=True)
    bounds = np.append(bounds, n)
    for j, t in enumerate(bounds_t.tolist()):
        if t == state.stack_type:
            continue
        sel = order[bounds[j]:bounds[j + 1]]
        if t == state.function_type:
            state.calls.append(_function_calls(state, state.formats[t], c, sel, cpu, d.pids))
            continue
        event_idx[sel] = len(event_names)
        fmt = state.formats.get(t)
        event_names.append(f"unknown_{t}" if fmt is None else fmt.name)
        if fmt is not None:
            _decode_type(state, fmt, c, sel)
    k = np.flatnonzero((d.types != state.stack_type) & (d.types != state.function_type))
    state.events += len(k)
    return _event_batch(state, c, k, cpu, d.pids, stack_id, coded_strings(event_idx[k], event_names))


def _function_calls(state: DecodeState, fmt: EventFormat, c: _Chunk, sel: np.ndarray, cpu: int,
                    pids: np.ndarray) -> pa.Table:
    """The function tracer's entries `sel` (ftrace `function`: ip, the traced function's address, and
    parent_ip, the return address in its caller) as kernel_function_call rows, each address resolved through
    the trace's own kallsyms (hex where the trace has none), each distinct one once."""
    names = []
    for f in (fmt.fields["ip"], fmt.fields["parent_ip"]):
        uniq, inv = np.unique(_gather(c.buf, c.off[sel], f), return_inverse=True)
        addrs = uniq.tolist()
        names.append(coded_strings(inv.ravel().astype(np.int32),
                                   state.kallsyms.names(addrs) if state.kallsyms else [f"0x{a:x}" for a in addrs]))
    n = len(sel)
    return pa.Table.from_arrays([coded_strings(np.zeros(n, np.int32), [state.node]), int_array(c.ts[sel]),
                                 int_array(np.full(n, cpu, np.int32)), int_array(pids[sel].astype(np.int32)), *names],
                                names=SCHEMAS["kernel_function_call"].names)


def _stack_ids(state: DecodeState, buf: np.ndarray, d: Decoded, addr_off: int) -> np.ndarray:
    """Per record, the stack_id of the stack record that follows it (-1: none); each distinct stack
    hashed once per run."""
    stack_id = np.full(len(d.types), -1, np.int64)
    has_stack = d.stack_off >= 0
    if has_stack.any():
        uniq, first, inv = np.unique(d.stack_hash[has_stack], return_index=True, return_inverse=True)
        at, depths = d.stack_off[has_stack][first], d.stack_depth[has_stack][first]
        sids = []
        for h, o, depth in zip(uniq.tolist(), at.tolist(), depths.tolist()):
            sid = state.raw_stack_ids.get(h)
            if sid is None:
                sid = state.raw_stack_ids[h] = state.stack_id(buf[o + addr_off:o + addr_off + 8 * depth].tobytes())
            sids.append(sid)
        stack_id[has_stack] = np.array(sids, np.int64)[inv.ravel()]
    return stack_id


def _decode_type(state: DecodeState, fmt: EventFormat, c: _Chunk, sel: np.ndarray) -> None:
    """What the C pass leaves to Python for the records `sel`, all of event `fmt`: the processes'
    names and forks into `state`, the text columns and derived values into `c`."""
    buf, ts, length, cols, valid = c.buf, c.ts, c.length, c.cols, c.valid
    o, F, name = c.off[sel], fmt.fields, fmt.name
    if name == "sched_switch":
        _note_comms(state, buf, o, cols[_COL["prev_pid"]][sel], F["prev_comm"])
        _note_comms(state, buf, o, cols[_COL["next_pid"]][sel], F["next_comm"])
    elif name in _WAKE_EVENTS and "pid" in F:
        tp = cols[_COL["target_pid"]][sel]
        if "comm" in F:
            _note_comms(state, buf, o, tp, F["comm"], length[sel])
        if name == "sched_process_exit":
            state.exits.update(zip(tp.tolist(), ts[sel].tolist()))
    elif name == "sched_process_fork":
        child = cols[_COL["target_pid"]][sel]
        _note_comms(state, buf, o, child, F["child_comm"], length[sel])
        for ch, p, tt in zip(child.tolist(), _gather(buf, o, F["parent_pid"]).tolist(), ts[sel].tolist()):
            state.forks[ch] = p
            state.first_ts.setdefault(ch, tt)
    elif name.startswith(("block_rq", "block_bio")) and "sector" in F:
        if "rwbs" in F and F["rwbs"].size != 8:
            c.rwbs_text.put(sel, _strings(buf, o, F["rwbs"]).tolist())
    elif name == "mm_filemap_add_to_page_cache" and "index" in F:
        order_ = _gather(buf, o, F["order"]).astype(np.int64) if "order" in F else np.zeros(len(o), np.int64)
        cols[_COL["nr_bytes"]][sel] = np.left_shift(np.int64(4096), order_)
        valid[_COL["nr_bytes"]][sel] = True
        c.fields_txt.put(sel, [f"ino={v}" for v in _gather(buf, o, F["i_ino"]).tolist()])
    elif _is_syscall(fmt):
        if "ret" not in F and name.startswith("sys_enter"):
            c.fields_txt.put(sel, _fields_text(buf, o, length[sel], fmt))
    else:
        if name in ("sock_recv_length", "sock_send_length") and "ret" in F:
            cols[_COL["nr_bytes"]][sel] = np.maximum(cols[_COL["nr_bytes"]][sel], 0)
        c.fields_txt.put(sel, _fields_text(buf, o, length[sel], fmt))


def _event_batch(state: DecodeState, c: _Chunk, k: np.ndarray, cpu: int, pids: np.ndarray,
                 stack_id: np.ndarray, event: pa.Array) -> pa.RecordBatch:
    """The kernel_event batch of the chunk's records `k` (all but the stack records)."""
    nk = len(k)

    def column(name: str) -> tuple[np.ndarray, np.ndarray]:
        return c.cols[_COL[name]][k], c.valid[_COL[name]][k]

    rwbs, rwbs_ok = column("rwbs")
    arrays = {
        "node": coded_strings(np.zeros(nk, np.int32), [state.node]),
        "ts_ns": int_array(c.ts[k]),
        "cpu": int_array(np.full(nk, cpu, np.int32)),
        "pid": int_array(pids[k]),
        "event": event,
        "prev_state": _text_codes(*column("prev_state"), lambda v: state_text(v, state.state_bits)),
        "dev": _text_codes(*column("dev"), _dev_text),
        "rwbs": _text_codes(rwbs, rwbs_ok, _rwbs_text) if rwbs_ok.any() else c.rwbs_text.arrow(k),
        "stack_id": int_array(stack_id[k], stack_id[k] >= 0),
        "fields": c.fields_txt.arrow(k),
    }
    for name in ("prev_pid", "next_pid", "target_pid", "syscall_nr"):
        values, ok = column(name)
        arrays[name] = int_array(values.astype(np.int32), ok)
    for name in ("sector", "nr_bytes", "syscall_ret"):
        arrays[name] = int_array(*column(name))
    return pa.RecordBatch.from_arrays([arrays[name] for name in KERNEL_EVENT.names], names=KERNEL_EVENT.names)


def _note_comms(state: DecodeState, buf: np.ndarray, off: np.ndarray, pids: np.ndarray, f: Field,
                length: np.ndarray | None = None) -> None:
    # a pid keeps its comm (until an exec): the first name seen per new pid is enough, and only those
    # records' strings are decoded
    pids = pids.astype(np.int64)
    unseen = np.flatnonzero((pids > 0) & (pids <= PID_MAX_LIMIT))
    unseen = unseen[~state.comm_known[pids[unseen]]]
    if not len(unseen):
        return
    uniq, first = np.unique(pids[unseen], return_index=True)
    state.comm_known[uniq] = True
    new = np.array([p not in state.comms for p in uniq.tolist()], bool)
    if new.any():
        idx = unseen[first[new]]
        names = _strings(buf, off[idx], f, length[idx] if length is not None else None)
        state.comms.update(zip(uniq[new].tolist(), names.tolist()))
