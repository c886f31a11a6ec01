"""Oracle extended SQL trace files into a capture directory: `statement` (one row per execution),
`statement_text`, `session`, and the trace's own account in `dbms_call`, `dbms_wait` and
`plan_operation`. Several files (sessions, RAC instances) go into one capture; each file's node is
the host in its header.

Times: every `*_ns` column of an Oracle node is wall-clock time (UTC nanoseconds, manifest clock
`realtime`): a file's `tim` values are mapped to wall time by one offset, the median over its `***`
timestamp lines (each paired with the first tim written after it); the manifest keeps the offsets'
spread, the drift the file shows."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from mwinv.capture.columns import rows_to_tables
from mwinv.capture.tables import Capture, text_hash
from mwinv.engines.oracle import executions as ex_mod
from mwinv.engines.oracle.trace10046 import TraceFile, parse
from mwinv.engines.sqltext import normalized
from mwinv.errors import MwinvError

DBMS = "oracle"


@dataclass
class Imported:
    path: Path
    node: str
    pid: int | None
    statements: int
    waits: int
    problems: list[str]      # 'FILE:LINE: what' for every malformed or truncated line
    other_lines: int         # lines that are no 10046 record (e.g. an Oracle Net trace's), skipped


def _next_statement_id(capture: Capture) -> int:
    """Statement ids are unique in the capture, not per node: the analysis links a statement to its parent
    by id alone (two hosts' recursive statements numbered alike made a cycle of parents)."""
    if not capture.has("statement"):
        return 1
    return max(capture.read("statement").column("statement_id").to_pylist(), default=0) + 1


def _to_ns(tf: TraceFile, offset_us: int, node_info: dict):
    """tim -> the node's clock: wall-clock ns, or, on a node a kernel capture recorded (clock mono), its
    CLOCK_MONOTONIC by the wall-minus-mono offsets it measured at its start and end (interpolated)."""
    unit = tf.tim_unit_us
    a, b = node_info.get("wall_minus_mono_start"), node_info.get("wall_minus_mono_end")
    if node_info.get("clock") != "mono" or not a:
        return lambda tim: (tim * unit + offset_us) * 1000
    b = b or a
    span = (b["at_ns"] - a["at_ns"]) or 1

    def mono(tim: int) -> int:
        wall = (tim * unit + offset_us) * 1000
        guess = wall - a["offset_ns"]
        return wall - (a["offset_ns"] + (b["offset_ns"] - a["offset_ns"]) * (guess - a["at_ns"]) // span)
    return mono


@dataclass
class _File:
    """One trace file's executions and how its tim values map to the capture's columns."""
    tf: TraceFile
    session: ex_mod.Session
    node: str
    pid: int | None
    ns: Callable[[int], int]       # tim -> the node's clock
    wall: Callable[[int], int]     # tim -> wall-clock ns
    sid: dict[int, int]            # id(execution) -> statement_id

    @property
    def unit_ns(self) -> int:
        return self.tf.tim_unit_us * 1000

    def top_id(self, call) -> int | None:
        """The statement_id of the top-level execution a call belongs to (a CLOSE or LOB call without an
        execution: through the calls it ran inside)."""
        s = self.session
        exn = s.call_execution.get(id(call))
        if exn is None:
            p = s.call_parent.get(id(call))
            while p is not None and id(p) not in s.call_execution:
                p = s.call_parent.get(id(p))
            exn = s.call_execution.get(id(p)) if p is not None else None
        return self.sid[id(exn.top)] if exn is not None else None


def _problems(tf: TraceFile) -> list[str]:
    problems = [f"{tf.path}:{ln}: {what}" for ln, what in tf.malformed]
    if tf.truncated:
        problems.append(f"{tf.path}:{tf.truncated[0]}: truncated ({tf.truncated[1]})")
    if tf.os_pid is None:
        problems.append(f"{tf.path}:1: no 'Unix process pid:' header line: the OS pid is unknown "
                        "(the kernel side cannot be joined)")
    return problems


def _client_time(f: _File) -> Callable[[ex_mod.Execution], int]:
    """An execution's client time: between its calls, the client's waits, and (dep 0 only) the calls in
    its window that are in no call of its: other cursors', and recursive calls that ran between its
    calls, which are their own statements'."""
    top = sorted((c for c in f.tf.calls if c.dep == 0 or id(c) not in f.session.call_parent), key=lambda c: c.start)
    top_starts = [c.start for c in top]
    top_e = list(accumulate((c.e for c in top), initial=0))
    idle = sorted((w.tim, w.ela) for w in f.tf.waits if ex_mod.component(w.name) == "client_wait")
    idle_tims = [t for t, _ in idle]
    idle_ela = list(accumulate((e for _, e in idle), initial=0))

    def client_time(e) -> int:
        start, end = e.start, e.end
        lo, hi = bisect.bisect_right(idle_tims, start), bisect.bisect_right(idle_tims, end)
        t = idle_ela[hi] - idle_ela[lo]
        if e.dep == 0:
            lo, hi = bisect.bisect_left(top_starts, start), bisect.bisect_right(top_starts, end)
            while hi > lo and top[hi - 1].tim > end:
                hi -= 1
            t += top_e[hi] - top_e[lo] - sum(c.e for c in e.calls)
        return min(t, end - start)
    return client_time


def _statement_rows(f: _File) -> tuple[list[dict], list[dict]]:
    """`statement` (one row per execution) and `statement_text` rows."""
    tf, unit = f.tf, f.unit_ns
    first_session = tf.sessions[0] if tf.sessions else {}
    database = tf.header.get("container") or first_session.get("service_name")
    client_time = _client_time(f)
    statements, texts, seen_text = [], [], set()
    for e in f.session.executions:
        text = e.parsing.text if e.parsing else f"(cursor #{e.cursor}: its PARSING IN CURSOR is not in {tf.path.name})"
        h = text_hash(text)
        qid = text_hash(normalized(text))
        if h not in seen_text:
            seen_text.add(h)
            texts.append({"query_text_hash": h, "query_id": qid, "text": text})
        statements.append({
            "node": f.node, "dbms": DBMS, "pid": f.pid, "leader_pid": None, "statement_id": f.sid[id(e)],
            "parent_statement_id": f.sid[id(e.parent)] if e.parent is not None else None,
            "query_id": qid, "query_text_hash": h, "database": database,
            "username": f"uid={e.parsing.uid}" if e.parsing and e.parsing.uid is not None else None,
            "start_ns": f.ns(e.start), "end_ns": f.ns(e.end), "start_wall_ns": f.wall(e.start), "plan_ns": None,
            "parse_ns": sum(c.e for c in e.calls if c.kind == "PARSE") * unit,
            "client_wait_ns": client_time(e) * unit,
            "cpu_user_ns": sum(c.c for c in e.calls) * unit, "cpu_sys_ns": None,
            "rows": sum(c.r for c in e.calls if c.kind in ("EXEC", "FETCH")),
            "nesting_level": e.dep, "errored": e.errored,
        })
    return statements, texts


def _call_rows(f: _File) -> list[dict]:
    """`dbms_call`: every call, and the XCTEND and ERROR lines as zero-length calls."""
    file, unit = str(f.tf.path), f.unit_ns
    calls = []
    for c in f.tf.calls:
        exn = f.session.call_execution.get(id(c))
        calls.append({
            "node": f.node, "pid": f.pid, "file": file, "line": c.line, "cursor": c.cursor, "call": c.kind,
            "dep": c.dep, "statement_id": f.sid[id(exn)] if exn is not None else None,
            "top_statement_id": f.top_id(c), "start_ns": f.ns(c.start), "end_ns": f.ns(c.tim),
            "c_ns": c.c * unit, "e_ns": c.e * unit, "p": c.p, "cr": c.cr, "cu": c.cu, "mis": c.mis, "r": c.r,
            "og": c.og, "plh": c.plh, "detail": c.detail, "binds": c.binds,
            "sql_id": exn.parsing.sqlid if exn is not None and exn.parsing else None,
        })
    for ev in f.tf.events:
        calls.append({"node": f.node, "pid": f.pid, "file": file, "line": ev.line, "cursor": ev.cursor,
                      "call": ev.kind, "dep": None, "start_ns": f.ns(ev.tim), "end_ns": f.ns(ev.tim), "c_ns": 0,
                      "e_ns": 0, "detail": ev.detail})
    return calls


def _wait_rows(f: _File) -> list[dict]:
    file = str(f.tf.path)
    waits = []
    for pw in f.session.waits:
        w = pw.wait
        params = (w.params + [(None, None)] * 3)[:3]
        waits.append({
            "node": f.node, "pid": f.pid, "file": file, "line": w.line, "cursor": w.cursor, "event": w.name,
            "component": ex_mod.component(w.name), "ela_ns": w.ela * f.unit_ns, "end_ns": f.ns(w.tim),
            "p1_name": params[0][0], "p1": params[0][1], "p2_name": params[1][0], "p2": params[1][1],
            "p3_name": params[2][0], "p3": params[2][1], "obj": w.obj,
            "statement_id": f.sid[id(pw.execution)] if pw.execution is not None else None,
            "top_statement_id": f.top_id(pw.call) if pw.call is not None else None, "in_call": pw.call is not None,
            "call_dep": pw.call.dep if pw.call is not None else None,
        })
    return waits


def _plan_rows(f: _File) -> list[dict]:
    plans = []
    for st in f.tf.stats:
        exn = f.session.stat_execution.get(st.line)
        plh = next((c.plh for c in reversed(exn.calls) if c.plh is not None), None) if exn else None
        plans.append({
            "node": f.node, "pid": f.pid, "statement_id": f.sid[id(exn)] if exn else None, "cursor": st.cursor,
            "plh": plh, "id": st.id, "parent_id": st.parent_id, "pos": st.pos, "obj": st.obj,
            "operation": st.operation, "cnt": st.cnt, "cr": st.stats.get("cr"), "pr": st.stats.get("pr"),
            "pw": st.stats.get("pw"), "starts": st.stats.get("str"),
            "time_ns": st.stats["time"] * 1000 if "time" in st.stats else None, "cost": st.stats.get("cost"),
            "size": st.stats.get("size"), "card": st.stats.get("card"),
        })
    return plans


def _update_manifest(capture: Capture, f: _File, info: dict, offsets: tuple[int, int], problems: list[str],
                     statements: list[dict], waits: list[dict]) -> None:
    """The node's entry: the file's account (offset, spread, problems) and, on a node of its own, the
    clock and span of what was imported."""
    tf, file = f.tf, str(f.tf.path)
    files = [x for x in info.get("oracle_files", []) if x.get("path") != file] + [{
        "path": file, "os_pid": f.pid, "lines": tf.lines, "tim_to_wall_offset_us": offsets[0],
        "offset_spread_us": offsets[1], "zone_known": tf.zone_known, "version": ".".join(map(str, tf.version)),
        "instance": tf.header.get("instance"), "sessions": [s.get("session_id") for s in tf.sessions],
        "problems": problems[:20], "statements": len(statements), "other_lines": tf.other_lines,
    }]
    software = {**info.get("software", {}), "oracle": tf.header.get("banner", "")}
    if info.get("clock") == "mono":   # a kernel capture's node: its clock and span stay
        capture.update_manifest(nodes={f.node: {**info, "dbms": DBMS, "software": software, "oracle_files": files}})
        return
    starts = [r["start_ns"] for r in statements] + [r["end_ns"] - r["ela_ns"] for r in waits]
    ends = [r["end_ns"] for r in statements] + [r["end_ns"] for r in waits]
    capture.update_manifest(nodes={f.node: {
        **info, "clock": "realtime", "dbms": DBMS, "software": software,
        "start_ns": min(starts + ([info["start_ns"]] if "start_ns" in info else []), default=None),
        "end_ns": max(ends + ([info["end_ns"]] if "end_ns" in info else []), default=None),
        "oracle_files": files}})


def import_file(capture: Capture, path: str | Path, node: str | None = None, pid: int | None = None,
                clock_offset_s: float = 0.0) -> Imported:
    """One trace file into `capture`. node: the capture's node of the host it came from (a node a kernel
    capture recorded: its statements are then placed on that capture's clock and attributed from the
    kernel's events); pid: the server process's OS pid where the header lacks it (trcsess output);
    clock_offset_s: how far the database host's wall clock was ahead of the capture host's."""
    tf = parse(path)
    if pid is not None:
        tf.os_pid = pid
    problems = _problems(tf)
    node = node or tf.header.get("node_name") or "oracle"
    offset_us, spread_us = tf.wall_offset_us()
    if offset_us is None:
        raise MwinvError(f"{tf.path}:1: no '***' timestamp line followed by a tim= value: its times cannot be "
                         "placed on the wall clock")
    offset_us -= round(clock_offset_s * 1e6)
    session = ex_mod.build(tf)
    info = capture.manifest().get("nodes", {}).get(node, {})
    base = _next_statement_id(capture)
    f = _File(tf, session, node, tf.os_pid, _to_ns(tf, offset_us, info), _to_ns(tf, offset_us, {}),
              {id(e): base + e.seq for e in session.executions})
    statements, texts = _statement_rows(f)
    waits = _wait_rows(f)
    sessions = [{"node": node, "pid": f.pid, "application_name": s.get("module_name"), "client_addr": None,
                 "client_port": None, "backend_start_wall_ns": s.get("wall_ns"), "first_seen_ns": s.get("wall_ns")}
                for s in tf.sessions if s.get("session_id")]
    tables = rows_to_tables(tf.path, (("statement", statements), ("statement_text", texts),
                                      ("dbms_call", _call_rows(f)), ("dbms_wait", waits),
                                      ("plan_operation", _plan_rows(f)), ("session", sessions)))
    for table, data in tables:
        capture.write_part(table, data, node=node)
    _update_manifest(capture, f, info, (offset_us, spread_us), problems, statements, waits)
    return Imported(tf.path, node, f.pid, len(statements), len(waits), problems, tf.other_lines)


def import_files(capture_dir: str | Path, paths: list[str | Path], node: str | None = None, pid: int | None = None,
                 clock_offset_s: float = 0.0, progress=None) -> list[Imported]:
    """Import every file; a file that cannot be read at all stops the import with its error (the
    files imported before it are kept)."""
    cap = Capture(capture_dir)
    cap.create(**({} if cap.manifest() else {"capture_kind": "dbms-trace"}))
    done = []
    for k, p in enumerate(paths):
        if progress:
            progress(f"[{k + 1}/{len(paths)}] {p}")
        done.append(import_file(cap, p, node, pid, clock_offset_s))
    return done
