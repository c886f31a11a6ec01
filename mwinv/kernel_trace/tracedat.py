"""trace.dat (trace-cmd file format version 6): read the metadata and stream the per-CPU pages;
write a trace.dat from raw per-CPU ring-buffer pages (what the recorder reads off trace_pipe_raw),
so `trace-cmd report` can read what mwinv records."""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from mwinv import privfile
from mwinv.errors import MwinvError
from mwinv.kernel_trace.formats import EventFormat, parse_format

MAGIC = b"\x17\x08\x44tracing"
OPT_CPUSTAT, OPT_TRACECLOCK, OPT_UNAME = 2, 4, 5


class TraceFormatError(MwinvError):
    """A fault in a trace file: names the file and the byte offset."""

    def __init__(self, path, offset: int, msg: str):
        super().__init__(f"{path}: offset {offset}: {msg}")
        self.offset = offset


@dataclass
class CpuData:
    cpu: int
    offset: int
    size: int


@dataclass
class TraceDat:
    path: Path
    page_size: int
    long_size: int
    header_page: str
    header_event: str = ""
    formats: dict[int, EventFormat] = field(default_factory=dict)
    kallsyms: bytes = b""
    cmdlines: dict[int, str] = field(default_factory=dict)
    cpus: list[CpuData] = field(default_factory=list)
    clock: str = "local"
    uname: str = ""
    file_size: int = 0

    def page_layout(self) -> tuple[int, int]:
        """(data offset, commit size) from the header_page format."""
        hp = parse_format("name: header_page\nID: 0\n" + self.header_page)
        return hp.fields["data"].offset, hp.fields["commit"].size


class _Reader:
    def __init__(self, path: Path, f: BinaryIO):
        self.path, self.f = path, f

    def need(self, n: int) -> bytes:
        pos = self.f.tell()
        b = self.f.read(n)
        if len(b) != n:
            raise TraceFormatError(self.path, pos, f"truncated: wanted {n} bytes, file ends")
        return b

    def u16(self) -> int: return struct.unpack("<H", self.need(2))[0]
    def u32(self) -> int: return struct.unpack("<I", self.need(4))[0]
    def u64(self) -> int: return struct.unpack("<Q", self.need(8))[0]

    def cstr(self) -> str:
        pos, out = self.f.tell(), bytearray()
        while (c := self.f.read(1)) not in (b"\0", b""):
            out += c
        if c == b"":
            raise TraceFormatError(self.path, pos, "truncated: unterminated string")
        return out.decode("utf-8", "replace")

    def sized(self, size_bytes: int, what: str) -> bytes:
        pos = self.f.tell()
        n = self.u32() if size_bytes == 4 else self.u64()
        if n > 1 << 32:
            raise TraceFormatError(self.path, pos, f"corrupt {what} size {n}")
        return self.need(n)

    def format(self, data: bytes, system: str) -> EventFormat:
        try:
            return parse_format(data.decode("utf-8", "replace"), system)
        except ValueError as exc:
            raise TraceFormatError(self.path, self.f.tell() - len(data), f"unknown event format ({exc})") from None


def read_tracedat(path: str | os.PathLike) -> TraceDat:
    """Read the metadata of a version-6 trace.dat (the CPU data is streamed by iter_cpu_chunks)."""
    path = Path(path)
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise MwinvError(f"{path}: {exc.strerror}") from None
    with f:
        r = _Reader(path, f)
        if f.read(10) != MAGIC:
            raise TraceFormatError(path, 0, "not a trace.dat file (bad magic)")
        version = r.cstr()
        if version != "6":
            raise TraceFormatError(path, 10, f"trace.dat version {version} is not supported (record with --file-version 6)")
        endian, long_size = r.need(1)[0], r.need(1)[0]
        if endian != 0:
            raise TraceFormatError(path, 12, "big-endian trace.dat is not supported")
        page_size = r.u32()
        if long_size not in (4, 8) or page_size & (page_size - 1) or not 4096 <= page_size <= 1 << 20:
            raise TraceFormatError(path, 12, f"corrupt header (long size {long_size}, page size {page_size})")
        td = TraceDat(path, page_size, long_size, "")
        for tag in ("header_page", "header_event"):
            pos = f.tell()
            if r.cstr() != tag:
                raise TraceFormatError(path, pos, f"expected section {tag!r}")
            data = r.sized(8, tag).decode("utf-8", "replace")
            setattr(td, tag, data)
            if tag == "header_page":   # a corrupt one lost its fields: a KeyError traceback at the first page
                fields = parse_format("name: header_page\nID: 0\n" + data).fields
                missing = [f for f in ("data", "commit") if f not in fields]
                if missing:
                    raise TraceFormatError(path, pos, f"header_page has no field {', '.join(missing)}")
        for _ in range(r.u32()):
            fmt = r.format(r.sized(8, "ftrace format"), "ftrace")
            td.formats[fmt.id] = fmt
        for _ in range(r.u32()):
            system = r.cstr()
            for _ in range(r.u32()):
                fmt = r.format(r.sized(8, "event format"), system)
                td.formats[fmt.id] = fmt
        td.kallsyms = r.sized(4, "kallsyms")
        r.sized(4, "printk formats")
        for line in r.sized(8, "cmdlines").decode("utf-8", "replace").splitlines():
            pid, _, comm = line.partition(" ")
            if pid.isdigit():
                td.cmdlines[int(pid)] = comm
        ncpus = r.u32()
        pos = f.tell()
        tag = r.need(10)
        if tag == b"options  \0":
            while (opt := r.u16()) != 0:
                data = r.sized(4, "option")
                if opt == OPT_TRACECLOCK:
                    td.clock = _selected_clock(data.decode(errors="replace"))
                elif opt == OPT_UNAME:
                    td.uname = data.rstrip(b"\0").decode(errors="replace")
            pos = f.tell()
            tag = r.need(10)
        if tag != b"flyrecord\0":
            raise TraceFormatError(path, pos, f"unsupported data section {tag!r} (only flyrecord)")
        for cpu in range(ncpus):
            td.cpus.append(CpuData(cpu, r.u64(), r.u64()))
        try:  # version 6 keeps the trace_clock file after the CPU table
            td.clock = _selected_clock(r.sized(8, "trace_clock").decode(errors="replace"))
        except TraceFormatError:
            pass
        td.file_size = os.fstat(f.fileno()).st_size
    return td


