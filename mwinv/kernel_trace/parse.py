"""Parse a kernel trace (trace.dat or text) into the capture tables `kernel_event`, `kernel_stack`,
`kernel_function_call` (the function tracer's entries) and `process`, streaming: one chunk of pages (or lines) at a time, each written as a Parquet part,
so memory stays bounded and a fault keeps everything parsed before it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from mwinv.capture.columns import table_from_rows
from mwinv.capture.tables import SCHEMAS, Capture, node_name
from mwinv.errors import MwinvError
from mwinv.kernel_trace.decode import DecodeState, Kallsyms, decode_chunk, missing_field
from mwinv.kernel_trace.ringwalk import walk_pages
from mwinv.kernel_trace.text import iter_text_batches
from mwinv.kernel_trace.tracedat import MAGIC, TraceDat, TraceFormatError, iter_cpu_chunks, read_tracedat

PART_ROWS = 1_000_000   # rows per kernel_event Parquet part


@dataclass
class ParseResult:
    events: int
    stacks: int
    processes: int
    lost_events: int
    clock: str
    fault: str | None = None      # the one-line fault, when the input was cut short or corrupt


def is_tracedat(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(10) == MAGIC


def iter_tracedat_batches(td: TraceDat, state: DecodeState, chunk_pages: int = 8192) -> Iterator[pa.RecordBatch]:
    """kernel_event batches of a trace.dat, CPU by CPU, chunk by chunk."""
    path = td.path
    data_off, commit_size = td.page_layout()
    for cpu, pos, pages in iter_cpu_chunks(td, chunk_pages):
        if pages is None:
            raise TraceFormatError(path, pos, f"truncated: CPU {cpu} data ends early")
        w = walk_pages(pages, td.page_size, data_off, commit_size)
        state.lost += w.lost
        if len(w.ts):
            yield decode_chunk(state, pages, cpu, w.ts, w.off, w.length)
        if w.bad_offset is not None:
            raise TraceFormatError(path, pos + w.bad_offset, f"corrupt ring-buffer page (CPU {cpu})")


def open_trace(path: Path, node: str) -> tuple[DecodeState, Iterator[pa.RecordBatch], str]:
    """(decode state, batch iterator, clock) for a trace.dat or a text trace."""
    if not path.exists():
        raise MwinvError(_gone(path))
    if is_tracedat(path):
        td = read_tracedat(path)
        for fmt in td.formats.values():
            if (lacks := missing_field(fmt)) is not None:
                raise MwinvError(f"{path}: the format of event {fmt.system}:{fmt.name} has no field {lacks} "
                                 "(a corrupt header)")
        state = DecodeState(node, td.formats, Kallsyms(td.kallsyms) if td.kallsyms else None)
        state.comms.update(td.cmdlines)
        return state, iter_tracedat_batches(td, state), td.clock
    state = DecodeState(node, {})
    return state, iter_text_batches(path, state), "unknown"


def _gone(path: Path) -> str:
    """Why a trace is missing: a capture's (kernel/<node>/trace.dat) compressed or dropped after its parse
    (the manifest's nodes.<node>.trace_kept, mwinv-trace capture --keep-trace), or no such file."""
    if path.with_name(path.name + ".zst").exists():
        return f"{path}: compressed after its parse (--keep-trace zstd): zstd -d {path}.zst restores it"
    manifest = path.parent.parent.parent / "manifest.json"
    try:
        kept = json.loads(manifest.read_text())["nodes"][path.parent.name]["trace_kept"]
    except (OSError, ValueError, KeyError, TypeError):
        kept = None
    if path.parent.parent.name == "kernel" and kept == "drop":
        return (f"{path}: dropped after its parse (--keep-trace drop): its events are in the capture's "
                "kernel_event table")
    return f"{path}: no such file"


def _is_pid(v) -> bool:
    return isinstance(v, int) and 0 <= v < 1 << 31


def process_rows(state: DecodeState, procs: dict[int, dict] | None,
                 role: Callable[[str, str], str | None] | None = None) -> pa.Table:
    """The `process` table: pids seen in the trace, with what the recorder read from /proc; role(cmdline,
    parent's cmdline): the DBMS engine's (Engine.role), else no roles."""
    if procs:   # recorded here: the DBMS's processes and whatever they forked
        pids = set(procs)
        for child in sorted(state.forks, key=state.first_ts.get):
            if state.forks[child] in pids:
                pids.add(child)
        pids = sorted(pids)
    else:       # a trace from elsewhere: every process it names
        procs = {}
        pids = sorted(set(state.comms) | set(state.forks))
    rows = []
    for pid in filter(_is_pid, pids):   # a text trace's corrupt line may name any number (its parse says so)
        p = procs.get(pid, {})
        cmd = p.get("cmdline", "")
        ppid = p.get("ppid", state.forks.get(pid))
        parent = procs.get(ppid, {})
        role_of = role(cmd, parent.get("cmdline", "")) if role else None
        rows.append({"node": state.node, "pid": pid, "ppid": ppid if _is_pid(ppid) else None,
                     "comm": p.get("comm") or state.comms.get(pid), "role": role_of,
                     "start_ns": state.first_ts.get(pid, p.get("start_ns")), "end_ns": state.exits.get(pid)})
    return table_from_rows(rows, SCHEMAS["process"])


def parse_trace(path: str | os.PathLike, capture: Capture, node: str | None = None,
                procs_file: str | os.PathLike | None = None,
                progress: Callable[[int], None] | None = None,
                role: Callable[[str, str], str | None] | None = None, processes: bool = True) -> ParseResult:
    """Parse `path` into `capture`. On a fault the parts written so far stay; the result names the
    fault (the caller decides whether it is fatal: the CLI exits non-zero). role: the DBMS engine's
    role of a process (Engine.role). processes=False: the events only, no `process` rows (a trace
    without the pid filter, whose events ran in any task's context)."""
    path = Path(path)
    node = node or node_name()
    if path.is_file() and path.stat().st_size == 0:   # a recorder that wrote nothing: a fault, not 0 events
        return ParseResult(0, 0, 0, 0, "unknown", f"{path}: empty file (0 bytes): no trace was written into it")
    state, batches, clock = open_trace(path, node)
    pending: list[pa.RecordBatch] = []
    rows = 0
    fault = None

    def flush():
        nonlocal rows
        if pending:
            # one dictionary per string column and part: Parquet keeps one per column chunk
            capture.write_part("kernel_event", pa.Table.from_batches(pending).unify_dictionaries(), node=node)
            pending.clear()
            rows = 0
        if state.calls:
            capture.write_part("kernel_function_call", pa.concat_tables(state.calls).unify_dictionaries(), node=node)
            state.calls.clear()

    try:
        for rb in batches:
            pending.append(rb)
            rows += rb.num_rows
            if progress:
                progress(state.events)
            if rows + sum(t.num_rows for t in state.calls) >= PART_ROWS:
                flush()
    except TraceFormatError as exc:
        fault = str(exc)
    flush()
    procs = None
    if procs_file and Path(procs_file).exists():
        procs = {int(k): v for k, v in json.loads(Path(procs_file).read_text()).items()}
    if state.stacks:
        capture.write_part("kernel_stack", state.stack_frames(), node=node)
    proc_table = process_rows(state, procs, role) if processes else None
    if proc_table is not None and proc_table.num_rows:
        capture.write_part("process", proc_table, node=node)
    return ParseResult(state.events, len(state.stacks), proc_table.num_rows if processes else 0, state.lost, clock,
                       fault)


def count_events(path: str | os.PathLike) -> int:
    """Events in a trace without writing anything (for benchmarks and checks)."""
    state, batches, _ = open_trace(Path(path), "count")
    return int(np.sum([rb.num_rows for rb in batches]))
