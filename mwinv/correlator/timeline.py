"""The capture as a timeline in the Trace Event format (JSON), which Perfetto UI and chrome://tracing open.

One process per node, one thread per backend; each top-level statement a complete slice ("X") with its
attributed components laid end to end under it (their ns sum to the statement's wall time, so they fill
it: the order is ATTRIBUTION_COMPONENTS', not when each happened), its hottest kernel functions in its
args; a data node's statements joined to the coordinator statement they served by a flow ("s"/"f",
statement_link); each node's samples as counters ("C": CPU %, disk and network MiB/s). A renderer: it
reads the derived tables of a correlated session and writes nothing into the capture.

Data nodes' times are put on the coordinator's clock with their offset measured at the capture's start
(links.node_clocks; the drift over a capture is µs). Bounded: the `top` longest statements within an
optional time range, and the remote statements linked to them; the limits are in the output's
otherData and returned for the caller to say."""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace

from mwinv.capture.tables import ATTRIBUTION_COMPONENTS
from mwinv.correlator.links import node_clocks
from mwinv.correlator.load import CaptureDB, literal
from mwinv.errors import MwinvError

DEFAULT_TOP = 500          # statements; a slice each plus its components: ~5 MB of JSON at 500
FUNCTIONS_PER_STATEMENT = 5
TEXT_ARG_CHARS = 2000      # the statement's text in its args; the slice's name is its first line


@dataclass
class Timeline:
    events: list[dict]
    meta: dict    # what was shown and what was left out (also the output's otherData.mwinv)

    def json(self) -> str:
        return json.dumps({"traceEvents": self.events, "displayTimeUnit": "ms", "otherData": {"mwinv": self.meta}})

    def summary(self) -> str:
        m = self.meta
        lo, hi = m["range_s"] or (None, None)
        rng = ("the whole capture" if lo is None else f"{lo:g}-{hi:g} s" if hi is not None else f"{lo:g} s on")
        return (f"{m['statements_shown']:,} of {m['statements_total']:,} top-level statements (the longest "
                f"{m['top']:,} in {rng}) and {m['remote_shown']:,} remote statements linked to them, "
                f"{m['flows']:,} flows, {m['counters']:,} counter samples")


def parse_range(text: str | None) -> tuple[float, float | None] | None:
    """'FROM:TO' seconds from the capture's first statement ('10:' open-ended) -> (from, to or None)."""
    if not text:
        return None
    a, sep, b = text.partition(":")
    try:
        lo = float(a) if a else 0.0
        hi = float(b) if b else None
    except ValueError:
        lo = -1.0
    if not sep or lo < 0 or (hi is not None and hi < lo):
        raise MwinvError(f"--timeline-range {text!r}: FROM:TO in seconds from the first statement, e.g. 10:20")
    return lo, hi


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


@dataclass
class _Shown:
    """The statements a timeline shows, as the text of a read-only query (`sql`: their node, pid,
    statement_id, query_id, query_text_hash, t0 and t1 on the coordinator's clock, parent_node and
    parent_statement_id), and the bounds it applied (ns on that clock)."""
    sql: str
    lo: int
    hi: int | None
    total: int      # top-level statements in the capture


def _shown(db: CaptureDB, offsets: dict[str, int], top: int, range_s: tuple[float, float | None] | None) -> _Shown:
    """The `top` longest top-level statements with an attribution within range_s, and the remote ones
    linked to them. Nothing is created in the session: a renderer only reads."""
    # each node's clock offset, the capture's manifest's: a few rows, as literals (load.literal)
    rows = ", ".join(f"({literal(n)}, {literal(int(o))})" for n, o in offsets.items())
    off = f"VALUES {rows}" if rows else "SELECT NULL::VARCHAR, NULL::BIGINT WHERE false"
    links = db.modules.holds("statement_link")
    placed = f"""
        WITH off(node, off) AS ({off}),
        placed AS (
            SELECT s.node, s.pid, s.statement_id, s.query_id, s.query_text_hash,
                   s.start_ns - coalesce(o.off, 0) AS t0, s.end_ns - coalesce(o.off, 0) AS t1,
                   {"l.parent_node, l.parent_statement_id" if links else
                    "NULL::VARCHAR AS parent_node, NULL::BIGINT AS parent_statement_id"}
            FROM statement_clean s LEFT JOIN off o USING (node)
            {"LEFT JOIN statement_link l USING (node, statement_id)" if links else ""}
            WHERE coalesce(s.nesting_level, 0) = 0
              AND (s.node, s.statement_id) IN (SELECT node, statement_id FROM statement_attribution))"""
    first, total = db.sql(f"{placed} SELECT min(t0), count(*) FILTER (WHERE parent_node IS NULL) FROM placed").fetchone()
    if first is None:
        raise MwinvError(f"{db.capture.path}: no attributed statements to put on a timeline")
    lo, hi = (first, None) if range_s is None else (
        first + int(range_s[0] * 1e9), None if range_s[1] is None else first + int(range_s[1] * 1e9))
    window = f"t1 >= {literal(lo)}" + (f" AND t0 <= {literal(hi)}" if hi is not None else "")
    sql = f"""{placed},
        roots AS (SELECT * FROM placed WHERE parent_node IS NULL AND {window}
                  ORDER BY t1 - t0 DESC, node, statement_id LIMIT {int(top)}),
        shown AS (SELECT * FROM roots UNION ALL SELECT r.* FROM placed r JOIN roots p
                  ON r.parent_node = p.node AND r.parent_statement_id = p.statement_id)"""
    return _Shown(sql, lo, hi, total)


