"""What really flowed in a cell, measured outside its timed passes: after them, one untimed pass of
every query under `EXPLAIN (ANALYZE, VERBOSE, FORMAT JSON)` on the coordinator, and each of its
foreign scans' remote statements (those without parameters) under EXPLAIN ANALYZE on its data node,
as the cursor postgres_fdw declares (EXPLAIN ANALYZE DECLARE runs it whole, creating no cursor).
One row per plan operator (OP_SCHEMA: rows and loops it really produced, its width and bytes, its own
time, the tables it reads and their size there), the model's input (experiment/predict.py) in place
of the planner's estimates."""

from __future__ import annotations

import json
import re

import psycopg
import pyarrow as pa

from mwinv.cluster.harness import COORDINATOR
from mwinv.workloads import tpch

i32, i64, s, b = pa.int32(), pa.int64(), pa.string(), pa.bool_()
# side: "coord" or the data node that ran the operator; parent: the operator above it (on a node, the
# coordinator's foreign scan whose remote statement it is part of); rows: summed over its loops;
# bytes: rows x the planner's output width (the measured bytes on the links are results.net_bytes);
# self_ns: its own time (its total over its loops minus its children's), instrumented, not the timed
# run's; tables: the TPC-H tables it reads itself (comma-separated), table_bytes and table_rows: their
# size where it runs (rows: the statistics' count); remote_sql: a foreign scan's statement; parameterized: it runs once per outer row (loops);
# join_type: a join's (Inner, Semi, Anti, ...: postgres_fdw of PostgreSQL 15 pushes no semi- or anti-join)
OP_SCHEMA = pa.schema([
    ("cell", s), ("query", i32), ("side", s), ("op", i32), ("parent", i32), ("node_type", s), ("rows", i64),
    ("loops", i64), ("width", i32), ("bytes", i64), ("self_ns", i64), ("total_ns", i64), ("tables", s),
    ("table_bytes", i64), ("table_rows", i64), ("remote_sql", s), ("parameterized", b), ("join_type", s),
])
PARAM = re.compile(r"\$\d")


def _tables(names: list[str]) -> list[str]:
    """The TPC-H tables behind relation names (partitions `lineitem_d2`, parts `lineitem_p3`)."""
    out = []
    for n in names:
        base = re.sub(r"(_d\d+)?(_p\d+)?$", "", n)
        if base in tpch.TABLES and base not in out:
            out.append(base)
    return out


def _walk(node: dict, parent: int, out: list[dict]) -> int:
    """Flatten a plan; returns the operator's total time over its loops (ns), its children's excluded
    from its own."""
    me = len(out)
    loops = int(node.get("Actual Loops", 0))
    total = int(node.get("Actual Total Time", 0.0) * 1e6 * loops)
    op = {"op": me, "parent": parent, "node_type": node["Node Type"], "loops": loops,
          "rows": int(node.get("Actual Rows", 0) * loops), "width": int(node.get("Plan Width", 0)),
          "total_ns": total, "remote_sql": node.get("Remote SQL"), "join_type": node.get("Join Type"),
          "names": [node["Relation Name"]] if "Relation Name" in node else
                   re.findall(r"\((?:[\w.]+\.)?(\w+) \w+\)", node.get("Relations", ""))}
    out.append(op)
    children = sum(_walk(c, me, out) for c in node.get("Plans", []))
    # async foreign scans and init plans can report more than their parent's total
    op["self_ns"] = max(0, total - children)
    return total


def _explain(conn, sql: str) -> dict | None:
    try:
        (plan,) = conn.execute("EXPLAIN (ANALYZE, VERBOSE, FORMAT JSON) " + sql).fetchone()
    except psycopg.Error:   # a timeout or failure: the query has no measured plan
        conn.rollback()
        return None
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]


def table_sizes(conn) -> dict[str, tuple[int, int]]:
    """Per table: its bytes and rows (the statistics' count, taken at the load)."""
    return {n: (b, int(r)) for n, b, r in conn.execute(
        "SELECT relname::text, pg_relation_size(oid), greatest(reltuples, 0) FROM pg_class "
        "WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace").fetchall()}


