"""The report of one capture (or the difference of two): a self-contained HTML page (inline SVG, no
scripts, no network) and a markdown version with the same content.

Sections: what is missing, summary, top statements with breakdown bars, per-statement detail
(on/off-CPU timeline, kernel functions, evidence, advice), per-node resource timelines, model accuracy,
what-if predictions; with a baseline capture also a differential section per query_id.
Everything comes from the capture's analysis session: its tables and the derived ones (class, estimate,
prediction, advice), which derive.py builds where the capture does not hold them yet. The sections
only read."""

from __future__ import annotations

import os
import string
from dataclasses import dataclass, field
from datetime import datetime, timezone
from html import escape
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from mwinv import privfile
from mwinv.capture.columns import empty_table
from mwinv.capture.tables import ATTRIBUTION_COMPONENTS, SCHEMAS, Capture
from mwinv.correlator import derive as derived
from mwinv.correlator import svg
from mwinv.correlator.advice import Advice
from mwinv.correlator.classify import MIN_RANKED_SAMPLES, kernel_samples, thin_sources
from mwinv.correlator.load import CaptureDB, literal
from mwinv.correlator.model import MIN_TIMED_NS, WHAT_IFS, DiskWaitCheck, mean_abs_error
from mwinv.correlator.nodes import NodePart
from mwinv.correlator.pipeline import ranked_queries
from mwinv.errors import MwinvError
from mwinv.fmt import IN_DB, WALL, duration, ms
from mwinv.kernel_trace.recorder import duty_change_text

TEMPLATES = Path(__file__).parent / "templates"


@dataclass
class ReportData:
    """What one capture contributes to a report, read from its analysis session (derive.py built it)."""
    path: Path
    manifest: dict
    statements: pa.Table   # the model's (model_statement): a cluster's data-node parts under their coordinator statement
    texts: dict[int, str]
    attribution: pa.Table
    kernel_functions: pa.Table
    node_sample: pa.Table
    db: CaptureDB          # the capture's analysis session: the top list, the nodes, the timelines
    missing: list[str] = field(default_factory=list)
    estimates: pa.Table | None = None
    classes: pa.Table | None = None
    predictions: pa.Table | None = None
    disk_wait: DiskWaitCheck | None = None
    queries: list[dict] = field(default_factory=list)  # the top ones, shown in detail
    duty_cycled: bool = False   # kernel events were on in windows: breakdowns from the executions they covered
    advice: list[Advice] = field(default_factory=list)  # for the top queries' longest executions
    node_parts: dict[int, list[NodePart]] = field(default_factory=dict)  # cluster: example id -> its data nodes


