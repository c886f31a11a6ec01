"""From a trace file's lines to executions: a statement is one EXEC with its FETCHes (the PARSE
just before it and the CLOSE after it), recursive executions (dep > 0) linked to the call they ran inside, every wait placed
in the deepest call that contains it by time, or between calls.

Containment is by time because a call's line is written when it ends, after the waits and recursive
calls inside it: a call of depth d contains the depth-(d+1) lines whose end lies in [tim - e, tim].
Calls of one depth never overlap (a server process runs one call at a time), so the candidate is the
first call of that depth ending at or after the line's end."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from mwinv.engines.oracle.trace10046 import BETWEEN_CALL_EVENTS, Call, Parsing, TraceFile

EXECUTION_CALLS = ("PARSE", "EXEC", "FETCH")


def fetch_calls(rows: int, array_size: int) -> int:
    """Fetch calls an execution of `rows` rows makes with an array of `array_size`: the client fetches
    until a call returns fewer rows than the array holds, so the last call is partial or empty (every
    multi-fetch execution in tests/golden/oracle_10046 fetched rows // N + 1 times)."""
    return rows // array_size + 1
ENDS_CURSOR = ("CLOSE", "UNMAP", "SORT UNMAP")


@dataclass
class Execution:
    seq: int
    cursor: int
    parsing: Parsing | None
    dep: int
    calls: list[Call] = field(default_factory=list)
    parent: "Execution | None" = None
    errored: bool = False
    between_calls: bool = False   # ran between its parent's calls, not inside one: its own work, not the parent's

    @property
    def has_exec(self) -> bool:
        return any(c.kind in ("EXEC", "FETCH") for c in self.calls)

    @property
    def start(self) -> int:
        return min(c.start for c in self.calls)

    @property
    def end(self) -> int:
        return max(c.tim for c in self.calls)

    @property
    def top(self) -> "Execution":
        """The outermost execution whose calls contain this one's (itself where it ran between calls)."""
        e = self
        while e.parent is not None and not e.between_calls:
            e = e.parent
        return e


@dataclass
class PlacedWait:
    wait: object
    call: Call | None           # the deepest call containing it; None between calls
    execution: Execution | None  # that call's execution, or (between calls) the open execution of its cursor


@dataclass
class Session:
    """One trace file's executions, with every call and wait placed."""
    trace: TraceFile
    executions: list[Execution]
    call_execution: dict[int, Execution]      # id(call) -> execution
    call_parent: dict[int, Call]              # id(call) -> the call it ran inside
    waits: list[PlacedWait]
    stat_execution: dict[int, Execution]      # STAT line -> execution


class _ByDepth:
    """Calls of each depth sorted by end, for 'which call of depth d contains time t'."""

    def __init__(self, calls: list[Call]):
        self.depth: dict[int, list[Call]] = {}
        for c in calls:
            self.depth.setdefault(c.dep, []).append(c)
        self.ends = {}
        for d, cs in self.depth.items():
            cs.sort(key=lambda c: (c.tim, c.line))
            self.ends[d] = [c.tim for c in cs]

    def containing(self, depth: int, t: int, not_before_line: int | None = None) -> Call | None:
        ends = self.ends.get(depth)
        if not ends:
            return None
        k = bisect.bisect_left(ends, t)
        cs = self.depth[depth]
        while k < len(cs):
            c = cs[k]
            if not_before_line is not None and c.line < not_before_line:
                k += 1          # a call written before the line cannot contain it
                continue
            return c if c.start <= t else None
        return None

    def deepest(self, t: int, line: int) -> Call | None:
        """Every depth is searched: a recursive call can run between its parent's calls, in no call above."""
        found = None
        for d in sorted(self.depth):
            found = self.containing(d, t, line) or found
        return found


def build(trace: TraceFile) -> Session:
    # cursor numbers are reused: a call belongs to the latest PARSING IN CURSOR of its number before it
    parsings = sorted(trace.parsings, key=lambda p: p.line)
    items = sorted([("P", p.line, p) for p in parsings] + [("C", c.line, c) for c in trace.calls]
                   + [("E", e.line, e) for e in trace.events] + [("W", w.line, w) for w in trace.waits]
                   + [("S", s.line, s) for s in trace.stats], key=lambda x: x[1])
    current: dict[int, Parsing] = {}
    open_exec: dict[int, Execution] = {}
    last_exec: dict[int, Execution] = {}
    executions: list[Execution] = []
    call_execution: dict[int, Execution] = {}
    wait_open: dict[int, Execution] = {}   # id(wait) -> the execution open on its cursor when it was written
    stat_execution: dict[int, Execution] = {}

    def new(cursor: int, dep: int) -> Execution:
        ex = Execution(len(executions), cursor, current.get(cursor), dep)
        executions.append(ex)
        open_exec[cursor] = last_exec[cursor] = ex
        return ex

    for kind, _, item in items:
        if kind == "P":
            current[item.cursor] = item
            open_exec.pop(item.cursor, None)
        elif kind == "C":
            c: Call = item
            if c.kind not in EXECUTION_CALLS:
                ex = open_exec.pop(c.cursor, None) if c.kind in ENDS_CURSOR else None
                if ex is not None:   # the cursor's close is its execution's work (tkprof leaves it out)
                    ex.calls.append(c)
                    call_execution[id(c)] = ex
                continue
            ex = open_exec.get(c.cursor)
            if c.kind == "PARSE" or ex is None or (c.kind == "EXEC" and ex.has_exec):
                ex = new(c.cursor, c.dep)
            ex.calls.append(c)
            call_execution[id(c)] = ex
        elif kind == "E":
            ex = open_exec.get(item.cursor)
            if item.kind == "ERROR" and ex is not None:
                ex.errored = True
        elif kind == "W":
            if item.cursor in open_exec:
                wait_open[id(item)] = open_exec[item.cursor]
        elif kind == "S":
            ex = last_exec.get(item.cursor)
            if ex is not None:
                stat_execution[item.line] = ex

    by_depth = _ByDepth(list(trace.calls))
    call_parent: dict[int, Call] = {}
    for c in trace.calls:
        if c.dep > 0:
            p = by_depth.containing(c.dep - 1, c.tim, c.line)
            if p is not None:
                call_parent[id(c)] = p
    for ex in executions:
        first = min(ex.calls, key=lambda c: c.line)
        p = call_parent.get(id(first))
        while p is not None and id(p) not in call_execution:
            p = call_parent.get(id(p))   # ran inside a CLOSE or LOB call: the execution above that
        ex.parent = call_execution.get(id(p)) if p is not None else None
    _link_between_calls(executions)

    placed = []
    for w in trace.waits:
        call = None if w.name in BETWEEN_CALL_EVENTS else by_depth.deepest(w.tim, w.line)
        ex = call_execution.get(id(call)) if call is not None else wait_open.get(id(w))
        if call is not None and ex is None:
            p = call_parent.get(id(call))
            while p is not None and id(p) not in call_execution:
                p = call_parent.get(id(p))
            ex = call_execution.get(id(p)) if p is not None else None
        placed.append(PlacedWait(w, call, ex))
    return Session(trace, executions, call_execution, call_parent, placed, stat_execution)


def _link_between_calls(executions: list[Execution]) -> None:
    """A recursive execution in no call of the depth above (it ran between its parent's fetches, e.g. a
    commit's recursive work) is linked to the execution of that depth whose window holds it, the latest
    to start, and marked as having run between that one's calls."""
    by_dep: dict[int, list[Execution]] = {}
    for ex in executions:
        by_dep.setdefault(ex.dep, []).append(ex)
    for exs in by_dep.values():
        exs.sort(key=lambda x: x.start)
    starts = {d: [x.start for x in exs] for d, exs in by_dep.items()}
    for ex in executions:
        if ex.dep == 0 or ex.parent is not None:
            continue
        above = by_dep.get(ex.dep - 1, [])
        k = bisect.bisect_right(starts.get(ex.dep - 1, []), ex.start)
        holder = next((x for x in reversed(above[:k]) if x.end >= ex.end), None)
        if holder is not None:
            ex.parent, ex.between_calls = holder, True


# Oracle wait events -> attribution components (docs/oracle.md); first match wins, the rest other_wait.
_COMPONENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("client_wait", ("SQL*Net message from client", "SQL*Net vector message from client")),
    ("lock_wait", ("enq:", "latch", "library cache", "row cache", "cursor:", "buffer busy", "gc buffer busy",
                   "mutex", "lock deadlock", "DFS lock", "kksfbc")),
    ("remote_wait", ("gc ",)),
    ("network", ("SQL*Net", "TCP Socket")),
    ("disk_random", ("db file sequential read", "db file parallel read", "db file single write",
                     "control file sequential read", "db flash cache single block", "cell single block",
                     "read by other session", "free buffer waits")),
    ("disk_seq", ("db file scattered read", "direct path read", "direct path write", "cell multiblock",
                  "cell smart", "db flash cache multiblock", "log file sync", "log file parallel write",
                  "db file parallel write", "control file parallel write")),
)


def component(event: str) -> str:
    for comp, prefixes in _COMPONENTS:
        if any(event.startswith(p) for p in prefixes):
            return comp
    if "dblink" in event:
        return "network"
    return "other_wait"
