"""Correlate a capture: load once, attribute, find kernel hot spots, write the derived tables, and
answer the questions of `mwinv-correlate` as queries over those tables."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from mwinv.capture.tables import ATTRIBUTION_COMPONENTS, Capture
from mwinv.correlator import attribution, incremental
from mwinv.correlator.load import (CaptureDB, literal, open_capture, open_correlated, reading_parts, remove_stale,
                                  write_derived)
from mwinv.errors import MwinvError

# --by choices: a name and the components it adds up ("total" is the execution: the client's waits
# between a portal's runs are not the statement's).
RANK_BY = {
    "total": tuple(c for c in ATTRIBUTION_COMPONENTS if c != "client_wait"),
    "cpu": ("cpu_user", "cpu_sys"),
    "disk": ("disk_seq", "disk_random"),
    "network": ("network",),
    "remote": ("remote_wait",),
    "lock": ("lock_wait",),
    "run_queue": ("run_queue",),
    "other": ("other_wait",),
    "client_wait": ("client_wait",),
    "not_allocated": ("not_allocated",),
}


@dataclass
class StatementSummary:
    query_id: int | None
    text: str
    nodes: str
    calls: int
    total_ns: int
    components: dict[str, int]   # in a duty-cycled capture: its traced executions', scaled to total_ns
    from_workers_ns: int
    kernel_functions: list[tuple[str, float, str]]  # (function, share, source)
    example_id: int  # its longest execution: the one advice is given for
    traced_calls: int | None = None   # duty-cycled capture: executions a window covered whole


# What a node's own correlation derives (it needs only that node's tables); the links between nodes and
# the coordinator's waits for them are the merge's.
PER_NODE_TABLES = ("statement_attribution", "rusage_attribution", "statement_kernel_function", "statement_io",
                   "traced_statement")


def correlate(capture_dir: str | Path, write: bool = True, progress=None, node: str | None = None,
              memory: str | None = None, until_ns: int | None = None) -> CaptureDB:
    """Attribute, find kernel hot spots and write the derived tables. node: that node's tables only (it
    could run on the node where they were captured), written as its own parts; merge() then makes the
    cluster view from every node's. memory: DuckDB's limit (load.open_capture). until_ns: correlate the
    capture up to this trace time, the rest left to a later correlation, which goes on from there
    (incremental.py); a capture correlated so far in parts is resumed, and its session returned is
    the written parts' (open_correlated)."""
    from mwinv.engines.postgresql.reader import recover_spooled

    from mwinv.node_capture import recover_kernel

    recover_spooled(Capture(capture_dir), progress)   # statements a killed capture left unconverted
    recover_kernel(Capture(capture_dir), progress)    # and its kernel pages
    with reading_parts(Capture(capture_dir)):
        db = _correlate(capture_dir, write, progress, node, memory, until_ns)
        if db.parts is None:
            return db
        db.con.close()
        return open_correlated(capture_dir, memory_limit=memory)


def _correlate(capture_dir: str | Path, write: bool, progress, node: str | None, memory: str | None,
               until_ns: int | None) -> CaptureDB:
    db = open_capture(capture_dir, nodes=[node] if node else None, memory_limit=memory)
    if not db.has("statement"):
        return db
    # a session that writes nothing correlates the capture whole, whatever parts were written
    db.parts = parts = incremental.load(db.capture, until_ns) if write or until_ns is not None else None
    if parts and (node is not None or not write):
        raise MwinvError(f"{db.capture.path}: a capture correlated in parts is correlated whole, into its directory "
                         "(not one node, not read-only)")
    if parts and parts.resumed:
        incremental.check(db, parts)
        db.modules.seeds = incremental.seed(db, parts)
    db.modules.slices = lambda kind: _slices(db, kind)
    step = progress or (lambda _: None)
    step("attributing statement time" + (f" (node {node})" if node else ""))
    for label, tables in ATTRIBUTION_STEPS:
        step(label)
        # a capture in parts: the list of queries is made from all of its parts, once written
        db.build(*(t for t in tables if not (parts and t == "query_summary")))
    if write:
        step("writing the derived tables")
        remove_stale(db.capture)
        if node is None:
            _write(db, (*PER_NODE_TABLES, "statement_link"), parts.prefix if parts else "all",
                   replace=(parts.prefix,) if parts and parts.resumed else ("*",))
        else:   # a whole capture's correlation is superseded, the other nodes' parts are kept
            _write(db, PER_NODE_TABLES, node, replace=(node, "all"))
        if parts:
            incremental.save(db, parts)
    return db


