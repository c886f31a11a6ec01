"""Tracefs event `format` files: field names, offsets, sizes, and the sched_switch state letters."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_FIELD = re.compile(r"field:(?P<decl>[^;]+);\s*offset:(?P<off>\d+);\s*size:(?P<size>\d+);(?:\s*signed:(?P<signed>\d+);)?")


@dataclass(frozen=True)
class Field:
    name: str
    offset: int
    size: int
    signed: bool
    is_string: bool      # fixed char array
    is_data_loc: bool    # __data_loc: u32 = (length << 16) | offset
    array_len: int       # > 1 for fixed arrays


@dataclass
class EventFormat:
    id: int
    system: str
    name: str
    fields: dict[str, Field] = field(default_factory=dict)
    print_fmt: str = ""

    def common(self, f: Field) -> bool:
        return f.name.startswith("common_")


def parse_format(text: str, system: str = "") -> EventFormat:
    """One `format` file (as in events/<system>/<event>/format and in trace.dat)."""
    name = re.search(r"^name:\s*(\S+)", text, re.M)
    ev_id = re.search(r"^ID:\s*(\d+)", text, re.M)
    if not name or not ev_id:
        raise ValueError("no name/ID line")
    fmt = EventFormat(int(ev_id.group(1)), system, name.group(1))
    for m in _FIELD.finditer(text):
        decl = m.group("decl").strip()
        is_data_loc = decl.startswith("__data_loc")
        arr = re.search(r"\[(\d*)\]\s*$", decl)
        fname = re.sub(r"\[.*\]\s*$", "", decl).split()[-1]
        size = int(m.group("size"))
        is_char = bool(re.search(r"\bchar\b", decl))
        array_len = int(arr.group(1)) if arr and arr.group(1) else 1
        fmt.fields[fname] = Field(fname, int(m.group("off")), size, m.group("signed") == "1",
                                  is_char and bool(arr) and not is_data_loc, is_data_loc, array_len)
    pf = re.search(r"^print fmt:\s*(.*)$", text, re.M)
    fmt.print_fmt = pf.group(1) if pf else ""
    return fmt


# sched_switch prev_state: letters of the TASK_REPORT bits; a bit above them means "preempted" (R+).
_DEFAULT_STATE_BITS = [(0x01, "S"), (0x02, "D"), (0x04, "T"), (0x08, "t"), (0x10, "X"), (0x20, "Z"),
                       (0x40, "P"), (0x80, "I")]


def state_bits(print_fmt: str) -> list[tuple[int, str]]:
    """The (bit, letter) pairs of sched_switch's __print_flags, from the kernel's own print fmt."""
    pairs = re.findall(r'\{\s*(0x[0-9a-fA-F]+|\d+)\s*,\s*"(\w)"\s*\}', print_fmt)
    return [(int(v, 0), c) for v, c in pairs] or _DEFAULT_STATE_BITS


def state_text(value: int, bits: list[tuple[int, str]]) -> str:
    preempted = max(b for b, _ in bits) << 1   # the kernel's own "+" test: prev_state & (max << 1)
    letters = "|".join(c for b, c in bits if value & b) or "R"
    return letters + ("+" if value & preempted else "")