def _rows(db: CaptureDB, shown: _Shown) -> list[tuple]:
    """(node, pid, statement_id, query_id, t0, t1, parent_node, parent_statement_id, text) per statement shown."""
    cols = "s.node, s.pid, s.statement_id, s.query_id, s.t0, s.t1, s.parent_node, s.parent_statement_id"
    if not db.has("statement_text"):
        return db.sql(f"{shown.sql} SELECT {cols}, NULL FROM shown s ORDER BY s.node, s.pid, s.t0, s.statement_id").fetchall()
    return db.sql(f"""{shown.sql} SELECT {cols}, t.text FROM shown s
        LEFT JOIN (SELECT query_text_hash, any_value(text) AS text FROM statement_text GROUP BY 1) t
            USING (query_text_hash)
        ORDER BY s.node, s.pid, s.t0, s.statement_id""").fetchall()


def _components(db: CaptureDB, shown: _Shown) -> dict[tuple, dict[str, int]]:
    comps: dict[tuple, dict[str, int]] = {}
    for node, sid, c, ns in db.sql(f"""{shown.sql}
            SELECT a.node, a.statement_id, a.component, sum(a.ns)::BIGINT
            FROM statement_attribution a JOIN shown USING (node, statement_id) GROUP BY ALL""").fetchall():
        comps.setdefault((node, sid), {})[c] = ns
    return comps


def _functions(db: CaptureDB, shown: _Shown) -> dict[tuple, list[dict]]:
    """Each statement's hottest kernel functions (FUNCTIONS_PER_STATEMENT), ns descending."""
    functions: dict[tuple, list] = {}
    if not db.modules.holds("statement_kernel_function"):
        return functions
    for node, sid, f, ns, share, src in db.sql(f"""{shown.sql}
            SELECT node, statement_id, function, ns, share, source FROM (
                SELECT *, row_number() OVER (PARTITION BY node, statement_id ORDER BY ns DESC, function) AS n
                FROM (SELECT k.node, k.statement_id, k.function, k.source, sum(k.ns)::BIGINT AS ns,
                             sum(k.share) AS share
                      FROM statement_kernel_function k JOIN shown USING (node, statement_id) GROUP BY ALL))
            WHERE n <= {FUNCTIONS_PER_STATEMENT} ORDER BY node, statement_id, n""").fetchall():
        functions.setdefault((node, sid), []).append({"function": f, "ns": ns, "share": share, "source": src})
    return functions


def timeline(db: CaptureDB, top: int = DEFAULT_TOP, range_s: tuple[float, float | None] | None = None) -> Timeline:
    """The timeline of a correlated session (pipeline.correlate's or open_correlated's)."""
    if not db.has("statement") or not db.modules.holds("statement_attribution"):
        raise MwinvError(f"{db.capture.path}: no attributed statements to put on a timeline")
    coordinator = db.capture.manifest().get("coordinator")
    offsets = {c[0]: c[2] for c in node_clocks(db.capture.manifest())}
    shown = _shown(db, offsets, top, range_s)
    rows = _rows(db, shown)
    nodes = sorted({r[0] for r in rows} | _sample_nodes(db), key=lambda n: (n != coordinator, n))
    node_pid = {n: i + 1 for i, n in enumerate(nodes)}
    base = min([shown.lo, *(r[4] for r in rows)])   # a statement begun before the range: no negative ts
    events: list[dict] = []
    for n in nodes:
        events.append({"ph": "M", "name": "process_name", "pid": node_pid[n], "tid": 0,
                       "args": {"name": f"node {n}" + (" (coordinator)" if n == coordinator else "")}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": node_pid[n], "tid": 0,
                       "args": {"sort_index": node_pid[n]}})
    slices, overlapping = _slices(events, rows, _components(db, shown), _functions(db, shown), node_pid, base)
    flows = _flows(events, rows, slices, node_pid, base)
    end = shown.hi if shown.hi is not None else max((r[5] for r in rows), default=shown.lo)
    counters = _counters(db, events, node_pid, offsets, base, shown.lo, end)
    kept = [r for r in rows if (r[0], r[2]) in slices]
    meta = {"capture": str(db.capture.path), "t0_ns": base,
            "clock": "ts: µs from t0_ns on the coordinator's clock (data nodes shifted by their measured offset)",
            "top": top, "range_s": list(range_s) if range_s else None,
            "statements_total": shown.total, "statements_shown": sum(r[6] is None for r in kept),
            "remote_shown": sum(r[6] is not None for r in kept), "left_out_overlapping": overlapping,
            "flows": flows, "counters": counters,
            "components": "laid end to end under their statement in the order of ATTRIBUTION_COMPONENTS, "
                          "not in the order they happened",
            "not_shown": "nested statements (their time is their top-level statement's)"}
    return Timeline(events, meta)


