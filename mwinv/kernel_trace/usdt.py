"""USDT (stapsdt) probes of an ELF file -> uprobe definitions (`path:offset(semaphore) args`)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

_TYPES = {"1": "u8", "-1": "s8", "2": "u16", "-2": "s16", "4": "u32", "-4": "s32", "8": "u64", "-8": "s64"}
_REG64 = {"rax": "ax", "rbx": "bx", "rcx": "cx", "rdx": "dx", "rsi": "si", "rdi": "di", "rbp": "bp",
          "rsp": "sp", "rip": "ip"}


@dataclass
class UsdtProbe:
    provider: str
    name: str
    location: int      # file offset of the probe instruction
    semaphore: int     # file offset of the semaphore (0: none)
    args: list[str]    # stapsdt argument specs, e.g. "-8@%rbx"


def _reg(r: str) -> str:
    r = r.lstrip("%")
    if r in _REG64:
        return "%" + _REG64[r]
    m = re.match(r"^(r\d+)[dwb]?$", r)
    if m:
        return "%" + m.group(1)
    m = re.match(r"^e?([a-d]x|[sd]i|[bs]p)$", r) or re.match(r"^([a-d])l$", r)
    if m:
        base = m.group(1)
        return "%" + (base + "x" if len(base) == 1 else base)
    return "%" + r


def fetcharg(spec: str) -> str | None:
    """One stapsdt argument (`-8@%rbx`, `8@-144(%rbp)`, `4@$1`) as a uprobe fetch argument."""
    size, _, loc = spec.partition("@")
    t = _TYPES.get(size)
    if t is None:
        return None
    if loc.startswith("$"):
        return f"\\{loc[1:]}:{t}" if loc[1:].lstrip("-").isdigit() else None
    where = _location(loc)
    return f"{where}:{t}" if where else None


def string_fetcharg(spec: str) -> str | None:
    """A stapsdt pointer argument (`8@%rbx`, `8@-144(%rbp)`) as the user-space string it points to."""
    where = _location(spec.partition("@")[2])
    return f"+0({where}):ustring" if where else None


def _location(loc: str) -> str | None:
    """A register or memory operand (`%rbx`, `-144(%rbp)`) as a fetch argument's location."""
    m = re.match(r"^(-?\d*)\((%\w+)\)$", loc)
    if m:
        off = int(m.group(1) or 0)
        return f"{'+' if off >= 0 else '-'}{abs(off)}({_reg(m.group(2))})"
    if loc.startswith("%"):
        return _reg(loc)
    return None   # %rip-relative symbols and the like: not expressible, skipped


def _load_segments(path: Path) -> list[tuple[int, int, int]]:
    """(vaddr, file offset, size) of the LOAD segments, to turn addresses into file offsets."""
    out = subprocess.run(["readelf", "-lW", str(path)], capture_output=True, text=True).stdout
    segs = []
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "LOAD":
            segs.append((int(parts[2], 16), int(parts[1], 16), int(parts[5], 16)))
    return segs


def _file_offset(addr: int, segs: list[tuple[int, int, int]]) -> int:
    for vaddr, off, size in segs:
        if vaddr <= addr < vaddr + size:
            return addr - vaddr + off
    return addr


def usdt_probes(path: str | Path, provider: str | None = None) -> list[UsdtProbe]:
    """The stapsdt notes of `path` (empty when the file or the notes are absent)."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        out = subprocess.run(["readelf", "-nW", str(path)], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return []
    segs = _load_segments(path)
    probes = []
    for block in out.split("stapsdt")[1:]:
        prov = re.search(r"Provider:\s*(\S+)", block)
        name = re.search(r"Name:\s*(\S+)", block)
        loc = re.search(r"Location:\s*(0x[0-9a-f]+)", block)
        sem = re.search(r"Semaphore:\s*(0x[0-9a-f]+)", block)
        args = re.search(r"Arguments:\s*(.*)", block)
        if not (prov and name and loc):
            continue
        if provider and prov.group(1) != provider:
            continue
        sem_addr = int(sem.group(1), 16) if sem else 0
        probes.append(UsdtProbe(prov.group(1), name.group(1), _file_offset(int(loc.group(1), 16), segs),
                                _file_offset(sem_addr, segs) if sem_addr else 0,
                                args.group(1).split() if args else []))
    return probes


def uprobe_target(path: Path, probe: UsdtProbe, arg_names: list[str]) -> tuple[str, str]:
    """(`path:0xoff(0xsem)`, `name=fetcharg ...`) for uprobe_events."""
    target = f"{path}:0x{probe.location:x}" + (f"(0x{probe.semaphore:x})" if probe.semaphore else "")
    args = []
    for name, spec in zip(arg_names, probe.args):
        fa = fetcharg(spec)
        if fa:
            args.append(f"{name}={fa}")
    return target, " ".join(args)


@dataclass(frozen=True)
class ProbeSet:
    """USDT probes of a DBMS that the recorder attaches as uprobes (an engine names them:
    mwinv/engines/<engine>/kernel.py). events: probe name -> event name."""
    what: str                            # the set's name in the recorder's skipped list
    provider: str
    events: dict[str, str]
    library: str | None = None           # the probes' file relative to the DBMS's install prefix (the
                                         # directory above its executable's); None: the executable
    args: tuple[str, ...] = ()           # the probe arguments recorded, by name
    text_events: tuple[str, ...] = ()    # events whose first argument is fetched as a string (a query text)
    per_site: bool = True                # a uprobe per probe site (event_1, event_2, ...: an inlined probe
                                         # has several); False: one, named as the event