def load(capture_dir: str | os.PathLike, top: int = 10, progress=None, derive: bool = True,
         db: CaptureDB | None = None) -> ReportData:
    """A capture's tables and what was derived from them (derive.for_report builds what the capture does
    not hold yet: classes, the model's estimates and predictions, advice for the `top` queries' longest
    executions; a capture not correlated yet is correlated first): the report only reads. progress(step) is called as each step
    begins. derive=False: the tables only (a differential report's baseline needs no classes, model or
    advice). db: the capture's session already open and correlated (mwinv-correlate's)."""
    cap = Capture(capture_dir)
    if not cap.path.is_dir():
        raise MwinvError(f"{cap.path}: no such capture directory")
    manifest = cap.manifest()
    if not manifest:
        raise MwinvError(f"{cap.path / 'manifest.json'}: missing (not a capture directory)")
    db, queries = derived.for_report(cap, top, progress, derive, db)
    missing = [f"Node {node}: {info['statements_lost']}." for node, info in (manifest.get("nodes") or {}).items()
               if info.get("statements_lost")]
    if not db.has("statement"):
        missing.append("No DBMS-side data (table `statement` is empty or absent: the extension was not "
                       "loaded). Statements cannot be named; only node and process resource timelines are shown.")
    if not db.has("kernel_event") and not db.has("cpu_sample") and db.has("dbms_wait"):
        missing.append("No kernel events: each statement's time is split by the DBMS's own account (its calls' "
                       "CPU and wait events); its unaccounted-for time cannot be split into run queue, off-CPU "
                       "states and block I/O, and no kernel functions are known.")
    elif not db.has("kernel_event") and not db.has("cpu_sample"):
        missing.append("No kernel events (extension-only capture): each statement's time is its rusage CPU and "
                       "the rest not_allocated; it cannot be split into disk, network, lock and run-queue "
                       "waits, and no kernel functions are known.")
    if db.has("statement") and not _present(db, "statement_io"):
        missing.append("No `statement_io` (sequential/random bytes and requests, network bytes per statement): "
                       "the model's disk and network components are zero, so estimates cover CPU only.")
    if not manifest.get("calibration"):
        missing.append("No calibration in the manifest (run `mwinv calibrate CAPTURE`): no model estimates, "
                       "what-if predictions or expected gains.")
    if db.duty_cycled:
        missing.append("Kernel events were on in windows only (a duty-cycled capture): a query's breakdown is "
                       "that of its executions a window covered whole, scaled to all its executions' time; "
                       "a query no window covered shows its rusage only.")
    for node, info in sorted(manifest.get("nodes", {}).items()):
        for change in info.get("duty_changes") or []:
            missing.append(f"Node {node}, at +{(change['at_ns'] - info['start_ns']) / 1e9:.1f} s of the capture: "
                           f"{duty_change_text(change, info['event_budget'])}.")
    texts = dict(db.sql("SELECT query_text_hash, any_value(text) FROM statement_text GROUP BY 1").fetchall())
    data = ReportData(cap.path, manifest, _read(db, "model_statement", "statement"), texts, _read(db, "model_attribution", "statement_attribution"),
                      _read(db, "statement_kernel_function"), _read(db, "node_sample"), db, missing,
                      duty_cycled=db.duty_cycled, queries=queries)
    if derive:
        data.classes, data.estimates, data.predictions = (_read(db, t) for t in
                                                          ("statement_class", "statement_estimate", "prediction"))
        if not manifest.get("calibration"):
            data.estimates = data.predictions = None
        check = _read(db, "disk_wait_check").to_pylist()
        data.disk_wait = DiskWaitCheck(**check[0]) if check else None
        examples = [q["example_id"] for q in queries]
        advice = derived.advice_of(db, examples)
        data.advice = [a for sid in examples for a in advice.get(sid, [])]
        data.node_parts = derived.node_parts_of(db, examples)
    return data


def _present(db: CaptureDB, table: str) -> bool:
    return db.modules.holds(table)


def _read(db: CaptureDB, table: str, schema: str | None = None) -> pa.Table:
    """A table of the session (empty, typed by its schema, where the session has none)."""
    if not _present(db, table):
        return empty_table(SCHEMAS[schema or table])
    return db.sql(f"SELECT * FROM {table}").to_arrow_table()


# ---- queries over the loaded tables

def node_timelines(data: ReportData) -> dict[str, dict[str, dict[str, list[tuple[float, float]]]]]:
    """node -> chart -> series -> [(seconds from the first sample, value)]."""
    if data.node_sample.num_rows == 0:
        return {}
    rows = data.db.sql("""
        SELECT node, ts_ns, max(interval_ns) AS iv, max(cpu_user_ns) AS u, max(cpu_sys_ns) AS s,
               max(cpu_iowait_ns) AS w, max(cpu_idle_ns) AS i, sum(read_bytes) AS rb, sum(write_bytes) AS wb,
               sum(net_rx_bytes) AS rx, sum(net_tx_bytes) AS tx
        FROM node_sample GROUP BY node, ts_ns ORDER BY node, ts_ns""").fetchall()
    t0 = min(r[1] for r in rows)
    out: dict = {}
    for node, ts, iv, u, s_, w, i, rb, wb, rx, tx in rows:
        x = (ts - t0) / 1e9
        charts = out.setdefault(node, {"CPU": {}, "Disk": {}, "Network": {}})
        total = sum(v or 0 for v in (u, s_, w, i))
        if total:
            for name, v in (("user", u), ("system", s_), ("iowait", w)):
                charts["CPU"].setdefault(name, []).append((x, 100 * (v or 0) / total))
        if iv:
            for chart, name, v in (("Disk", "read", rb), ("Disk", "write", wb), ("Network", "rx", rx),
                                   ("Network", "tx", tx)):
                if v is not None:
                    charts[chart].setdefault(name, []).append((x, v / (iv / 1e9) / 2**20))
    return out