def _slices(events: list[dict], rows: list[tuple], comps: dict[tuple, dict[str, int]],
            functions: dict[tuple, list[dict]], node_pid: dict[str, int], base: int) -> tuple[dict[tuple, tuple], int]:
    """Each statement's slice on its backend's track, its components under it. Returns the slices
    ((node, statement_id) -> (pid, tid, t0, t1)) and how many overlapping ones were left out."""
    slices: dict[tuple, tuple[int, int, int, int]] = {}
    last_end: dict[tuple, int] = {}
    overlapping = 0
    for node, pid, sid, qid, t0, t1, pnode, psid, text in rows:
        track = (node, pid)
        if t0 < last_end.get(track, t0):   # a track's slices must nest: an overlap is left out, and counted
            overlapping += 1
            continue
        if track not in last_end:
            events.append({"ph": "M", "name": "thread_name", "pid": node_pid[node], "tid": pid,
                           "args": {"name": f"backend {pid}"}})
        last_end[track] = t1
        slices[(node, sid)] = (node_pid[node], pid, t0, t1)
        parts = comps.get((node, sid), {})
        name = " ".join((text or "").split())[:80] or (f"query_id {qid}" if qid is not None else f"statement {sid}")
        # ids as text: a viewer's JavaScript numbers hold 53 bits, PostgreSQL's ids 64
        args = {"statement_id": str(sid), "query_id": None if qid is None else str(qid), "node": node, "pid": pid, "wall_ns": t1 - t0,
                **{f"{c}_ns": parts[c] for c in ATTRIBUTION_COMPONENTS if parts.get(c)},
                "text": (text or "")[:TEXT_ARG_CHARS]}
        if (node, sid) in functions:
            args["kernel_functions"] = functions[(node, sid)]
        if pnode is not None:
            args["coordinator_statement_id"] = str(psid)
        events.append({"ph": "X", "cat": "statement", "name": name, "pid": node_pid[node], "tid": pid,
                       "ts": _us(t0 - base), "dur": _us(t1 - t0), "args": args})
        at = t0
        for c in ATTRIBUTION_COMPONENTS:
            ns = min(parts.get(c, 0), t1 - at)   # they sum to the wall time; never past the statement's end
            if ns > 0:
                events.append({"ph": "X", "cat": "component", "name": c, "pid": node_pid[node], "tid": pid,
                               "ts": _us(at - base), "dur": _us(ns), "args": {"ns": ns}})
                at += ns
    return slices, overlapping


def _flows(events: list[dict], rows: list[tuple], slices: dict[tuple, tuple], node_pid: dict[str, int],
           base: int) -> int:
    """A flow from each coordinator statement shown to each remote statement shown that served it."""
    flows = 0
    for node, pid, sid, _, t0, _, pnode, psid, _ in rows:
        if pnode is None or (node, sid) not in slices or (pnode, psid) not in slices:
            continue
        ppid, ptid, pt0, pt1 = slices[(pnode, psid)]
        flows += 1
        # the start inside the coordinator's slice (it binds to the slice enclosing it), when the remote began
        events.append({"ph": "s", "cat": "remote", "name": "remote statement", "id": flows, "pid": ppid,
                       "tid": ptid, "ts": _us(max(pt0, min(t0, pt1)) - base)})
        events.append({"ph": "f", "bp": "e", "cat": "remote", "name": "remote statement", "id": flows,
                       "pid": node_pid[node], "tid": pid, "ts": _us(t0 - base)})
    return flows


def _sample_nodes(db: CaptureDB) -> set[str]:
    return {n for (n,) in db.sql("SELECT DISTINCT node FROM node_sample").fetchall()} if db.has("node_sample") else set()


def _counters(db: CaptureDB, events: list[dict], node_pid: dict[str, int], offsets: dict[str, int], base: int,
              lo: int, hi: int) -> int:
    """Each node's samples in [lo, hi] as counter events: the report's node timelines (CPU %, disk and
    network MiB/s), one counter per chart with a value per series. Returns how many samples."""
    if not db.has("node_sample"):
        return 0
    from mwinv.correlator.report import node_timelines

    t_first = db.sql("SELECT min(ts_ns) FROM node_sample").fetchone()[0]
    charts = node_timelines(SimpleNamespace(db=db, node_sample=SimpleNamespace(num_rows=1)))
    units = {"CPU": "CPU %", "Disk": "disk MiB/s", "Network": "network MiB/s"}
    n = 0
    for node, by_chart in charts.items():
        for chart, series in by_chart.items():
            at: dict[int, dict] = {}
            for name, points in series.items():
                for x, v in points:
                    ts = t_first + round(x * 1e9) - offsets.get(node, 0)
                    if lo <= ts <= hi:
                        at.setdefault(ts, {})[name] = round(v, 3)
            for ts, values in sorted(at.items()):
                events.append({"ph": "C", "name": units[chart], "pid": node_pid[node], "tid": 0,
                               "ts": _us(ts - base), "args": values})
            n += len(at)
    return n