def _selected_clock(trace_clock: str) -> str:
    for word in trace_clock.split():
        if word.startswith("["):
            return word.strip("[]")
    return trace_clock.strip() or "local"


def iter_cpu_chunks(td: TraceDat, chunk_pages: int = 8192) -> Iterator[tuple[int, int, np.ndarray | None]]:
    """(cpu, file offset, pages as uint8) per chunk, memory-mapped; a CPU section cut short by the
    end of the file yields its whole pages and then (cpu, offset, None) at the fault."""
    with open(td.path, "rb") as f:
        if td.file_size == 0:
            return
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            whole = np.frombuffer(mm, np.uint8)
            for c in td.cpus:
                end = c.offset + c.size
                avail = min(end, td.file_size)
                pos = c.offset
                step = chunk_pages * td.page_size
                while pos + td.page_size <= avail:
                    stop = min(pos + step, avail)
                    stop -= (stop - pos) % td.page_size
                    yield c.cpu, pos, whole[pos:stop]
                    pos = stop
                if end > td.file_size or (c.size % td.page_size and pos < end):
                    yield c.cpu, max(pos, min(c.offset, td.file_size)), None
            del whole
        finally:
            try:
                mm.close()
            except BufferError:  # a caller still holds a view; the map closes when it is freed
                pass


# ---------------------------------------------------------------- writing


def write_tracedat(out: str | os.PathLike, headers: dict[str, bytes], formats: list[tuple[str, str]],
                   cpu_files: list[Path], clock_text: str, kallsyms: bytes, cmdlines: bytes,
                   uname: str, page_size: int = 4096) -> None:
    """Assemble a version-6 trace.dat from per-CPU raw page files.

    headers: the header_page and header_event texts (tracefs events/header_*);
    formats: (system, format text) of every enabled event."""
    out = Path(out)
    with privfile.replacing(out, tmp=out.with_suffix(".tmp")) as f:
        w = f.write
        w(MAGIC + b"6\0" + bytes([0, 8]) + struct.pack("<I", page_size))
        for tag in ("header_page", "header_event"):
            data = headers[tag]
            w(tag.encode() + b"\0" + struct.pack("<Q", len(data)) + data)
        ftrace = [t for s, t in formats if s == "ftrace"]
        w(struct.pack("<I", len(ftrace)))
        for t in ftrace:
            b = t.encode()
            w(struct.pack("<Q", len(b)) + b)
        systems: dict[str, list[str]] = {}
        for s, t in formats:
            if s != "ftrace":
                systems.setdefault(s, []).append(t)
        w(struct.pack("<I", len(systems)))
        for s, texts in systems.items():
            w(s.encode() + b"\0" + struct.pack("<I", len(texts)))
            for t in texts:
                b = t.encode()
                w(struct.pack("<Q", len(b)) + b)
        w(struct.pack("<I", len(kallsyms)) + kallsyms)
        w(struct.pack("<I", 0))
        w(struct.pack("<Q", len(cmdlines)) + cmdlines)
        w(struct.pack("<I", len(cpu_files)))
        w(b"options  \0")
        clock = clock_text.encode()
        w(struct.pack("<HI", OPT_TRACECLOCK, len(clock)) + clock)
        un = uname.encode() + b"\0"
        w(struct.pack("<HI", OPT_UNAME, len(un)) + un)
        w(struct.pack("<H", 0))
        w(b"flyrecord\0")
        table_pos = f.tell()
        w(b"\0" * 16 * len(cpu_files))
        w(struct.pack("<Q", len(clock)) + clock)
        table = []
        for path in cpu_files:
            pad = (-f.tell()) % page_size
            w(b"\0" * pad)
            start = f.tell()
            with open(path, "rb") as src:
                while chunk := src.read(1 << 22):
                    w(chunk)
            table.append((start, f.tell() - start))
        f.seek(table_pos)
        for start, size in table:
            w(struct.pack("<QQ", start, size))
