"""Reader of Oracle extended SQL trace files (event 10046 level 8/12, DBMS_MONITOR): every line type
into typed records, line numbers kept for errors.

A call line (PARSE/EXEC/FETCH/CLOSE/UNMAP/SORT UNMAP/LOB...) is written when the call ends: `tim`
is its end and `tim - e` its start (microseconds since 9i, centiseconds before). A WAIT line is
written when the wait ends; the waits of a call come before the call's line, as do the calls of
recursive SQL (dep > 0) it ran. Which call contains what is decided afterwards, by time
(`executions.py`), not by line order: line order alone misplaces the waits that happen before the
PARSING IN CURSOR of the statement they belong to."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from mwinv.errors import MwinvError

CALL_KINDS = ("PARSE", "EXEC", "FETCH", "CLOSE", "UNMAP", "SORT UNMAP")
# Calls without a cursor (LOB API calls): LOBREAD, LOBWRITE, LOBTMPCREATE, LOBPGSIZE, ...
_LOB_CALL = re.compile(r"^(LOB[A-Z]+): (.*)$")
_CALL = re.compile(r"^(PARSE|EXEC|FETCH|CLOSE|UNMAP|SORT UNMAP) #(\d+)[: ](.*)$")
_WAIT = re.compile(r"^WAIT #(\d+): nam='(.*)' ela=\s*(-?\d+)(.*)$")
_PARSING = re.compile(r"^PARSING IN CURSOR #(\d+) (.*)$")
_PARSE_ERROR = re.compile(r"^PARSE ERROR #(\d+):(.*)$")
_STAT = re.compile(r"^STAT #(\d+) id=(\d+) cnt=(\d+) pid=(\d+) pos=(\d+) obj=(-?\d+) op='(.*?)\s*\((cr=.*)\)'$")
_BINDS = re.compile(r"^BINDS #(\d+):\s*$")
_BIND_VALUE = re.compile(r"^\s+value=(.*)$")
_BIND_HEAD = re.compile(r"^\s*Bind#(\d+)")
_ERROR = re.compile(r"^ERROR #(\d+):err=(\d+) tim=(\d+)")
_XCTEND = re.compile(r"^XCTEND (.*)$")
_KV = re.compile(r"([a-z#]+)=('[^']*'|[^,\s]+)")
# `*** 2019-07-09T09:57:07.704095-07:00 (PDB(8))` (12c+), `*** 2017-02-09 13:12:59.339` (11g and
# before); the same forms end the `*** SESSION ID:(...)` family of lines
_STAMP = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d(?:\.\d+)?)([+-]\d\d:\d\d|Z)?")
_CONTAINER = re.compile(r"\(([^()\s]+)\(\d+\)\)\s*$")   # `(EXAMPLESPDB(8))`: the PDB
_SESSION_ATTR = re.compile(r"^\*\*\* ([A-Z ]+):\((.*)\)\s*(.*)$")
_HEADER = {
    "Trace file": "trace_file", "Node name": "node_name", "Instance name": "instance",
    "Oracle process number": "oracle_process", "System name": "system", "Release": "os_release",
    "Version": "os_version", "Machine": "machine", "ORACLE_HOME": "oracle_home", "Build label": "build",
}
# The events a session spends between database calls, waiting for its client: never inside a call.
BETWEEN_CALL_EVENTS = frozenset({"SQL*Net message from client", "SQL*Net vector message from client"})


@dataclass
class Call:
    line: int
    kind: str               # PARSE, EXEC, FETCH, CLOSE, UNMAP, SORT UNMAP, LOBREAD, ...
    cursor: int             # 0 for LOB calls
    c: int                  # CPU, µs
    e: int                  # elapsed, µs
    dep: int
    tim: int                # end of the call, µs on the trace's clock
    p: int = 0
    cr: int = 0
    cu: int = 0
    mis: int = 0
    r: int = 0
    og: int | None = None
    plh: int | None = None
    detail: str | None = None   # CLOSE type, LOB type and bytes
    binds: list[str] | None = None

    @property
    def start(self) -> int:
        return self.tim - self.e


@dataclass
class Wait:
    line: int
    cursor: int
    name: str
    ela: int                # µs
    tim: int                # end of the wait
    params: list[tuple[str, str]]   # p1..p3 with the names this event gives them
    obj: int | None


@dataclass
class Parsing:
    line: int
    cursor: int
    dep: int
    tim: int
    text: str
    sqlid: str | None
    hv: int | None
    oct: int | None
    uid: int | None
    error: int | None = None    # PARSE ERROR's err=


@dataclass
class Stat:
    line: int
    cursor: int
    id: int
    parent_id: int
    pos: int
    obj: int
    operation: str
    cnt: int
    stats: dict[str, int]       # cr pr pw str time(us) cost size card


@dataclass
class Event:                    # XCTEND, ERROR
    line: int
    kind: str
    cursor: int
    tim: int
    detail: str


@dataclass
class TraceFile:
    path: Path
    header: dict[str, str] = field(default_factory=dict)
    os_pid: int | None = None
    version: tuple[int, ...] = ()
    calls: list[Call] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)
    parsings: list[Parsing] = field(default_factory=list)
    stats: list[Stat] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    sessions: list[dict] = field(default_factory=list)  # SESSION ID and the attributes after it
    stamps: list[tuple[int, int, int]] = field(default_factory=list)  # (line, wall ns UTC, next tim µs)
    zone_known: bool = True
    malformed: list[tuple[int, str]] = field(default_factory=list)  # (line, what)
    truncated: tuple[int, str] | None = None
    lines: int = 0
    # lines that are neither a 10046 record nor a header field, skipped: the banner, oradebug's output,
    # and what other events write into the same file (an Oracle Net trace, event 10079, with its memory
    # dumps: 3,040 of the 3,107 lines of tests/golden/oracle_10046/jkstill_js02_ora_23952_VARCHAR-10046.trc)
    other_lines: int = 0

    @property
    def tim_unit_us(self) -> int:
        """tim, c and e are microseconds since Oracle 9i, centiseconds before."""
        return 10_000 if self.version and self.version[0] < 9 else 1

    def wall_offset_us(self) -> tuple[int | None, int]:
        """(wall µs − tim µs, spread µs): the median over the timestamp lines, each paired with the
        first tim written after it, and how far the pairs spread (the drift the file shows)."""
        offs = sorted(wall // 1000 - tim * self.tim_unit_us for _, wall, tim in self.stamps if tim is not None)
        if not offs:
            return None, 0
        return offs[len(offs) // 2], offs[-1] - offs[0]


def _ints(text: str) -> dict[str, str]:
    return {k: v for k, v in _KV.findall(text)}


def _int(v: str | None, default=0) -> int:
    if v is None or v == "":
        return default
    return int(v)


def _stamp_ns(text: str) -> tuple[int, bool] | None:
    m = _STAMP.search(text)
    if not m:
        return None
    day, clock, zone = m.groups()
    try:
        dt = datetime.fromisoformat(f"{day}T{clock}")
    except ValueError:
        return None
    known = zone is not None
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        dt = dt.replace(tzinfo=timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))))
    else:
        dt = dt.replace(tzinfo=timezone.utc)   # no zone written: taken as UTC, and said so
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000, known


def _wait_params(rest: str) -> tuple[list[tuple[str, str]], int | None, int | None]:
    """` driver id=1413697536 #bytes=1 p3=0 obj#=-1 tim=664028734818` → params, obj, tim. Parameter
    names may hold spaces (`handle address`, `100*mode+namespace`): a name is everything up to its '='."""
    params, obj, tim = [], None, None
    for m in re.finditer(r"\s*([^=]+?)=(\S*)", rest):
        name, value = m.group(1).strip(), m.group(2)
        if name == "obj#":
            obj = int(value)
        elif name == "tim":
            tim = int(value)
        else:
            params.append((name, value))
    return params, obj, tim


class _Reader:
    """One pass over a file's lines: each record type read by its own method, the line number kept."""

    def __init__(self, path: Path, lines: list[str], ends_clean: bool):
        self.lines, self.n, self.ends_clean = lines, len(lines), ends_clean
        self.i = 0
        self.tf = TraceFile(path, lines=len(lines))
        self.pending_stamp: list[int] = []        # indexes into tf.stamps waiting for their first tim
        self.binds: dict[int, list[str]] = {}     # cursor -> values of its last BINDS, for the next EXEC
        self.bind_cursor: int | None = None
        self.seen_oracle = False

    def got_tim(self, tim: int) -> None:
        for k in self.pending_stamp:
            ln, wall, _ = self.tf.stamps[k]
            self.tf.stamps[k] = (ln, wall, tim)
        self.pending_stamp.clear()

    def bad(self, lineno: int, what: str) -> None:
        if lineno == self.n and not self.ends_clean:
            self.tf.truncated = (lineno, what)
        else:
            self.tf.malformed.append((lineno, what))

    def step(self) -> None:
        line = self.lines[self.i].rstrip("\r")
        lineno = self.i + 1
        self.i += 1
        if not line.strip():
            return
        if self.bind_cursor is not None and (line.startswith(" ") or line.startswith("\t")):
            mv = _BIND_VALUE.match(line)
            if mv:
                self.binds[self.bind_cursor].append(mv.group(1))
            elif "No oacdef" in line:
                self.binds[self.bind_cursor].append("")
            return
        if not line.startswith("***"):
            self.bind_cursor = None
        if line.startswith("WAIT #"):
            return self.wait(line, lineno)
        m = _CALL.match(line)
        if m:
            return self.call(m, lineno)
        if line.startswith("STAT #"):
            return self.stat(line, lineno)
        if line.startswith("==="):
            return
        m = _PARSING.match(line) or _PARSE_ERROR.match(line)
        if m:
            return self.parsing(m, line.startswith("PARSE ERROR"), lineno)
        m = _BINDS.match(line)
        if m:
            self.bind_cursor = int(m.group(1))
            self.binds[self.bind_cursor] = []
            return
        if line.startswith(" Bind#") or _BIND_HEAD.match(line):
            return
        m = _LOB_CALL.match(line)
        if m:
            return self.lob_call(m, lineno)
        if self.event(line, lineno):
            return
        if line.startswith("***"):
            return self.stamp_line(line, lineno)
        self.header_line(line)

    def wait(self, line: str, lineno: int) -> None:
        m = _WAIT.match(line)
        if not m:
            return self.bad(lineno, "malformed WAIT line")
        params, obj, tim = _wait_params(m.group(4))
        if tim is None:
            return self.bad(lineno, "WAIT line without tim=")
        self.tf.waits.append(Wait(lineno, int(m.group(1)), m.group(2), int(m.group(3)), tim, params, obj))
        self.got_tim(tim)

    def call(self, m: re.Match, lineno: int) -> None:
        kv = _ints(m.group(3))
        if "e" not in kv or "tim" not in kv or "c" not in kv:
            return self.bad(lineno, f"malformed {m.group(1)} line")
        try:
            call = Call(lineno, m.group(1), int(m.group(2)), _int(kv.get("c")), _int(kv.get("e")),
                        _int(kv.get("dep")), int(kv["tim"]), _int(kv.get("p")), _int(kv.get("cr")),
                        _int(kv.get("cu")), _int(kv.get("mis")), _int(kv.get("r")),
                        _int(kv.get("og"), None), _int(kv.get("plh"), None),
                        f"type={kv['type']}" if "type" in kv else None)
        except ValueError:
            return self.bad(lineno, f"malformed {m.group(1)} line")
        if call.kind == "EXEC":
            call.binds = self.binds.pop(call.cursor, None)
        self.tf.calls.append(call)
        self.got_tim(call.tim)

    def stat(self, line: str, lineno: int) -> None:
        m = _STAT.match(line)
        if not m:
            return self.bad(lineno, "malformed STAT line")
        st = {k: _int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", m.group(8))}
        self.tf.stats.append(Stat(lineno, int(m.group(1)), int(m.group(2)), int(m.group(4)), int(m.group(5)),
                                  int(m.group(6)), m.group(7).strip(), int(m.group(3)), st))

    def parsing(self, m: re.Match, is_error: bool, lineno: int) -> None:
        kv = _ints(m.group(2))
        sql, closed = [], False
        while self.i < self.n:
            t = self.lines[self.i].rstrip("\r")
            if t == "END OF STMT":
                self.i, closed = self.i + 1, True
                break
            if is_error and (not t.strip() or _CALL.match(t) or t.startswith(("WAIT #", "***", "==="))):
                closed = True      # a PARSE ERROR's text has no END OF STMT: it ends at the next record
                break
            sql.append(t)
            self.i += 1
        if not closed or "tim" not in kv:
            self.bad(lineno if closed else self.n, "PARSING IN CURSOR without END OF STMT" if not closed
                     else "PARSING IN CURSOR without tim=")
            if not closed:
                self.tf.truncated = (lineno, "the file ends inside the text of the statement parsed here")
            return
        try:
            self.tf.parsings.append(Parsing(
                lineno, int(m.group(1)), _int(kv.get("dep")), int(kv["tim"]), "\n".join(sql),
                kv.get("sqlid", "").strip("'") or None, _int(kv.get("hv"), None), _int(kv.get("oct"), None),
                _int(kv.get("uid"), None), _int(kv.get("err"), None) if is_error else None))
        except ValueError:
            return self.bad(lineno, "malformed PARSING IN CURSOR line")
        self.got_tim(int(kv["tim"]))

    def lob_call(self, m: re.Match, lineno: int) -> None:
        kv = _ints(m.group(2))
        if "e" not in kv or "tim" not in kv:
            return self.bad(lineno, f"malformed {m.group(1)} line")
        lob = re.search(r"type=([^,]*)", m.group(2))
        self.tf.calls.append(Call(lineno, m.group(1), 0, _int(kv.get("c")), _int(kv.get("e")), 0, int(kv["tim"]),
                                  _int(kv.get("p")), _int(kv.get("cr")), _int(kv.get("cu")),
                                  detail=(lob.group(1) if lob else None)))
        self.got_tim(int(kv["tim"]))

    def event(self, line: str, lineno: int) -> bool:
        """ERROR and XCTEND lines; False for any other line."""
        m = _ERROR.match(line)
        if m:
            self.tf.events.append(Event(lineno, "ERROR", int(m.group(1)), int(m.group(3)), f"err={m.group(2)}"))
            self.got_tim(int(m.group(3)))
            return True
        if line.startswith("ERROR #"):
            self.bad(lineno, "malformed ERROR line")
            return True
        m = _XCTEND.match(line)
        if not m:
            return False
        kv = _ints(m.group(1))
        if "tim" not in kv:
            self.bad(lineno, "malformed XCTEND line")
            return True
        self.tf.events.append(Event(lineno, "XCTEND", 0, int(kv["tim"]),
                                    f"rlbk={kv.get('rlbk', '')} rd_only={kv.get('rd_only', '')}"))
        self.got_tim(int(kv["tim"]))
        return True

    def stamp_line(self, line: str, lineno: int) -> None:
        tf = self.tf
        ma = _SESSION_ATTR.match(line)
        stamp = _stamp_ns(line)
        if stamp:
            tf.zone_known = tf.zone_known and stamp[1]
        if ma:
            key, value = ma.group(1).strip().lower().replace(" ", "_"), ma.group(2)
            if key == "session_id":
                tf.sessions.append({"session_id": value, "line": lineno, "wall_ns": stamp[0] if stamp else None})
            elif tf.sessions:
                tf.sessions[-1][key] = value
            else:
                tf.sessions.append({"session_id": None, "line": lineno, key: value})
        elif stamp:
            mc = _CONTAINER.search(line)
            if mc:
                tf.header.setdefault("container", mc.group(1))
            tf.stamps.append((lineno, stamp[0], None))
            self.pending_stamp.append(len(tf.stamps) - 1)
        elif line.startswith("*** [ Unix process pid:"):
            tf.os_pid = _int(re.search(r"pid:\s*(\d+)", line).group(1))   # trcsess output

    def header_line(self, line: str) -> None:
        """The header; any other free text (dumps Oracle writes into the same file) is counted."""
        tf = self.tf
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key in ("Unix process pid", "Windows thread id"):
            mp = re.match(r"\s*(\d+)", value)
            if mp:
                tf.os_pid = int(mp.group(1))
                tf.header["image"] = value.partition("image:")[2].strip()
            return
        if sep and key in _HEADER:
            tf.header.setdefault(_HEADER[key], value.strip())
            return
        if line.startswith("Oracle") and ("Release" in line or "Database" in line):
            self.seen_oracle = True
            tf.header.setdefault("banner", line.strip())
            mv = re.search(r"Release (\d+(?:\.\d+)*)", line)
            if mv:
                tf.version = tuple(int(x) for x in mv.group(1).split("."))
            return
        if line.startswith("Version ") and re.match(r"Version \d", line):
            tf.version = tuple(int(x) for x in line.split()[1].split("."))   # 18c+: the full version
            return
        tf.other_lines += 1


def parse(path: str | Path) -> TraceFile:
    """Read one trace file. Malformed lines are kept in `malformed` (line, what) and skipped; a file
    that ends inside a record sets `truncated`; the caller decides what is fatal. A file that is not
    an Oracle trace at all raises MwinvError naming it."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise MwinvError(f"{p}: cannot read ({exc.strerror})") from None
    text = raw.decode("utf-8", errors="replace")
    lines = text.split("\n")
    ends_clean = text.endswith("\n")
    if ends_clean:
        lines.pop()
    r = _Reader(p, lines, ends_clean)
    while r.i < r.n:
        at = r.i
        try:
            r.step()
        except (ValueError, OverflowError):   # a number that is not one, a date that is not one
            r.bad(at + 1, "malformed line")
            r.i = max(r.i, at + 1)
    tf = r.tf
    if not (r.seen_oracle or tf.os_pid or tf.calls or tf.waits or tf.parsings):
        raise MwinvError(f"{p}: not an Oracle SQL trace (no header, call or WAIT line in {len(lines)} lines)")
    return tf