def _slices(db: CaptureDB, kind: str) -> list[tuple[int | None, int | None]]:
    """The point stream is walked in time slices (attribution.chunk_points: by DuckDB's limit), the per-statement
    modules run per slice of attribution.CHUNK_STATEMENTS statements or over their range at once; in a
    capture correlated in parts, over this part's range."""
    parts = db.parts
    if kind == "pid":
        return attribution.slice_bounds(db, attribution.chunk_points(db), *((parts.since_ns, parts.until_ns)
                                                                         if parts else ()))
    bounds = (parts.key_since, incremental.statement_cut(db, parts)) if parts else (None, None)
    if kind == "range":
        return [bounds]
    return attribution.statement_bounds(db, attribution.CHUNK_STATEMENTS, *bounds)


# The correlation's tables in the order they are built, each group under the label progress() shows. A
# node's own correlation builds statement_link too: its statements alone link to nothing.
ATTRIBUTION_STEPS = (
    ("disk requests and file reads", ("disk_request", "file_read")),
    ("segments (state carried per pid)", ("seg_component", "seg_io", "seg_off_stack")),
    ("statement I/O and CPU/disk splits", ("statement_io", "statement_link", "statement_attribution")),
    ("kernel hot spots", ("statement_kernel_function", "query_summary")),
)


def merge(capture_dir: str | Path, progress=None, memory: str | None = None, write: bool = True) -> CaptureDB:
    """The cluster view from per-node correlations (correlate(node=...) for every node): the links between
    the nodes' statements and the coordinator's waits for its nodes, over their derived tables only (the
    nodes' attribution read back as summed_attribution and rusage_attribution); statement_attribution and
    statement_link are rewritten whole (write=False: kept in the session, as correlate's)."""
    db = open_correlated(capture_dir, rebuild=("statement_link",), memory_limit=memory,
                         read_as={"statement_attribution": "summed_attribution", "rusage_attribution": "rusage_attribution"})
    if not db.has("statement"):
        return db
    done = {n for (n,) in db.sql("SELECT node FROM summed_attribution UNION SELECT node FROM rusage_attribution")
            .fetchall()} if db.modules.holds("summed_attribution") else set()
    # a node with top-level statements has attribution rows once correlated (nested ones have none)
    todo = [n for (n,) in db.sql("SELECT DISTINCT node FROM statement_clean WHERE coalesce(nesting_level, 0) = 0 "
                                 "ORDER BY node").fetchall() if n not in done]
    if todo:
        raise MwinvError(f"{db.capture.path}: node {todo[0]} is not correlated yet "
                         f"(mwinv-correlate {db.capture.path} --node {todo[0]})")
    if progress:
        progress("linking the nodes' statements")
    db.build("statement_link", "statement_attribution", "query_summary")
    if write:
        remove_stale(db.capture)
        _write(db, ("statement_attribution", "rusage_attribution", "statement_link"), "all", replace=("*",))
    return db


