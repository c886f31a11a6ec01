"""Evidence for a rare heavy statement, taken on the live scenario once the load has stopped: its plan
on the replica that ran it most (EXPLAIN ANALYZE: which relation it scanned whole and how many rows it
threw away), and, with check, the advised index created on the primary, replayed by the replicas and
the statement planned and timed again on the same replica."""

from __future__ import annotations

import psycopg
from psycopg import sql

from mwinv.errors import MwinvError
from mwinv.ntier import bboard
from mwinv.ntier.analyse import PREFIX_LIKE, advice


def _explain(server, text: str) -> dict:
    with psycopg.connect(server.conninfo(bboard.DATABASE), autocommit=True, connect_timeout=10,
                         options="-c mwinv.track=none") as conn:
        return conn.execute(sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + sql.SQL(text)).fetchone()[0][0]


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _describe(doc: dict) -> tuple[str, str | None, float]:
    """The plan's nodes in one line, the relation a sequential scan read (None: none did) and the
    execution time, ms."""
    parts, relation = [], None
    for n in _nodes(doc["Plan"]):
        what = n["Node Type"]
        if n.get("Relation Name"):
            what += f" on {n['Relation Name']}"
            if n["Node Type"] == "Seq Scan":
                relation = n["Relation Name"]
                what += f" ({n.get('Actual Rows', 0) + n.get('Rows Removed by Filter', 0):,} rows read, " \
                        f"{n.get('Actual Rows', 0):,} kept)"
        parts.append(what)
    return " > ".join(parts) + f"; {doc['Execution Time']:.1f} ms", relation, doc["Execution Time"]


def gather(finding: dict, servers: dict, primary, wait_replay, check: bool) -> None:
    """finding (analyse.rare_heavy's) gets "evidence" lines and advice naming the scanned relation."""
    text = finding["text"]
    finding["evidence"] = []
    if not text or "$1" in text:
        finding["evidence"].append("its text has parameters or is unknown: no plan taken")
        return
    node = max(finding["nodes"], key=lambda n: finding["nodes"][n]["n"], default="r1")
    try:
        before, relation, ms_before = _describe(_explain(servers[node], text))
    except psycopg.Error as exc:
        finding["evidence"].append(f"EXPLAIN on {node} failed: {str(exc).strip().splitlines()[0]}")
        return
    finding["evidence"].append(f"plan on {node}: {before}")
    finding["advice"] = advice(text, relation)
    m = PREFIX_LIKE.search(text)
    if not (check and m and relation):
        return
    index = sql.SQL("CREATE INDEX ON {} ({} text_pattern_ops)").format(sql.Identifier(relation),
                                                                     sql.Identifier(m.group(2)))
    try:
        with primary.connect(bboard.DATABASE) as conn:
            conn.execute(index)
        wait_replay()
        after, scanned, ms_after = _describe(_explain(servers[node], text))
    except (psycopg.Error, MwinvError) as exc:
        finding["evidence"].append(f"the advised index could not be checked: {str(exc).strip().splitlines()[0]}")
        return
    gain = (f"{ms_before / max(ms_after, 1e-3):,.0f} times faster" if scanned is None else
            "the planner kept the sequential scan: the index does not pay for this prefix")
    finding["evidence"].append(f"checked: with the advised index, on {node}: {after} ({gain})")
