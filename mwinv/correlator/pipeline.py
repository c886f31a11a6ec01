"""Correlate a capture: load once, attribute, find kernel hot spots, write the derived tables, and
answer the questions of `mwinv-correlate` as queries over those tables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mwinv.capture.tables import ATTRIBUTION_COMPONENTS
from mwinv.correlator import attribution, hotspots, links
from mwinv.correlator.load import CaptureDB, literal, open_capture
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
    components: dict[str, int]
    from_workers_ns: int
    kernel_functions: list[tuple[str, float, str]]  # (function, share, source)
    example_id: int  # its longest execution: the one advice is given for


def correlate(capture_dir: str | Path, write: bool = True, progress=None) -> CaptureDB:
    db = open_capture(capture_dir)
    if not db.has("statement"):
        return db
    if progress:
        progress("attributing statement time")
    links.build_links(db)
    attribution.attribute(db, progress=progress)
    links.remote_waits(db)
    if progress:
        progress("kernel hot spots")
    hotspots.kernel_functions(db)
    if write:
        if progress:
            progress("writing the derived tables")
        for name in ("statement_attribution", "statement_kernel_function", "statement_io", "statement_link",
                     "traced_statement"):
            d = db.capture.table_dir(name)
            for old in d.glob("*.parquet") if d.exists() else []:
                old.unlink()  # derived tables are replaced, never appended to
            if db.sql(f"SELECT count(*) FROM {name}").fetchone()[0]:
                # streamed: the attribution has a row per statement and component
                db.capture.write_part(name, db.sql(f"SELECT * FROM {name}").to_arrow_reader(1 << 20), node="all")
    return db


def top_statements(db: CaptureDB, n: int = 5, by: str = "total", query_id: int | None = None,
                   functions_per_statement: int = 3) -> list[StatementSummary]:
    """Statements grouped by query id (executions without one stand alone), ranked by `by`."""
    if by not in RANK_BY:
        raise MwinvError(f"unknown ranking {by!r} (choose from {', '.join(RANK_BY)})")
    if not db.has("statement"):
        return []
    rank = ", ".join(f"'{c}'" for c in RANK_BY[by])
    where = f"WHERE g.key = {literal(query_id)}" if query_id is not None else ""
    # a data node's statements for a coordinator statement are shown as its parts, not ranked apart
    linked = db.sql("SELECT count(*) FROM information_schema.tables WHERE table_name = 'statement_link'").fetchone()[0]
    own = "WHERE (s.node, s.statement_id) NOT IN (SELECT (node, statement_id) FROM statement_link)" if linked else ""
    # duty-cycled (kernel events on in windows): a query's components are its traced executions', scaled
    # to the time of all of them, where any was traced
    duty = db.sql("SELECT count(*) > count(DISTINCT node) FROM trace_window").fetchone()[0]
    comp_ns = ("CASE WHEN any_value(g.traced_ns) > 0 THEN sum(ns) FILTER (WHERE traced) * any_value(g.total_ns) "
               "/ any_value(g.traced_ns) ELSE sum(ns) END" if duty else "sum(ns)")
    rows = db.sql(f"""
        WITH a AS (
            SELECT coalesce(s.query_id, -s.statement_id) AS key, s.query_id, s.node, s.statement_id,
                   a.component, a.ns, a.from_workers_ns, t.statement_id IS NOT NULL AS traced
            FROM statement_attribution a JOIN statement_clean s USING (node, statement_id)
                 LEFT JOIN traced_statement t USING (node, statement_id) {own}),
        g AS (
            SELECT key, any_value(query_id) AS query_id, string_agg(DISTINCT node, ',') AS nodes,
                   count(DISTINCT (node, statement_id)) AS calls, sum(ns) AS total_ns,
                   sum(ns) FILTER (WHERE component IN ({rank})) AS rank_ns,
                   sum(from_workers_ns) AS from_workers_ns, coalesce(sum(ns) FILTER (WHERE traced), 0) AS traced_ns
            FROM a GROUP BY key),
        comp AS (SELECT key, component, {comp_ns} AS ns FROM a JOIN g USING (key) GROUP BY key, component),
        example AS (
            SELECT key, arg_max(statement_id, wall) AS example_id
            FROM (SELECT key, statement_id, sum(ns) AS wall FROM a GROUP BY ALL) GROUP BY key)
        SELECT g.key, g.query_id, g.nodes, g.calls, g.total_ns, g.from_workers_ns,
               (SELECT list({{'c': component, 'ns': ns}}) FROM comp WHERE comp.key = g.key) AS comps, e.example_id
        FROM g JOIN example e USING (key) {where}
        ORDER BY g.rank_ns DESC NULLS LAST, g.total_ns DESC LIMIT {literal(n)}""").fetchall()
    texts = _texts(db)
    out = []
    for key, qid, nodes, calls, total, workers, comps, example_id in rows:
        components = {c: 0 for c in ATTRIBUTION_COMPONENTS}
        for item in comps:
            components[item["c"]] += round(item["ns"])
        out.append(StatementSummary(
            query_id=qid, text=texts.get(qid, "") if qid is not None else "", nodes=nodes, calls=calls,
            total_ns=int(total), components=components, from_workers_ns=int(workers or 0),
            kernel_functions=_functions(db, key, functions_per_statement), example_id=int(example_id)))
    return out


def _texts(db: CaptureDB) -> dict[int, str]:
    if not db.has("statement_text"):
        return {}
    return dict(db.sql("SELECT query_id, any_value(text) FROM statement_text GROUP BY query_id").fetchall())


def _functions(db: CaptureDB, key: int, limit: int) -> list[tuple[str, float, str]]:
    exists = db.sql("SELECT count(*) FROM information_schema.tables "
                    "WHERE table_name = 'statement_kernel_function'").fetchone()[0]
    if not exists:
        return []
    return [(f, float(share or 0), src) for f, share, src in db.sql(f"""
        SELECT function, sum(k.ns) / nullif(any_value(t.total), 0) AS share, k.source
        FROM statement_kernel_function k JOIN statement_clean s USING (node, statement_id)
        JOIN (SELECT coalesce(s2.query_id, -s2.statement_id) AS key, k2.source, sum(k2.ns) AS total
              FROM statement_kernel_function k2 JOIN statement_clean s2 USING (node, statement_id)
              GROUP BY ALL) t ON t.key = coalesce(s.query_id, -s.statement_id) AND t.source = k.source
        WHERE coalesce(s.query_id, -s.statement_id) = {literal(key)}
        GROUP BY function, k.source ORDER BY sum(k.ns) DESC, function LIMIT {literal(limit)}""").fetchall()]
