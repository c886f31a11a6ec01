"""Text traces -> `kernel_event` batches: the raw ftrace `trace`/`trace_pipe` format and
`trace-cmd report` output (pretty or `name=value` fields, `=> func` stack lines)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from mwinv.kernel_trace.decode import KERNEL_EVENT, DecodeState, without_tracing_frames
from mwinv.kernel_trace.formats import state_text
from mwinv.kernel_trace.syscalls import X86_64
from mwinv.kernel_trace.tracedat import TraceFormatError

_LINE = re.compile(
    r"^\s*(?P<comm>.*?)-(?P<pid>\d+)\s+(?:\(\s*[\d-]+\)\s+)?\[(?P<cpu>\d+)\]\s+(?:[\w.]{4,6}\s+)?"
    r"(?P<sec>\d+)\.(?P<frac>\d+):\s+(?P<event>[\w:]+):\s?(?P<rest>.*)$")
_KV = re.compile(r"(\w+)=(\S*)")
_SWITCH = re.compile(r"(?P<prev_comm>.+?):(?P<prev_pid>\d+) \[-?\d+\] (?P<prev_state>\S+) ==> "
                     r"(?P<next_comm>.+?):(?P<next_pid>\d+) \[-?\d+\]")
_WAKEUP = re.compile(r"(?P<comm>.+?):(?P<pid>\d+) \[-?\d+\]")
_BLOCK = re.compile(r"(?P<maj>\d+),(?P<min>\d+) (?P<rwbs>\S+) (?:(?P<bytes>\d+) )?\(.*?\) (?P<sector>\d+) \+ (?P<nr>\d+)")
_RAW_SYS = re.compile(r"NR (?P<nr>-?\d+)(?: = (?P<ret>-?\d+))?")
_STACK = re.compile(r"^\s*=>\s*(?P<func>\S+)")

_FREE_TEXT = ("print", "bprint", "bputs")
_PAGE_CACHE_ADD = re.compile(r"dev (?P<maj>\d+):(?P<min>\d+) ino (?P<ino>[0-9a-f]+) pfn=\S+ ofs=(?P<ofs>\d+)"
                             r"(?: order=(?P<order>\d+))?")
# "fd: 0x00000011," (the generic syscall print) or "uaddr=0x7f15dfa845d8" (futex's own); symbolic
# values (op=FUTEX_WAKE|...) are not numbers and are left out
_SYSCALL_ARG = re.compile(r"(\w+)(?:: |=)(-?0x[0-9a-fA-F]+|-?\d+)\b")
_INT_COLS = ("prev_pid", "next_pid", "target_pid", "sector", "nr_bytes", "syscall_nr", "syscall_ret", "stack_id")
_STR_COLS = ("prev_state", "dev", "rwbs", "fields")


def _int(v: str | None) -> int | None:
    if v is None or v == "":
        return None
    try:
        return int(v, 0) if v.startswith(("0x", "-0x")) else int(v)
    except ValueError:
        return None


def _s64(v: int | None) -> int | None:
    """A u64 printed unsigned, as the signed 64-bit value the tables hold (flushes: sector -1)."""
    return v - (1 << 64) if v is not None and v >= 1 << 63 else v


def _fields_of(event: str, rest: str, row: dict, state: DecodeState) -> None:
    kv = dict(_KV.findall(rest))
    if event == "sched_switch":
        m = None if "prev_pid" in kv else _SWITCH.search(rest)
        if m:
            kv = m.groupdict()
        row["prev_pid"], row["next_pid"] = _int(kv.get("prev_pid")), _int(kv.get("next_pid"))
        st = kv.get("prev_state")
        row["prev_state"] = state_text(int(st), state.state_bits) if st and st.isdigit() else st
        for p, c in ((row["prev_pid"], kv.get("prev_comm")), (row["next_pid"], kv.get("next_comm"))):
            if p and c:
                state.comms.setdefault(p, c)
        return
    if event in ("sched_wakeup", "sched_wakeup_new", "sched_waking", "sched_process_exit", "sched_process_free"):
        m = None if "pid" in kv else _WAKEUP.search(rest)
        if m:
            kv = {**kv, **m.groupdict()}
        row["target_pid"] = _int(kv.get("pid"))
        if row["target_pid"] and kv.get("comm"):
            state.comms.setdefault(row["target_pid"], kv["comm"])
        return
    if event == "sched_process_fork":
        row["target_pid"] = _int(kv.get("child_pid"))
        if row["target_pid"] and kv.get("pid"):
            state.forks[row["target_pid"]] = int(kv["pid"])
        return
    if event.startswith("block_rq"):
        m = _BLOCK.search(rest)
        if m:
            row["dev"] = f"{m['maj']},{m['min']}"
            row["rwbs"], row["sector"] = m["rwbs"], _s64(int(m["sector"]))
            row["nr_bytes"] = int(m["bytes"]) if m["bytes"] else int(m["nr"]) * 512
        elif "sector" in kv:
            row["dev"], row["rwbs"], row["sector"] = kv.get("dev"), kv.get("rwbs"), _s64(_int(kv["sector"]))
            row["nr_bytes"] = _int(kv.get("bytes")) or (_int(kv.get("nr_sector")) or 0) * 512
        return
    if event == "mm_filemap_add_to_page_cache":
        m = _PAGE_CACHE_ADD.search(rest)
        if m:
            row["dev"], row["fields"] = f"{m['maj']},{m['min']}", f"ino={int(m['ino'], 16)}"
            row["sector"], row["nr_bytes"] = int(m["ofs"]) // 512, 4096 << int(m["order"] or 0)
            return
    if event in ("sock_recv_length", "sock_send_length"):
        m = re.search(r"length = (-?\d+)", rest)
        n = int(m.group(1)) if m else _int(kv.get("ret"))
        row["nr_bytes"] = max(n, 0) if n is not None else None   # errors are not bytes
        row["fields"] = rest.strip()
        return
    if event in ("sys_enter", "sys_exit"):
        m = _RAW_SYS.search(rest)
        if m:
            row["syscall_nr"], row["syscall_ret"] = int(m["nr"]), _int(m["ret"])
        return
    if event.startswith("sys_exit_"):
        # printed as an unsigned 64-bit hex number: -11 is 0xfffffffffffffff5
        row["syscall_nr"] = X86_64.get(event[len("sys_exit_"):])
        row["syscall_ret"] = _s64(_int(rest.strip().split()[0])) if rest.strip() else None
        return
    if event.startswith("sys_enter_"):
        # the number is not printed, the arguments are in hex: as the binary parser gives them
        # (`__syscall_nr=17 fd=17 ... count=8192`)
        nr = row["syscall_nr"] = X86_64.get(event[len("sys_enter_"):])
        args = [f"{k}={_int(v)}" for k, v in _SYSCALL_ARG.findall(rest)]
        row["fields"] = " ".join(([f"__syscall_nr={nr}"] if nr is not None else []) + args) or None
        return
    row["fields"] = rest.strip() or None


def _fits(v: int | None, bits: int) -> bool:
    return v is None or -(1 << (bits - 1)) <= v < 1 << (bits - 1)


# header and notice lines of trace-cmd report and the raw trace files: no event, no fault
_NOT_EVENTS = re.compile(r"^\s*(cpus=\d+|version = \d+|CPU \d+ is empty|CPU:\d+ \[\w+ \d+ EVENTS DROPPED\])")


class _TextRows:
    """The rows of a text trace not yet yielded, where each came from (to name a bad one) and the stack
    lines waiting to be attached to the event before them on their CPU."""

    def __init__(self, path: Path, state: DecodeState):
        self.path, self.state = path, state
        self.cols: dict[str, list] = {n: [] for n in KERNEL_EVENT.names}
        self.lines: list[int] = []     # the line and offset of each row
        self.offsets: list[int] = []
        self.fault: TraceFormatError | None = None
        self.last_on_cpu: dict[int, int] = {}    # cpu -> row index of its last event (stack lines attach there)
        self.stack: list[str] = []
        self.stack_cpu = -1

    def __len__(self) -> int:
        return len(self.cols["ts_ns"])

    def flush_stack(self) -> None:
        if self.stack and self.stack_cpu in self.last_on_cpu:
            self.cols["stack_id"][self.last_on_cpu[self.stack_cpu]] = \
                self.state.stack_id_of_names(without_tracing_frames(self.stack))
        self.stack = []

    def add(self, m: re.Match, event: str, cpu: int, lineno: int, offset: int) -> None:
        """The event line `m` (at `offset`) as a row."""
        state, cols = self.state, self.cols
        row = dict.fromkeys(_INT_COLS + _STR_COLS)
        _fields_of(event, m["rest"], row, state)
        cols["node"].append(state.node)
        cols["ts_ns"].append(int(m["sec"]) * 1_000_000_000 + int(m["frac"].ljust(9, "0")[:9]))
        cols["cpu"].append(cpu)
        pid = int(m["pid"])
        cols["pid"].append(pid)
        if pid and m["comm"] not in ("<...>", "<idle>"):
            state.comms.setdefault(pid, m["comm"])
        cols["event"].append(event)
        for k in _INT_COLS + _STR_COLS:
            cols[k].append(row[k])
        self.lines.append(lineno)
        self.offsets.append(offset)
        self.last_on_cpu[cpu] = len(self) - 1
        state.events += 1

    def batch(self) -> pa.RecordBatch:
        """The rows so far; those from a corrupt line's on (a number too large for its column) are
        left out, and the line becomes the fault raised after the batch."""
        cols = self.cols
        try:
            rb = pa.RecordBatch.from_pydict(cols, schema=KERNEL_EVENT)
        except (OverflowError, pa.ArrowInvalid):
            row = min(i for f in KERNEL_EVENT if pa.types.is_integer(f.type)
                      for i, v in enumerate(cols[f.name]) if not _fits(v, f.type.bit_width))
            self.fault = self.fault or TraceFormatError(self.path, self.offsets[row],
                                                        f"line {self.lines[row]}: a number out of range")
            self.state.events -= len(self.lines) - row
            for v in cols.values():
                del v[row:]
            rb = pa.RecordBatch.from_pydict(cols, schema=KERNEL_EVENT)
        for v in (*cols.values(), self.lines, self.offsets):
            v.clear()
        self.last_on_cpu.clear()
        return rb

    def emit(self) -> Iterator[pa.RecordBatch]:
        yield self.batch()
        if self.fault:
            raise self.fault


def iter_text_batches(path: Path, state: DecodeState, batch_rows: int = 200_000) -> Iterator[pa.RecordBatch]:
    """Stream a text trace; a line that is neither an event, a stack line nor a header/comment is a
    fault: the batches before it are yielded, then TraceFormatError names the line."""
    rows = _TextRows(path, state)
    last_event = ""
    try:
        f = open(path, "r", errors="replace")
    except OSError as exc:
        raise TraceFormatError(path, 0, exc.strerror) from None
    with f:
        offset = 0
        for lineno, line in enumerate(f, 1):
            offset += len(line)
            m = _STACK.match(line)
            if m:
                rows.stack.append(m["func"].split("+")[0])
                continue
            m = _LINE.match(line)
            if m is None:
                if last_event in _FREE_TEXT and len(rows) and line.strip():
                    # a message with a newline continues on the next line
                    rows.cols["fields"][-1] = (rows.cols["fields"][-1] or "") + "\n" + line.rstrip("\n")
                    continue
                if not line.strip() or line.startswith("#") or _NOT_EVENTS.match(line):
                    continue
                rows.flush_stack()
                if len(rows):
                    yield from rows.emit()
                raise TraceFormatError(path, offset - len(line), f"line {lineno}: not a trace event line: {line.strip()[:60]!r}")
            rows.flush_stack()
            event = last_event = m["event"].split(":")[-1]
            cpu = int(m["cpu"])
            if event in ("kernel_stack", "<stack trace>") or m["rest"].startswith("<stack trace>"):
                rows.stack_cpu = cpu
                continue
            rows.add(m, event, cpu, lineno, offset - len(line))
            if len(rows) >= batch_rows:
                yield from rows.emit()
            if event == "stack":
                rows.stack_cpu = cpu
        rows.flush_stack()
        if len(rows):
            yield from rows.emit()