def on_cpu_intervals(data: ReportData, statement_id: int) -> list[tuple[str, list[tuple[float, float]], str]]:
    """On-CPU intervals (seconds from the statement's start) of its backend and parallel workers, from sched_switch."""
    st = data.db.sql("SELECT node, pid, start_ns, end_ns FROM model_statement "
                     f"WHERE statement_id = {literal(statement_id)}").fetchone()
    if st is None or not data.db.has("kernel_event"):
        return []
    node, pid, start, end = st
    pids = [pid] + [r[0] for r in data.db.sql(
        f"SELECT DISTINCT pid FROM model_statement WHERE leader_pid = {literal(pid)} AND pid <> {literal(pid)} "
        f"AND node = {literal(node)} AND start_ns < {literal(end)} AND end_ns > {literal(start)}").fetchall()]
    rows = []
    for p in pids:
        ev = data.db.sql(f"""
            SELECT ts_ns, prev_pid, next_pid FROM kernel_event
            WHERE node = {literal(node)} AND event LIKE '%sched_switch' AND (prev_pid = {literal(p)} OR next_pid = {literal(p)})
              AND ts_ns BETWEEN {literal(start)} AND {literal(end)} ORDER BY ts_ns""").fetchall()
        intervals, on_since = [], None
        for i, (ts, prev, nxt) in enumerate(ev):
            if nxt == p:
                on_since = ts
            elif prev == p:
                # a switch-out with no switch-in seen: the task was running since the statement began
                begin = on_since if on_since is not None else (start if i == 0 else None)
                if begin is not None:
                    intervals.append(((begin - start) / 1e9, (ts - start) / 1e9))
                on_since = None
        if on_since is not None:
            intervals.append(((on_since - start) / 1e9, (end - start) / 1e9))
        if ev:
            rows.append((f"pid {p}" + (" (worker)" if p != pid else ""), intervals, svg.COMPONENT_COLORS["cpu_user"]))
    return rows


# ---- rendering

@dataclass
class Section:
    title: str
    html: str
    md: str


def _table(headers: list[str], rows: list[list], md_rows: list[list] | None = None) -> tuple[str, str]:
    h = "<table><thead><tr>" + "".join(f"<th>{escape(c)}</th>" for c in headers) + "</tr></thead><tbody>"
    h += "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows) + "</tbody></table>"
    md = "| " + " | ".join(headers) + " |\n|" + "---|" * len(headers) + "\n"
    md += "".join("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in r) + " |\n"
                  for r in (md_rows if md_rows is not None else rows))
    return h, md


def _short(text: str | None, n: int = 90) -> str:
    t = " ".join((text or "?").split())
    return t if len(t) <= n else t[: n - 1] + "…"


def _breakdown(q: dict) -> list[tuple[str, float]]:
    return [(c, float(q.get(c) or 0)) for c in ATTRIBUTION_COMPONENTS]


def section_missing(data: ReportData) -> Section:
    if not data.missing:
        return Section("What this capture holds", "<p>Kernel events, DBMS statements, attribution and calibration "
                       "are all present.</p>", "Kernel events, DBMS statements, attribution and calibration are all present.\n")
    items = "".join(f"<li>{escape(m)}</li>" for m in data.missing)
    return Section("What is missing", f'<ul class="missing">{items}</ul>', "".join(f"- {m}\n" for m in data.missing))