def _write(db: CaptureDB, names: tuple[str, ...], prefix: str, replace: tuple[str, ...]) -> None:
    """Each derived table as a part named by prefix, after removing its parts named by `replace` ("*":
    all of them): derived tables are replaced, never appended to, but by a later part of a capture
    correlated in parts (its statements only)."""
    only = None if db.parts is None else ("(node, statement_id) IN (SELECT (node, statement_id) FROM slice_statement"
                                          f" WHERE {incremental.key_filter(db.parts)})")
    for name in names:
        d = db.capture.table_dir(name)
        for old in d.glob("*.parquet") if d.exists() else []:
            if "*" in replace or old.name.rsplit("-", 1)[0] in replace:
                db.capture.remove_part(old)
        t0 = time.monotonic()
        write_derived(db, name, only, prefix)
        db.modules.timed(f"writing {name}", time.monotonic() - t0)


def query_summaries(db: CaptureDB) -> list[dict]:
    """Every query's row of query_summary (sql/query_summary.sql, built by the correlation or when a
    correlated capture is opened), its components as keys of their own (ns): the one list the terminal
    and the report rank."""
    if not db.has("statement"):
        return []
    cur = db.sql("SELECT * FROM query_summary")
    cols = [d[0] for d in cur.description]
    out = []
    for values in cur.fetchall():
        row = dict(zip(cols, values))
        comps = {c: 0 for c in ATTRIBUTION_COMPONENTS}
        for item in row.pop("components"):
            comps[item["c"]] += round(item["ns"])
        out.append({**row, **comps})
    return out


def ranked_queries(db: CaptureDB, by: str = "total") -> list[dict]:
    """query_summaries, the largest time `by` (RANK_BY) first: the terminal's and the report's order."""
    return sorted(query_summaries(db), key=lambda r: (-sum(r[c] for c in RANK_BY[by]), -r["total_ns"]))


def top_statements(db: CaptureDB, n: int = 5, by: str = "total", query_id: int | None = None,
                   functions_per_statement: int = 3) -> list[StatementSummary]:
    """Statements grouped by query id (executions without one stand alone), ranked by `by`."""
    if by not in RANK_BY:
        raise MwinvError(f"unknown ranking {by!r} (choose from {', '.join(RANK_BY)})")
    rows = [r for r in ranked_queries(db, by) if query_id is None or r["key"] == query_id]
    texts = _texts(db)
    return [StatementSummary(
        query_id=r["query_id"], text=texts.get(r["query_id"], "") if r["query_id"] is not None else "",
        nodes=r["nodes"], calls=r["calls"], total_ns=int(r["total_ns"]),
        components={c: r[c] for c in ATTRIBUTION_COMPONENTS}, from_workers_ns=int(r["from_workers_ns"]),
        kernel_functions=_functions(db, r["key"], functions_per_statement), example_id=int(r["example_id"]),
        traced_calls=r["traced_calls"] if db.duty_cycled else None)
        for r in rows[:n]]


def _texts(db: CaptureDB) -> dict[int, str]:
    if not db.has("statement_text"):
        return {}
    return dict(db.sql("SELECT query_id, any_value(text) FROM statement_text GROUP BY query_id").fetchall())


def _functions(db: CaptureDB, key: int, limit: int) -> list[tuple[str, float, str]]:
    if not db.modules.holds("statement_kernel_function"):   # a capture correlated without them
        return []
    return [(f, float(share or 0), src) for f, share, src in db.sql(f"""
        SELECT function, sum(k.ns) / nullif(any_value(t.total), 0) AS share, k.source
        FROM statement_kernel_function k JOIN statement_clean s USING (node, statement_id)
        JOIN (SELECT coalesce(s2.query_id, -s2.statement_id) AS key, k2.source, sum(k2.ns) AS total
              FROM statement_kernel_function k2 JOIN statement_clean s2 USING (node, statement_id)
              GROUP BY ALL) t ON t.key = coalesce(s.query_id, -s.statement_id) AND t.source = k.source
        WHERE coalesce(s.query_id, -s.statement_id) = {literal(key)}
        GROUP BY function, k.source ORDER BY sum(k.ns) DESC, function LIMIT {literal(limit)}""").fetchall()]
