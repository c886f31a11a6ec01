"""Statements without the mwinv extension (degraded mode): PostgreSQL's own USDT probes
query__start (with the query text) and query__done, recorded as uprobes in the kernel trace, become
rows of the `statement` and `statement_text` tables, so the correlator works unchanged: attribution
per statement text and pid.

What is lost against the extension is written once, in LOST, and the capture's manifest carries it
(nodes.<node>.statements = "usdt"); mwinv-correlate and the report say it."""

from __future__ import annotations

import pyarrow as pa

from mwinv.capture.tables import SCHEMAS, Capture, text_hash
from mwinv.engines.postgresql.records import DBMS
from mwinv.engines.sqltext import normalized

SOURCE = "usdt"
LOST = ("statements come from PostgreSQL's own query probes (the mwinv extension is not loaded): one per "
        "Query message (a multi-statement Query is one) or per portal run of the extended protocol; no query "
        "id from the server (mwinv's own: a hash of the text, literals folded; a prepared statement's text is "
        "unknown), no rusage split of CPU into user and system (all user), no nesting, no parallel workers' "
        "link to their leader, no planning time, and a statement that failed has no done probe (it ends at its "
        "backend's next statement, marked errored)")


UNKNOWN_TEXT = "(a prepared statement: its text is known to the extension only)"


def statements_from_probes(capture: Capture, node: str) -> int:
    """Each pid's probe events as statements; returns how many. Simple protocol: query__start (text) to
    query__done. Extended: from the Parse (text) or, for a prepared statement, from the portal's run,
    to the run's end; a Query message's own parse and runs are inside its window."""
    events = capture.read("kernel_event")
    rows = [(r["ts_ns"], r["pid"], r["event"].rsplit("_", 1)[0], r["fields"]) for r in events.filter(
        pa.compute.and_(pa.compute.equal(events["node"], node),
                        pa.compute.starts_with(events["event"], "pg_query_"))).to_pylist()]
    rows.sort(key=lambda r: (r[1], r[0]))
    trace_end = max(events["ts_ns"].to_pylist()) if events.num_rows else 0
    out: list[dict] = []
    state: dict[int, dict] = {}   # pid -> {"simple": (ts, text), "parse": (ts, text), "run": (ts, text)}
    for ts, pid, event, fields in rows:
        st = state.setdefault(pid, {})
        if event == "pg_query_start":
            for open_ in ("simple", "run"):   # no done: the statement failed (its error ended it)
                if open_ in st:
                    out.append(_row(node, pid, st.pop(open_), ts, errored=True))
            st["simple"] = (ts, _text(fields))
        elif event == "pg_query_done":
            if "simple" in st:
                out.append(_row(node, pid, st.pop("simple"), ts, errored=False))
        elif "simple" in st:
            continue   # the Query message's own parse and portal runs
        elif event == "pg_query_parse":
            st["parse"] = (ts, _text(fields))
        elif event == "pg_query_exec_start" and "run" not in st:
            st["run"] = st.pop("parse", (ts, UNKNOWN_TEXT))
        elif event == "pg_query_exec_done" and "run" in st:
            out.append(_row(node, pid, st.pop("run"), ts, errored=False))
    for pid, st in state.items():   # still running when the trace ended
        for open_ in ("simple", "run"):
            if open_ in st:
                out.append(_row(node, pid, st[open_], trace_end, errored=False))
    out.sort(key=lambda r: r["start_ns"])
    texts = {}
    for i, r in enumerate(out, 1):
        r["statement_id"] = i
        texts[r["query_text_hash"]] = (r["query_id"], r.pop("text"))
    if out:
        capture.write_part("statement", out, node=node)
        capture.write_part("statement_text", [{"query_text_hash": h, "query_id": q, "text": t}
                                              for h, (q, t) in texts.items()], node=node)
    return len(out)


def _text(fields: str | None) -> str:
    """The query text of a probe event's fields (`__probe_ip=... query=<text>`, the text last)."""
    return (fields or "").split("query=", 1)[-1].strip()


def _row(node: str, pid: int, started: tuple[int, str], end_ns: int, errored: bool) -> dict:
    start_ns, text = started
    row = {f.name: None for f in SCHEMAS["statement"]}
    # the server gives no query id: a stable one from the text, literals folded as pg_stat_statements
    # folds constants, so the terminal, the JSON and the report name and group the statement by its text
    row.update(node=node, dbms=DBMS, pid=pid, query_text_hash=text_hash(text), query_id=text_hash(normalized(text)),
               start_ns=start_ns, end_ns=end_ns,
               nesting_level=0, errored=errored, client_wait_ns=0, text=text)
    return row