def section_summary(data: ReportData) -> Section:
    m = data.manifest
    n = data.statements.num_rows
    total = (pc.sum(pc.subtract(data.statements["end_ns"], data.statements["start_ns"])).as_py() or 0) if n else 0
    classes = {}
    if data.classes is not None:
        classes = {r["values"]: r["counts"] for r in pc.value_counts(data.classes["limit"]).to_pylist()}
    nodes = sorted(m.get("nodes") or {}) or sorted(set(data.statements.column("node").to_pylist())
                                                    | set(data.node_sample.column("node").to_pylist()))
    recorded = (datetime.fromtimestamp(m["created_wall_ns"] / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
                if m.get("created_wall_ns") else "-")
    items = [("capture", str(data.path)), ("run", str(m.get("run") or m.get("name") or data.path.name)),
             ("recorded", recorded),
             ("nodes", ", ".join(map(str, nodes)) or "-"),
             ("statements", f"{n:,}"), ("total statement time", f"{total / 1e9:,.3f} s"),
             ("classes", ", ".join(f"{k} {v}" for k, v in sorted(classes.items(), key=lambda kv: -kv[1])) or "-")]
    if data.estimates is not None:
        mae, k = mean_abs_error(data.estimates, min_measured_ns=MIN_TIMED_NS)
        items.append(("model error", f"{100 * mae:.1f} % mean |error| over {k} statements of ≥ {MIN_TIMED_NS // 10**6} ms with ≥ 85 % allocated"
                      if mae is not None else f"no statement of ≥ {MIN_TIMED_NS // 10**6} ms has ≥ 85 % of its time allocated"))
    cal = m.get("calibration")
    if cal:
        d = cal["disk"]
        links = "; ".join(f"{k}: {v['rate_bps'] / 2**20:,.0f} MiB/s, {v['latency_s'] * 1e6:.0f} µs"
                          for k, v in (cal.get("links") or {}).items())
        seq_access = f", short sequential {d['seq_access_s'] * 1e6:.0f} µs" if "seq_access_s" in d else ""
        items.append(("calibration", f"disk {d['disk_rate_bps'] / 2**20:,.0f} MiB/s sequential, random access "
                      f"{d['rand_access_s'] * 1e6:.0f} µs{seq_access}; CPU factor {cal['cpu']['cpu_speed_factor']:.2f}"
                      + (f"; {links}" if links else "")))
    h = "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in items) + "</dl>"
    md = "".join(f"- **{k}**: {v}\n" for k, v in items)
    return Section("Summary", h, md)


def section_top(data: ReportData, queries: list[dict]) -> Section:
    if not queries:
        return Section("Top statements", "<p>No statements.</p>", "No statements.\n")
    scale = max(q["total_ns"] for q in queries)
    cls = {r["statement_id"]: r for r in (data.classes.to_pylist() if data.classes is not None else [])}
    rows, md_rows = [], []
    for q in queries:
        c = cls.get(q["example_id"], {})
        bar = svg.stacked_bar(_breakdown(q), q["total_ns"], scale, label=duration(q["total_ns"]))
        text = _short(data.texts.get(q["query_text_hash"]))
        anchor = f'<a href="#q{q["query_id"]}">{q["query_id"]}</a>'
        calls = f"{q['calls']} ({q['traced_calls']} traced)" if data.duty_cycled else q["calls"]
        rows.append([anchor, escape(str(q["node"])), calls, duration(q["total_ns"]), escape(c.get("limit", "-")),
                     bar, f"<code>{escape(text)}</code>"])
        total = q["total_ns"] or 1
        shares = ", ".join(f"{comp} {100 * v / total:.0f}%" for comp, v in _breakdown(q) if v / total >= 0.01)
        md_rows.append([q["query_id"], q["node"], calls, duration(q["total_ns"]), c.get("limit", "-"), shares,
                        f"`{text}`"])
    h, md = _table(["query_id", "node", "calls", "wall", "class", "breakdown", "statement"], rows, md_rows)
    note = f"{WALL[0].upper()}{WALL[1:]}. The classes' evidence and the advice: {IN_DB}."
    return Section("Top statements", svg.legend(list(ATTRIBUTION_COMPONENTS)) + f"<p>{escape(note)}</p>" + h,
                   note + "\n\n" + md)


def section_details(data: ReportData, queries: list[dict]) -> Section:
    cls = {r["statement_id"]: r for r in (data.classes.to_pylist() if data.classes is not None else [])}
    kf: dict[int, list[dict]] = {}
    for r in data.kernel_functions.to_pylist():
        kf.setdefault(r["statement_id"], []).append(r)
    kernel_counts = kernel_samples(data.kernel_functions)
    adv: dict[int, list[Advice]] = {}
    for a in data.advice:
        adv.setdefault(a.statement_id, []).append(a)
    h, md = [], []
    for q in queries:
        sid = q["example_id"]
        c = cls.get(sid, {})
        text = data.texts.get(q["query_text_hash"]) or "?"
        h.append(f'<section class="stmt" id="q{q["query_id"]}"><h3>query_id {q["query_id"]} — '
                 f'{escape(c.get("limit", "-"))}</h3><pre>{escape(text.strip()[:2000])}</pre>')
        md.append(f"### query_id {q['query_id']} — {c.get('limit', '-')}\n\n```sql\n{text.strip()[:2000]}\n```\n")
        h.append(f"<p>Longest of {q['calls']} execution(s): statement {sid}.</p>")
        strip = on_cpu_intervals(data, sid)
        if strip:
            st = data.db.sql(f"SELECT start_ns, end_ns FROM model_statement WHERE statement_id = {literal(sid)}").fetchone()
            h.append(svg.interval_strip(strip, (0, (st[1] - st[0]) / 1e9), "on-CPU (blue) / off-CPU (grey) over the statement"))
            on = sum(b - a for _, iv, _ in strip for a, b in iv)
            md.append(f"On-CPU {duration(on * 1e9)} of {duration(st[1] - st[0])} (from sched_switch).\n\n")
        else:
            h.append("<p>No on/off-CPU timeline: no sched_switch events for this backend.</p>")
        if c.get("evidence"):
            h.append(f'<p class="evidence"><b>Evidence.</b> {escape(c["evidence"])} '
                     f'(confidence {100 * (c.get("confidence") or 0):.0f}%)</p>')
            md.append(f"**Evidence.** {c['evidence']} (confidence {100 * (c.get('confidence') or 0):.0f}%)\n\n")
        funcs = sorted(kf.get(sid, []), key=lambda r: (-(r["share"] or 0), r["source"], r["function"] or ""))[:8]
        if funcs:
            t_h, t_md = _table(["kernel function", "share of kernel time", "samples", "source"],
                               [[f"<code>{escape(f['function'] or '?')}</code>", f"{100 * (f['share'] or 0):.1f}%",
                                 f["samples"] or "", escape(f["source"] or "")] for f in funcs],
                               [[f["function"], f"{100 * (f['share'] or 0):.1f}%", f["samples"] or "", f["source"] or ""]
                                for f in funcs])
            h.append(t_h)
            md.append(t_md + "\n")
            thin = thin_sources(kernel_counts.get(sid, {}))
            if thin:
                note = (f"Too few samples to rank kernel functions from {thin} (fewer than {MIN_RANKED_SAMPLES}): "
                        "those shares are anecdotes, and no advice rests on them.")
                h.append(f"<p>{escape(note)}</p>")
                md.append(note + "\n\n")
        advice = adv.get(sid, [])
        if advice:
            h.append("<ul class=\"advice\">")
            for a in advice:
                gain = f"expected gain {duration(a.expected_gain_ns)} ({escape(a.basis)})" if a.expected_gain_ns is not None \
                    else escape(a.basis)
                h.append(f"<li><b>{escape(a.rule)}</b>: {escape(a.advice)}<br><small>evidence: {escape(a.evidence)}; "
                         f"{gain}</small></li>")
                md.append(f"- **{a.rule}**: {a.advice} — evidence: {a.evidence}; "
                          + (f"expected gain {duration(a.expected_gain_ns)} ({a.basis})" if a.expected_gain_ns is not None
                             else a.basis) + "\n")
            h.append("</ul>")
            md.append("\n")
        h.append("</section>")
    return Section("Statement details", "".join(h), "".join(md))


def section_nodes(data: ReportData) -> Section:
    tl = node_timelines(data)
    if not tl:
        return Section("Node resource timelines", "<p>No node samples (mwinv-sample did not run).</p>",
                       "No node samples (mwinv-sample did not run).\n")
    h, md = [], []
    for node, charts in tl.items():
        h.append(f"<h3>{escape(node)}</h3>")
        units = {"CPU": "% of all CPUs", "Disk": "MiB/s", "Network": "MiB/s"}
        for chart, series in charts.items():
            h.append(svg.line_chart(series, f"{node}: {chart}", units[chart]))
        md.append(f"### {node}\n\n")
        md_rows = []
        for chart, series in charts.items():
            for name, pts in series.items():
                if pts:
                    md_rows.append([chart, name, f"{sum(v for _, v in pts) / len(pts):.2f}",
                                    f"{max(v for _, v in pts):.2f}", units[chart]])
        md.append(_table(["resource", "series", "mean", "peak", "unit"], md_rows)[1] + "\n")
    return Section("Node resource timelines", "".join(h), "".join(md))


def section_data_nodes(data: ReportData, queries: list[dict]) -> Section:
    """Cluster captures: each top statement's parts on the data nodes, and their skew across nodes."""
    h, md = [], []
    for q in queries:
        parts = data.node_parts.get(q["example_id"])
        if not parts:
            continue
        text = _short(data.texts.get(q["query_text_hash"]), 70)
        h.append(f"<h3>query_id {q['query_id']}: <code>{escape(text)}</code></h3>")
        md.append(f"### query_id {q['query_id']}: `{text}`\n\n")
        scale = max(p.last_end_ns for p in parts) or 1
        rows, md_rows = [], []
        for p in parts:
            busy = [(c, v) for c, v in p.components.items() if c != "client_wait" and v]
            bar = svg.stacked_bar(busy, p.execution_ns, scale, label=f"{duration(p.execution_ns)} busy")
            cells = [p.statements, p.fetches, f"{p.rows:,}", f"{p.sent_bytes / 2**20:.2f}", ms(p.idle_ns),
                     ms(p.last_end_ns)]
            name = p.node + (" (critical)" if p.critical else "")
            rows.append([escape(name), *cells, bar])
            md_rows.append([name, *cells, ", ".join(f"{c} {duration(v)}" for c, v in busy)])
        h.append(_table(["node", "remote stmts", "fetches", "rows", "sent MiB", "idle ms", "last fetch ms",
                         "busy on the node"], rows, md_rows)[0])
        md.append(_table(["node", "remote stmts", "fetches", "rows", "sent MiB", "idle ms", "last fetch ms",
                          "busy on the node"], md_rows)[1] + "\n")
        skew = []
        for what, comps in (("CPU", ("cpu_user", "cpu_sys")), ("disk", ("disk_seq", "disk_random"))):
            per = [sum(p.components.get(c, 0) for c in comps) for p in parts]
            mean = sum(per) / len(per)
            if mean:
                skew.append(f"{what} per node min {min(per) / 1e6:.1f} / mean {mean / 1e6:.1f} / max "
                            f"{max(per) / 1e6:.1f} ms (max/mean {max(per) / mean:.2f})")
        note = "; ".join(skew) + ". Idle: the node waiting for the coordinator between fetches; last fetch: " \
            "from the statement's start (the latest node is the critical path)."
        h.append(f"<p>{escape(note)}</p>")
        md.append(note + "\n\n")
    if not h:
        return Section("Data nodes", "<p>Not a cluster capture.</p>", "Not a cluster capture.\n")
    return Section("Data nodes", "".join(h), "".join(md))


def section_model(data: ReportData) -> Section:
    if data.estimates is None:
        return Section("Model accuracy ([Taufer], Table 1)", "<p>Not computed: no calibration.</p>",
                       "Not computed: no calibration.\n")
    ests = data.estimates.sort_by([("measured_ns", "descending")]).slice(0, 30).to_pylist()
    rows = [[r["statement_id"], r["query_id"], ms(r["t_cpu_ns"]), ms(r["t_seq_ns"]), ms(r["t_no_seq_ns"]),
             ms(r["t_net_ns"]), ms(r["estimated_ns"]), ms(r["measured_ns"]),
             f"{100 * (r['allocated_share'] or 0):.0f}%",
             f"{100 * r['error']:+.1f}%" if r["error"] is not None else "-"] for r in ests]
    mae, k = mean_abs_error(data.estimates, min_measured_ns=MIN_TIMED_NS)
    note = (f"Mean |error| {100 * mae:.1f} % over {k} statements of ≥ {MIN_TIMED_NS // 10**6} ms with ≥ 85 % of their time allocated to CPU, "
            "disk or network ([Taufer] claims < 10 %)." if mae is not None else
            f"No statement of ≥ {MIN_TIMED_NS // 10**6} ms has ≥ 85 % of its time allocated; the error is not meaningful.")
    dw = data.disk_wait
    if dw is not None and dw.ratio is not None:
        note += (f" During the run, statements reading in short requests waited {dw.observed_s * 1e6:.0f} µs per disk "
                 f"request beyond the transfer ({dw.requests:,} requests); the calibration says "
                 f"{dw.calibrated_s * 1e6:.0f} µs (x{dw.ratio:.2f}).")
        if dw.drifted:
            note += (" The disk did not behave as calibrated (a shared or virtual disk drifts): estimates of statements "
                     "bound by disk latency are off by about that ratio; calibrate again close to the run.")
    h, md = _table(["statement", "query_id", "t_cpu ms", "t_seq ms", "t_no_seq ms", "t_net ms", "estimate ms",
                    "measured ms", "allocated", "error"], rows)
    return Section("Model accuracy ([Taufer], Table 1)", f"<p>{escape(note)}</p>" + h, note + "\n\n" + md)


def section_whatif(data: ReportData, queries: list[dict]) -> Section:
    if data.predictions is None:
        return Section("What-if predictions", "<p>Not computed: no calibration.</p>", "Not computed: no calibration.\n")
    examples = {q["example_id"]: q for q in queries}
    shown = pc.is_in(data.predictions["statement_id"], value_set=pa.array(list(examples), pa.int64()))
    preds = data.predictions.filter(shown).to_pylist()
    keys = sorted({(r["what_if"], r["factor"]) for r in preds})
    by = {(r["statement_id"], r["what_if"], r["factor"]): r for r in preds}
    headers = ["query_id", "measured ms"] + [f"{w} ×{k:g}" for w, k in keys]
    rows = []
    for sid, q in examples.items():
        base = by.get((sid, *keys[0]), {}).get("baseline_ns") if keys else None
        rows.append([q["query_id"], ms(base)] + [
            ms(by[(sid, w, k)]["predicted_ns"]) + (f" (measured {ms(by[(sid, w, k)]['measured_ns'])})"
                                                   if by[(sid, w, k)]["measured_ns"] else "")
            for w, k in keys])
    meaning = "; ".join(f"{w}: {desc}" for w, (_, desc) in WHAT_IFS.items())
    h, md = _table(headers, rows)
    return Section("What-if predictions", f"<p>Predicted time (ms) of each top statement's longest execution. "
                   f"{escape(meaning)}.</p>" + h, f"Predicted time (ms). {meaning}.\n\n" + md)


def section_diff(data: ReportData, base: ReportData, top: int) -> Section:
    cur = {q["query_id"]: q for q in ranked_queries(data.db)}
    old = {q["query_id"]: q for q in ranked_queries(base.db)}
    ids = sorted(set(cur) | set(old), key=lambda i: -max((cur.get(i) or {}).get("total_ns", 0),
                                                          (old.get(i) or {}).get("total_ns", 0)))[:top]
    scale = max([(d.get(i) or {}).get("total_ns", 0) / max((d.get(i) or {}).get("calls", 1), 1)
                 for i in ids for d in (cur, old)] or [1])
    rows, md_rows = [], []
    for i in ids:
        a, b = old.get(i), cur.get(i)
        mean_a = a["total_ns"] / a["calls"] if a else None
        mean_b = b["total_ns"] / b["calls"] if b else None
        bars = ""
        for label, q, mean in (("before", a, mean_a), ("after", b, mean_b)):
            if q:
                parts = [(c, v / q["calls"]) for c, v in _breakdown(q)]
                bars += svg.stacked_bar(parts, mean, scale, label=f"{label} {duration(mean)}") + "<br>"
        ratio = f"{mean_b / mean_a:.2f}×" if mean_a and mean_b else ("new" if b else "gone")
        text = _short(data.texts.get((b or a)["query_text_hash"]) or base.texts.get((b or a)["query_text_hash"]), 60)
        changes = []
        if a and b:
            for c, va in _breakdown(a):
                vb = dict(_breakdown(b))[c]
                d = vb / b["calls"] - va / a["calls"]
                if abs(d) >= 0.05 * max(mean_a, mean_b):
                    changes.append(f"{c} {duration(d, sign=True)}")
        rows.append([i, duration(mean_a), duration(mean_b), ratio, bars, escape(", ".join(changes)),
                     f"<code>{escape(text)}</code>"])
        md_rows.append([i, duration(mean_a), duration(mean_b), ratio, ", ".join(changes), f"`{text}`"])
    h, md = _table(["query_id", "before, per call", "after, per call", "ratio", "breakdown", "largest changes",
                    "statement"], rows, md_rows)
    intro = f"Before: {base.path}; after: {data.path}. Mean time per call by query_id."
    return Section("Differential report", f"<p>{escape(intro)}</p>" + svg.legend(list(ATTRIBUTION_COMPONENTS)) + h,
                   intro + "\n\n" + md)


def render_report(capture: str | os.PathLike | ReportData, out_dir: str | os.PathLike,
                  baseline_capture: str | os.PathLike | None = None, top: int = 10) -> tuple[Path, Path]:
    """Write report.html and report.md for a capture directory (or its loaded data), and its difference
    from `baseline_capture`."""
    data = capture if isinstance(capture, ReportData) else load(capture, top)
    base = load(baseline_capture, top, derive=False) if baseline_capture else None
    queries = data.queries
    sections = [section_missing(data), section_summary(data)]
    if base is not None:
        sections.append(section_diff(data, base, top))
    sections += [section_top(data, queries), section_details(data, queries)]
    if data.node_parts:
        sections.append(section_data_nodes(data, queries))
    sections += [section_nodes(data),
                 section_model(data), section_whatif(data, queries)]
    title = f"mwinv report: {data.path.name}" + (f" vs {base.path.name}" if base else "")
    body = "".join(f'<h2 id="s{i}">{escape(s.title)}</h2>{s.html}' for i, s in enumerate(sections))
    toc = "".join(f'<li><a href="#s{i}">{escape(s.title)}</a></li>' for i, s in enumerate(sections))
    page = string.Template((TEMPLATES / "report.html").read_text()).substitute(
        title=escape(title), style=(TEMPLATES / "report.css").read_text(), toc=toc, body=body)
    out = Path(out_dir)
    privfile.make_dir(out)
    html_path = privfile.write(out / "report.html", page)
    md_path = privfile.write(out / "report.md",
                             f"# {title}\n\n" + "".join(f"## {s.title}\n\n{s.md}\n" for s in sections))
    for d in (base, None if data is capture else data):
        if d is not None:
            d.db.con.close()
    return html_path, md_path