def measure_plans(cluster, cell: str, queries: list[int], timeout_s: float | None,
                  dbname: str = "tpch") -> tuple[list[dict], dict[int, dict]]:
    """Per query, its operators (OP_SCHEMA rows) and per-query figures (planning_ns: the coordinator's
    planning, its remote estimates included; analyze_ns: the instrumented execution)."""
    conns = {n: cluster.servers[n].connect(dbname) for n in [COORDINATOR, *cluster.data_nodes]}
    try:
        for c in conns.values():
            c.autocommit = True
            if timeout_s:
                c.execute(f"SET statement_timeout = {int(timeout_s * 1000)}")
        coord = conns[COORDINATOR]
        server_of = dict(coord.execute(
            "SELECT c.relname::text, s.srvname::text FROM pg_foreign_table f JOIN pg_class c ON c.oid = f.ftrelid "
            "JOIN pg_foreign_server s ON s.oid = f.ftserver").fetchall())
        sizes = {n: table_sizes(c) for n, c in conns.items()}
        ops_out, per_query = [], {}
        for q in queries:
            root = _explain(coord, tpch.query_sql(q))
            if root is None:
                continue
            ops: list[dict] = []
            _walk(root["Plan"], -1, ops)
            next_id = len(ops)   # the nodes' operators numbered after the coordinator's
            for op in list(ops):
                op["side"] = COORDINATOR
                nodes = {server_of[n] for n in op["names"] if n in server_of}
                node = nodes.pop() if len(nodes) == 1 else None
                where = node or COORDINATOR
                op["tables"] = _tables(op["names"])
                # a partition's table on its node: the foreign table's name without the node (lineitem_d1_p3)
                _size(op, sizes[where], [re.sub(rf"_{where}(?=_p\d+$|$)", "", n) for n in op["names"]])
                op["parameterized"] = bool(op["remote_sql"] and PARAM.search(op["remote_sql"]))
                if node and op["remote_sql"] and not op["parameterized"] and op["loops"]:
                    # as postgres_fdw runs it, a cursor: planned for a fast start and never in parallel
                    # (as a plain statement SF 1's Q10 under 2-part ran on 3 processes under a 0.5 CPU cap)
                    remote = _explain(conns[node], "DECLARE mwinv_measure CURSOR FOR " + op["remote_sql"])
                    if remote is not None:
                        sub: list[dict] = []
                        _walk(remote["Plan"], -1, sub)
                        for r in sub:
                            r["op"] += next_id
                            r["parent"] = op["op"] if r["parent"] < 0 else r["parent"] + next_id
                            r.update(side=node, tables=_tables(r["names"]), parameterized=False)
                            _size(r, sizes[node], r["names"])
                            ops_out.append({"cell": cell, "query": q, **_row(r)})
                        next_id += len(sub)
                ops_out.append({"cell": cell, "query": q, **_row(op)})
            per_query[q] = {"planning_ns": int(root.get("Planning Time", 0) * 1e6),
                            "analyze_ns": int(root.get("Execution Time", 0) * 1e6)}
        return ops_out, per_query
    finally:
        for c in conns.values():
            c.close()


def _size(op: dict, sizes: dict[str, tuple[int, int]], names: list[str]) -> None:
    op["table_bytes"] = sum(sizes.get(n, (0, 0))[0] for n in names) or None
    op["table_rows"] = sum(sizes.get(n, (0, 0))[1] for n in names) or None


def _row(op: dict) -> dict:
    return {"side": op["side"], "op": op["op"], "parent": op["parent"], "node_type": op["node_type"],
            "rows": op["rows"], "loops": op["loops"], "width": op["width"], "bytes": op["rows"] * op["width"],
            "self_ns": op["self_ns"], "total_ns": op["total_ns"], "tables": ",".join(op["tables"]) or None,
            "table_bytes": op["table_bytes"], "table_rows": op["table_rows"], "remote_sql": op["remote_sql"],
            "parameterized": op["parameterized"], "join_type": op["join_type"]}
