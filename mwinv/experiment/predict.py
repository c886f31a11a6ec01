"""The cluster model: a query's time in one cell predicted from its run in another that differs in the
node count, the scheme or both, from what the run measured (measure.py's operators, the capture's
components), not from the planner's estimates.

A run is a critical path, not a sum: the coordinator's own time C (its wall minus its wait for the data
nodes) and the nodes' time N (the slowest node's execution, plus the others' for the share of the work the
coordinator fetches one node after another: one_at_a_time) overlap by OVERLAP x (n - 1) / n of the shorter
for the share fetched at once (one node and its coordinator take turns, a fetch being a request and its
answer, and so do nodes fetched in turn; fetched at once, the others work while the coordinator takes one's
rows); what the two miss (the links) is kept from the source run.
A prediction rebuilds C and N under the target cell's levels:

- other node count: the nodes' summed execution divided over the target's nodes with the source's
  measured skew (slowest / mean); round trips (each loop of a foreign partition's scan: per outer row
  for a correlated subquery) grow with the partitions, each costing RT on the coordinator's path, except
  lookups on the partition key (run-time pruning: one partition a lookup); the
  planning's remote estimates (one EXPLAIN per partition path) grow with them too; a node's share of the
  tables its whole pass reads (the page cache is shared by the queries of a pass) against its page cache
  (node memory x CACHE_SHARE): the source's disk time and its system CPU beyond SYS_SHARE of its user CPU
  (the page cache's churn) leave when the share comes to fit, the query's
  reads in place (index and bitmap heap scans: random_share) come from the disk at the calibrated rate when
  it stops fitting, a sequential scan's behind its CPU (read-ahead); CPU contention when the
  coordinator and the nodes ask for more than the host's cores (their measured CPU per wall) stretches
  the run by (demand / cores)^CONTENTION;
- other scheme: the tables that become partitioned join on the nodes where they are co-partitioned
  with tables already there: the coordinator's join of them (and their local scans) moves to the nodes,
  which ship the join's output instead of their inputs (its rows divided by the selectivity of the
  replicated tables joined before it); tables that become replicated come back to the coordinator:
  the nodes' remote plans say what each node then ships (the still-partitioned subtrees' rows) and
  what work moves (the rest of the remote plan). Each shipped row costs ROW on the coordinator.
  Moved work is the instrumented operators' own time scaled to the timed run, a node's at its CPU cap.
  Semi- and anti-joins, joins over a remote aggregate (postgres_fdw of PostgreSQL 15 pushes neither) and
  joins whose two sides both had replicated tables joined first stay on the coordinator, partitionwise
  where their inputs become co-partitioned.
- no prediction (`unseen`, the reason counted in the report) where the source run cannot show the
  target's plan: a table read per outer row whose placement changes, a pushed join whose rows the
  coordinator sorts (the nodes' cursor is planned for a fast start), a remote plan measured with parallel
  workers (a cursor never runs in parallel: not the plan that ran), the tables' row counts a rule needs not
  measured (results older than that).

The constants are fitted on the odd-numbered queries (fit()); the report gives the errors of the
even-numbered ones apart."""

from __future__ import annotations

import itertools
import math
import re
import statistics
from dataclasses import dataclass, field

from mwinv.cluster.harness import COORDINATOR

JOINS = {"Hash Join", "Merge Join", "Nested Loop"}
# operators that stay on the coordinator whatever the scheme (postgres_fdw in PostgreSQL 15 pushes no
# partial aggregate, so an aggregate over partitions runs there)
STAYS = {"Aggregate", "WindowAgg", "Limit", "Unique", "SetOp", "Gather", "Gather Merge", "SubqueryScan", "CTE Scan"}


@dataclass
class Constants:
    row_ns: float = 1000.0       # the coordinator's cost of a row it receives
    rt_ns: float = 200_000.0     # a round trip to a node (a foreign scan's loop)
    contention: float = 1.0      # exponent of the CPU stretch
    cache_share: float = 0.7     # of a node's memory cap that holds its page cache
    overlap: float = 0.5         # of the shorter of the coordinator's own time and the nodes' that overlaps
    sys_share: float = 1.0       # a node's system CPU per user CPU with its data cached: beyond, page cache churn


GRID = {"row_ns": [250, 500, 1000, 2000, 4000], "rt_ns": [50_000, 100_000, 200_000, 400_000, 800_000],
        "contention": [0.0, 0.5, 1.0, 1.5], "cache_share": [0.5, 0.7, 0.9], "overlap": [0.0, 0.25, 0.5, 0.75, 1.0],
        "sys_share": [0.25, 0.5, 1.0]}
PERIOD_NS = 100e6   # cgroup v2 cpu.max period


@dataclass
class Op:
    side: str
    op: int
    parent: int
    node_type: str
    rows: int
    loops: int
    bytes: int
    self_ns: int
    tables: tuple[str, ...]
    table_bytes: int
    table_rows: int
    parameterized: bool
    ordered: bool = False   # a foreign scan whose remote statement sorts (ORDER BY) or groups (GROUP BY)
    grouped: bool = False
    join_type: str | None = None
    keyed: tuple[str, ...] = ()   # the columns a parameterized remote statement compares with a parameter
    children: list["Op"] = field(default_factory=list)

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def tabs(self) -> set[str]:
        return {t for o in self.walk() for t in o.tables}

    def has_param(self) -> bool:
        return any(o.parameterized for o in self.walk())


@dataclass
class Run:
    """One cell's run of one query: its levels and what was measured."""
    cell: str
    query: int
    nodes: int
    scheme: str
    others: tuple
    node_cpu: float | None
    memory_mb: int | None
    host_cpus: int
    wall_ns: int
    own_ns: int             # the coordinator's own time (wall - its wait for the data nodes)
    own_cpu_ns: int
    node_max_ns: int        # the slowest data node's execution
    node_sum_ns: int
    node_cpu_ns: int
    node_sys_ns: int        # the nodes' system CPU (of node_cpu_ns)
    node_rq_ns: int
    node_disk_ns: int
    planning_ns: int
    analyze_ns: int
    root: Op | None         # the coordinator's plan, the nodes' remote plans under its foreign scans
    pass_tables: dict[str, int]   # the tables the cell's pass read, their whole size (pass_tables)


# `(($1::integer = l_orderkey))`, `((l_partkey = $1::integer))`: postgres_fdw's deparsed parameter comparisons
KEYED = re.compile(r"\(\(\$\d+::[\w ]+ = (\w+)\)\)|\(\((\w+) = \$\d+::[\w ]+\)\)")


def _keyed(sql: str):
    for m in KEYED.finditer(sql):
        yield m[1] or m[2]


def plan_tree(rows: list[dict]) -> Op | None:
    ops = {r["op"]: Op(r["side"], r["op"], r["parent"], r["node_type"], r["rows"] or 0, r["loops"] or 0,
                       r["bytes"] or 0, r["self_ns"] or 0, tuple((r["tables"] or "").split(",")) if r["tables"] else (),
                       r["table_bytes"] or 0, r.get("table_rows") or 0, bool(r["parameterized"]),
                       " ORDER BY " in (r.get("remote_sql") or ""), " GROUP BY " in (r.get("remote_sql") or ""),
                       r.get("join_type"), tuple(_keyed(r.get("remote_sql") or "")))
           for r in rows}
    root = None
    for o in sorted(ops.values(), key=lambda o: o.op):
        if o.parent in ops:
            ops[o.parent].children.append(o)
        elif o.parent < 0:
            root = o
    return root


def _coord_ops(root: Op):
    """The coordinator's operators (not the nodes' remote plans under its foreign scans)."""
    yield root
    for c in root.children:
        if c.side == COORDINATOR:
            yield from _coord_ops(c)


def _foreign(root: Op) -> list[Op]:
    return [o for o in _coord_ops(root) if o.node_type == "Foreign Scan"]


def _parents(root: Op) -> dict[int, Op]:
    return {id(c): o for o in _coord_ops(root) for c in o.children}


def semi(op: Op) -> bool:
    """A semi- or anti-join (EXISTS, IN, NOT EXISTS), which postgres_fdw of PostgreSQL 15 does not push to
    the nodes. Results measured before the join type was: one that returned fewer rows than its outer input
    though its inner one had as many or more (Q4's orders against lineitem: 52,523 of 57,218 against
    3,793,296); on the SF 1 3-node cells, whose types were measured, that tells 118 of 127 joins right (9
    inner joins that kept few rows taken for semi-joins)."""
    if op.join_type:
        return op.join_type in ("Semi", "Anti", "Right Semi", "Right Anti")
    if op.node_type not in JOINS or len(op.children) < 2:
        return False
    outer, inner = op.children[0].rows, op.children[1].rows
    return op.rows < outer <= inner


PASS = {"Append", "Merge Append", "Hash", "Materialize", "Sort", "Incremental Sort", "Memoize"}


def one_at_a_time(root: Op, nodes: int, frm: dict | None = None, to: dict | None = None) -> float:
    """The share of the nodes' measured work (their remote plans' own time) that the coordinator fetches
    one node after another on more than one node: postgres_fdw runs a partitioned scan's nodes at once only
    as an Append's direct children (async append); a Merge Append (sorted rows), a partitionwise
    aggregate or join on the coordinator between the Append and the foreign scans fetches them in turn
    (SF 1, 2 and 4 nodes: Q6's and Q12's coordinators waited the nodes' summed execution, Q3's and Q5's the
    slowest node's). From a one-node plan: what its partitions will become (an ordered remote statement, an
    aggregate above the scan, a join of two foreign scans). Under another scheme `to`: a join on the
    coordinator is partitionwise where its two inputs read tables co-partitioned there and it is not pushed
    to the nodes (a semi-join, a parameterized scan; Q4 under 2-part)."""
    parent = _parents(root)

    def join_above(o: Op) -> Op | None:
        p = parent.get(id(o))
        while p is not None and p.node_type in PASS:
            p = parent.get(id(p))
        return p if p is not None and p.node_type in JOINS else None

    def partitionwise(j: Op, scheme: dict) -> bool:
        sides = [c.tabs() for c in j.children[:2]]
        return len(sides) == 2 and any(all(ts & g for ts in sides) for g in _groups(scheme))

    def seq(f: Op) -> bool:
        p = parent.get(id(f))
        if p is None or f.parameterized:
            return False
        if nodes > 1 and p.node_type in ("Aggregate", "Merge Append") or nodes == 1 and (
                p.node_type == "Aggregate" or f.ordered and not f.grouped):
            return True   # the partitions' own aggregates, their sorted rows: in turn whatever the scheme
        j = join_above(f)
        if frm is None or to is None or frm == to:
            if nodes > 1:
                return p.node_type != "Append"
            return bool(j and sum(1 for o in _coord_ops(j) if o.node_type == "Foreign Scan" and not o.parameterized
                                  and not o.grouped) > 1)
        return bool(j and partitionwise(j, to) and (semi(j) or j.has_param()))
    work = [(sum(o.self_ns for c in f.children if c.side != COORDINATOR for o in c.walk()), seq(f))
            for f in _foreign(root)]
    total = sum(w for w, _ in work)
    return sum(w for w, s in work if s) / total if total else 0.0


def _groups(scheme: dict) -> list[set[str]]:
    """The co-partitioned groups of a scheme: partitioned tables whose keys share a domain
    (o_orderkey, l_orderkey)."""
    by: dict[str, set[str]] = {}
    for t, key in scheme.get("partitioned", {}).items():
        by.setdefault(key.split("_", 1)[-1], set()).add(t)
    return list(by.values())


def _parts(scheme: dict, nodes: int) -> int:
    return scheme.get("parts") or nodes


def _working(scheme: dict, nodes: int) -> int:
    """The data nodes that hold a part: a scheme of fewer parts than nodes leaves the others idle (parts
    are placed round robin)."""
    return min(nodes, _parts(scheme, nodes))


def _per_outer_row(op: Op, side: str | None = None, workers: int = 1):
    """The table scans under `op` (on `side`: the coordinator's, or its remote plans) that ran once per outer
    row: more loops than the processes that ran them (a Gather's workers and leader each loop once)."""
    if op.node_type in ("Gather", "Gather Merge"):
        workers = max((c.loops for c in op.children), default=1)
    if op.loops > workers and op.tables and (side is None or op.side == side):
        yield op
    for c in op.children:
        if side is None or c.side == side:
            yield from _per_outer_row(c, side, workers)


def _maximal(op: Op, pred) -> list[Op]:
    """The largest subtrees under `op` (itself included) that satisfy `pred`."""
    return [op] if pred(op) else [s for c in op.children for s in _maximal(c, pred)]


@dataclass
class Moved:
    coord_ns: int = 0        # instrumented coordinator work (positive: more on the coordinator)
    node_ns: int = 0         # instrumented node work, summed over the nodes
    rows: int = 0            # rows shipped to the coordinator, change
    bytes: int = 0
    trips: int = 0           # round trips to the nodes, change
    unseen: str = ""         # why the source run cannot show the target's plan


def scheme_change(root: Op, frm: dict, to: dict, node_cpu: float) -> Moved:
    """What moves between the coordinator and the nodes when `frm` becomes `to` (see the module's doc)."""
    m = Moved()
    was, now = set(frm.get("partitioned", {})), set(to.get("partitioned", {}))
    groups = _groups(to)

    def group_of(tabs: set[str]) -> set[str] | None:
        return next((g for g in groups if tabs and tabs <= g), None)

    def coord_work(op: Op) -> int:
        return sum(o.self_ns for o in _coord_ops(op) if o.node_type != "Foreign Scan")

    def shipped(op: Op) -> tuple[int, int]:
        fs = _foreign(op)
        return sum(o.rows for o in fs), sum(o.bytes for o in fs)

    pushed: set[int] = set()
    parent = _parents(root)

    def push(op: Op, rows: int, width_bytes: int, extra_ns: int = 0) -> None:
        pushed.update(id(o) for o in op.walk())
        above = parent.get(id(op))
        if any(o.node_type in JOINS for o in op.walk()) and any("Sort" in o.node_type for o in (op, above) if o):
            # Q10 at SF 1: the coordinator sorted the join's rows for its merge join; pushed, the nodes were
            # asked for them sorted, as a cursor planned for a fast start: index lookups per order, 8.5 s of
            # their CPU for the 0.3 s the coordinator's hash join took
            m.unseen = ("the nodes would return the join's rows sorted, as a cursor planned for a fast start: "
                        "their plan for it is not in this run")
        r, b = shipped(op)
        m.rows += rows - r
        m.bytes += width_bytes - b
        w = coord_work(op) + extra_ns
        m.coord_ns -= w
        m.node_ns += w   # CPU time, throttled on the node by predict

    # the nodes' scan rate (own time per byte of the tables they scanned), for a table they would scan whole
    scans = [o for o in root.walk() if o.side != COORDINATOR and o.tables and o.table_bytes]
    scan_ns_per_byte = sum(o.self_ns for o in scans) / max(1, sum(o.table_bytes for o in scans))

    def pushable(op: Op) -> bool:
        # postgres_fdw joins base relations on a node, not a remote aggregate (Q18's subquery grouped by
        # l_orderkey)
        return bool(group_of(op.tabs())) and not op.has_param() and not any(
            o.node_type in STAYS or semi(o) or o.grouped for o in _coord_ops(op))

    def visit(op: Op) -> None:
        tabs = op.tabs()
        if tabs & (now - was) and pushable(op) and op.loops <= 1:
            push(op, op.rows, op.bytes)   # its tables all co-partitioned under `to`: it runs on the nodes
            return
        if op.node_type in JOINS and not op.has_param() and not semi(op):
            kids = [(c, c.tabs()) for c in op.children]
            g = group_of({t for _, ts in kids for t in ts} & now)
            inner = [(c, ts) for c, ts in kids if g and ts & g]
            if g and len(inner) == 2 and (g & (now - was)) & tabs and all(pushable(c) or not ts <= g for c, ts in inner):
                # the group's tables meet here, with replicated ones joined to one side first: the
                # planner joins the group on the nodes and the replicated ones after, on the coordinator
                mixed = [(c, ts) for c, ts in inner if not ts <= g]
                if len(mixed) == 2:
                    # replicated tables joined to both sides first (Q7: lineitem to supplier, orders to
                    # customer): under 2-part the planner kept that order and shipped both tables
                    for x, _ in kids:
                        visit(x)
                    return
                if mixed:
                    c, ts = mixed[0]
                    pure = _maximal(c, pushable)
                    inside = {id(o) for s in pure for o in s.walk()}
                    if any(id(o) not in inside and set(o.tables) & g for o in c.walk()):
                        for x, _ in kids:   # the group's tables elsewhere too (Q18's subquery): no reorder
                            visit(x)
                        return
                    other = next(x for x, _ in inner if x is not c)
                    width = op.bytes / max(1, op.rows)
                    looped = [o for s in pure for o in s.walk() if o.loops > 1 and o.tables]
                    if looped:
                        # an inner scan per replicated outer row (Q5's, Q7's orders per customer): on the
                        # nodes the other side's rows meet the group's table filtered by its own conditions
                        # alone: its rows per loop against the table's rows per row of the largest
                        # replicated table before it (Q5 at SF 1: 60,366 rows in 30,183 loops, 2 of 10 orders
                        # a customer: 0.2)
                        s = looped[0]
                        outer = max((o.table_rows for o in c.walk() if o.tables and not set(o.tables) & g),
                                    default=0)
                        fan = s.table_rows / outer if s.table_rows and outer else 0
                        if not fan:
                            m.unseen = ("the tables' row counts were not measured (results older than that): "
                                        f"what {s.tables[0]} filtered alone keeps on the nodes is not known")
                        rows = int(other.rows * min(1.0, s.rows / (s.loops * fan))) if fan else other.rows
                        m.node_ns += int(scan_ns_per_byte * sum(o.table_bytes for s in pure for o in s.walk()
                                                                if o.tables))
                    else:
                        sel = max(1, c.rows) / max(1, sum(s.rows for s in pure))
                        rows = int(op.rows / min(1.0, sel))
                    for s in pure:
                        push(s, 0, 0)
                    push(other, 0, 0, extra_ns=op.self_ns)
                    m.rows += rows
                    m.bytes += int(rows * width)
                    return
        for c in op.children:
            if c.side == COORDINATOR:
                visit(c)

    if now - was:
        visit(root)
        looped = next((o for o in _per_outer_row(root, COORDINATOR) if set(o.tables) & (now - was)
                       and id(o) not in pushed), None)
        if looped:
            # Q21 at SF 1: orders looked up 337,680 times on the coordinator under 1-part; under 2-part the
            # planner rescanned a join per supplier instead, 13,859 remote lookups
            m.unseen = (f"{looped.tables[0]} is read once per outer row on the coordinator ({looped.loops:,} "
                        "times): partitioned, each would be a round trip, and the plan the planner picks "
                        "instead is not in this run")
    if was - now:
        gone = was - now
        for f in _foreign(root):
            remote = [c for c in f.children if c.side != COORDINATOR]
            if f.parameterized and f.tabs() <= gone:
                m.trips -= f.loops   # a lookup per outer row, local once the table is replicated
            if not remote or not (f.tabs() & gone):
                continue
            if any(o.node_type in ("Gather", "Gather Merge") for o in remote[0].walk()):
                # a cursor never runs in parallel: this plan was measured as a plain statement (SF 1's
                # 1-node cells), not the one that ran, and what it moves is not known
                m.unseen = "the nodes' plan was measured with parallel workers, not as the cursor that ran"
            keep = _maximal(remote[0], lambda s: bool(group_of(s.tabs())) and s.node_type not in STAYS)
            kept = {id(o) for k in keep for o in k.walk()}
            looped = next((o for o in _per_outer_row(remote[0]) if id(o) in kept), None)
            if looped:
                # Q10 at SF 1 under 2-part: lineitem looked up per order on the nodes; with orders on the
                # coordinator the planner scanned lineitem whole instead
                m.unseen = (f"{looped.tables[0]} is read once per outer row on the nodes ({looped.loops:,} times): "
                            "with the outer table on the coordinator, the plan the planner picks is not in this run")
            kept_ns = sum(o.self_ns for s in keep for o in s.walk())
            moved = sum(o.self_ns for o in remote[0].walk()) - kept_ns
            # a node's operators ran under its quota: their CPU is about their time x the quota
            m.node_ns -= int(moved * min(1.0, node_cpu))
            m.coord_ns += int(moved * min(1.0, node_cpu))
            m.rows += sum(s.rows for s in keep) - f.rows
            m.bytes += sum(s.bytes for s in keep) - f.bytes
    return m


def pass_tables(rows: list[dict], partitioned: set[str]) -> dict[str, int]:
    """The tables a cell's pass read (results_op rows of all its queries) and their whole size: a
    partitioned table's parts summed over its nodes."""
    part: dict[tuple[str, str], int] = {}
    whole: dict[str, int] = {}
    for r in rows:
        for t in (r["tables"] or "").split(",") if r["tables"] and r["table_bytes"] else ():
            if t in partitioned:
                if r["side"] != COORDINATOR:
                    part[r["side"], t] = max(part.get((r["side"], t), 0), r["table_bytes"])
            else:
                whole[t] = max(whole.get(t, 0), r["table_bytes"])
    for (_, t), b in part.items():
        whole[t] = whole.get(t, 0) + b
    return whole


def _on_nodes(tables: dict[str, int], scheme: dict, nodes: int) -> float:
    """The bytes of `tables` the busiest data node holds under `scheme` on `nodes` (its parts' share of the
    partitioned: 2 of 3 parts on 2 nodes)."""
    parts = _parts(scheme, nodes)
    return sum(b for t, b in tables.items() if t in scheme.get("partitioned", {})) * math.ceil(parts / nodes) / parts


@dataclass
class Change:
    """What a change of cell does to a run, before the constants: the moved work and rows, the round
    trips and planning added, the working sets."""
    moved: Moved
    trips: float            # round trips added
    planning_ns: float      # planning added (remote estimates: per partition path)
    pass0: float            # a node's share of the tables its pass reads (every query's), source and target
    pass1: float
    read0: float            # the query's reads of partitioned tables, all nodes, source and target
    read1: float
    moves: bool             # a scheme change that places a table the query reads otherwise (or no scheme change)
    unseen: str             # why the source cannot predict the target (the plan it would run is not in the run)
    waited: float = 1.0     # the share of the nodes' reads that wait for the disk (random_share)
    one_at_a_time: tuple[float, float] = (0.0, 0.0)   # the share of the nodes' work fetched one node after
    # another (one_at_a_time), in the source and the target
    working: tuple[int, int] = (0, 0)   # the data nodes that hold a part, source and target (_working)


def change(src: Run, nodes: int, scheme: str, schemes: dict[str, dict]) -> Change | None:
    frm, to = schemes.get(src.scheme), schemes.get(scheme)
    if src.root is None or not src.wall_ns or frm is None or to is None:
        return None
    moved = scheme_change(src.root, frm, to, src.node_cpu or 1.0) if scheme != src.scheme else Moved()
    grow = _parts(to, nodes) / _parts(frm, src.nodes) - 1
    gone = set(frm.get("partitioned", {})) - set(to.get("partitioned", {}))
    trips = sum(o.loops for o in _foreign(src.root)
                if not (o.parameterized and o.tabs() <= gone) and not (pruned(o, frm) and pruned(o, to)))
    mine = {t: b for t, b in src.pass_tables.items() if t in src.root.tabs()}
    return Change(moved, trips * grow + moved.trips, src.planning_ns * grow,
                  _on_nodes(src.pass_tables, frm, src.nodes), _on_nodes(src.pass_tables, to, nodes),
                  _on_nodes(mine, frm, 1), _on_nodes(mine, to, 1),
                  scheme == src.scheme or bool(placed_otherwise(frm, to) & src.root.tabs()), moved.unseen,
                  random_share(src.root),
                  (one_at_a_time(src.root, src.nodes), one_at_a_time(src.root, src.nodes, frm, to)),
                  (_working(frm, src.nodes), _working(to, nodes)))


RANDOM = {"Bitmap Heap Scan", "Index Scan"}


def random_share(root: Op) -> float:
    """The share of the table bytes the nodes' scans read that they read in place, page by page (an index
    or a bitmap heap scan), and so wait for when the page cache misses: a sequential scan's reads are the
    kernel's read-ahead, behind its CPU (SF 1, 2-part, 2 nodes, whose pass does not fit: Q1 and Q6, sequential,
    waited 53 and 52 ms on the disk; Q14 and Q15, bitmap heap scans, 736 and 1,158 ms)."""
    size: dict[str, int] = {}
    in_place: set[str] = set()
    for o in root.walk():
        if o.side != COORDINATOR and o.tables and o.table_bytes:
            size[o.tables[0]] = max(o.table_bytes, size.get(o.tables[0], 0))
            if o.node_type in RANDOM:
                in_place.add(o.tables[0])
    total = sum(size.values())
    return sum(size[t] for t in in_place) / total if total else 1.0


def pruned(op: Op, scheme: dict) -> bool:
    """A table read per outer row on its partition key: run-time pruning sends each lookup to the one
    partition that holds the key, so its round trips do not grow with the partitions (SF 1, Q21's orders
    and lineitem per order: 13,859 and 6,923 lookups on 1 node, 3,403-3,524 and 1,677-1,770 a partition
    on 4); on another column every partition is asked (Q17's lineitem per part: 6,088 loops on each)."""
    keys = scheme.get("partitioned", {})
    return op.parameterized and any(keys.get(t) in op.keyed for t in op.tables)


def placed_otherwise(frm: dict, to: dict) -> set[str]:
    """The tables two schemes place differently."""
    was, now = frm.get("partitioned", {}), to.get("partitioned", {})
    moved = {t for t in {*was, *now} if was.get(t) != now.get(t)}
    return moved | (set(was) | set(now) if frm.get("parts") != to.get("parts") else set())


def _throttled(cpu_ns: float, quota: float | None) -> float:
    """The wall time of `cpu_ns` of work under a CPU quota of `quota` CPUs per 100 ms period (cgroup
    cpu.max): a burst within one period's quota runs at full speed, the rest at the quota's rate (SF 0.1,
    Q3 under 2-part: 105 ms of a node's CPU took 183 ms on one node, 2 x 52 ms 58 ms on two)."""
    if not quota or quota >= 1:
        return cpu_ns
    return cpu_ns + max(0.0, cpu_ns - quota * PERIOD_NS) * (1 / quota - 1)


def _node_wall(cpu_ns: float, rest_ns: float, nodes: int, skew: float, quota: float | None) -> float:
    """The slowest node's execution when `cpu_ns` and `rest_ns` (its other time: reads, sends, waits)
    are shared by `nodes` with `skew`."""
    share = (skew if nodes > 1 else 1.0) / nodes
    return rest_ns * share + _throttled(cpu_ns * share, quota)


def predict(src: Run, nodes: int, c: Change, k: Constants, disk_bps: float | None) -> int:
    """The query's time at `nodes` after the change `c` (see the module's doc)."""
    quota = src.node_cpu
    n0, nodes = c.working if all(c.working) else (src.nodes, nodes)   # the nodes that do the work
    # the instrumented run's operators scaled to the timed run's (instrumentation's overhead), within reason
    scale = min(3.0, max(0.3, src.wall_ns / src.analyze_ns)) if src.analyze_ns else 1.0
    # rows that stop coming save no more than the coordinator's foreign scans took to take them in (SF 1, Q22
    # from 2-part to 1-part on 2 nodes: 1.5 M rows, 750 ms at 500 ns, its foreign scans 471 ms, its own 360)
    fetch = sum(o.self_ns for o in _foreign(src.root)) * scale
    own = (src.own_ns + c.moved.coord_ns * scale + max(c.moved.rows * k.row_ns, -fetch) + k.rt_ns * c.trips
           + c.planning_ns)
    cpu = max(0.0, src.node_cpu_ns + c.moved.node_ns * scale)
    rest = max(0.0, src.node_sum_ns - src.node_cpu_ns - src.node_rq_ns)
    if src.memory_mb:
        # the page cache is the pass's, not the query's: where a node's share of every table the pass reads
        # does not fit, a query's scan finds its table evicted by the others' (SF 1, 2 nodes: Q14 and Q15
        # read 331 and 1,028 ms under 1-part, 904 and 2,805 under 2-part, orders read by Q13 between)
        cache = src.memory_mb * 2**20 * k.cache_share
        if c.pass0 > cache >= c.pass1:
            # Q14 at SF 1 under 1-part, 1 node to 2: the nodes' disk time 1,193 -> 88 ms, their system CPU
            # 692 -> 150 ms (user 201 -> 117); the churn is the system CPU beyond its share with the data
            # cached (Q12 under 2-part, 2 nodes to 3: 648 -> 216 ms, user 598 -> 667)
            rest = max(0.0, rest - src.node_disk_ns)
            churn = src.node_sys_ns - k.sys_share * (src.node_cpu_ns - src.node_sys_ns)
            cpu = max(0.0, cpu - max(0.0, churn))
        elif c.pass1 > cache >= c.pass0 and disk_bps:
            rest += c.waited * c.read1 / disk_bps * 1e9
        elif c.pass1 > cache and c.read0:
            rest += src.node_disk_ns * (c.read1 / c.read0 - 1)
    skew = src.node_max_ns * n0 / src.node_sum_ns if src.node_sum_ns and n0 > 1 else 1.0

    def nodes_path(cpu_: float, rest_: float, n: int, seq: float) -> float:
        # the slowest node, and the others' work where the coordinator fetches them one after another
        slowest = _node_wall(cpu_, rest_, n, skew, quota)
        return slowest + seq * (n * _node_wall(cpu_, rest_, n, 1.0, quota) - slowest) if n > 1 else slowest
    seq0, seq1 = c.one_at_a_time
    rest0 = max(0.0, src.node_sum_ns - src.node_cpu_ns - src.node_rq_ns)
    measured0 = src.node_max_ns + seq0 * (src.node_sum_ns - src.node_max_ns)
    fitted0 = nodes_path(src.node_cpu_ns, rest0, n0, seq0)
    node = nodes_path(cpu, rest, nodes, seq1) * (measured0 / fitted0 if fitted0 else 1.0)

    def path(own_: float, node_: float, n: int, seq: float) -> float:
        # one node and its coordinator take turns (a fetch is a request and its answer), and so do nodes
        # fetched one after another; fetched at once, the other nodes work while the coordinator takes one's rows
        return own_ + node_ - k.overlap * (n - 1) / n * (1 - seq) * min(own_, node_)
    rest_of_wall = src.wall_ns - path(src.own_ns, measured0, n0, seq0)   # the links, what the parts miss
    if c.moved.rows and sum(o.rows for o in _foreign(src.root)) + c.moved.rows <= 0:
        rest_of_wall = 0.0   # nothing left to ship: the links' part of the wait leaves too
    t = max(0.0, path(own, node, nodes, seq1) + rest_of_wall)
    # CPU contention: the coordinator's and the nodes' CPU per wall against the host's cores
    u_c = min(1.0, src.own_cpu_ns / src.wall_ns)
    u_n = min(quota or 1.0, src.node_cpu_ns / n0 / src.node_max_ns) if src.node_max_ns else 0.0

    def stretch(n: int) -> float:
        return max(1.0, (u_c + n * u_n) / max(1, src.host_cpus)) ** k.contention
    return int(t * stretch(nodes) / stretch(n0))


@dataclass
class CellPrediction:
    rule: str               # "nodes", "scheme" or "nodes and scheme": what differs
    query: int
    from_cell: str
    to_cell: str
    from_nodes: int
    from_scheme: str
    nodes: int
    scheme: str
    from_ns: int
    predicted_ns: int | None   # None: the source cannot predict the target (unseen says why)
    measured_ns: int
    others: str = ""
    moves: bool = True      # the change places a table the query reads otherwise (below: winners)
    unseen: str = ""

    @property
    def error(self) -> float | None:
        if self.predicted_ns is None or not self.measured_ns:
            return None
        return (self.predicted_ns - self.measured_ns) / self.measured_ns


def pairs(runs: list[Run], schemes: dict[str, dict]) -> list[tuple[Run, Run, Change]]:
    """Every run with every other of the same query and other levels that it can predict."""
    by: dict[tuple, list[Run]] = {}
    for r in runs:
        by.setdefault((r.others, r.query), []).append(r)
    out = []
    for group in by.values():
        for a, b in itertools.permutations(group, 2):
            c = change(a, b.nodes, b.scheme, schemes) if b.wall_ns else None
            if c is not None:
                out.append((a, b, c))
    return out


def rule_of(src: Run, nodes: int, scheme: str) -> str:
    """What differs between a run and a target: "nodes", "scheme" or "nodes and scheme"."""
    if src.nodes != nodes and src.scheme != scheme:
        return "nodes and scheme"
    return "nodes" if src.nodes != nodes else "scheme"


def predict_all(pairs_: list[tuple[Run, Run, Change]], k: Constants, disk_bps: float | None,
                queries: set[int] | None = None) -> list[CellPrediction]:
    out = []
    for a, b, c in pairs_:
        if queries is not None and a.query not in queries:
            continue
        out.append(CellPrediction(rule_of(a, b.nodes, b.scheme), a.query, a.cell, b.cell, a.nodes, a.scheme,
                                  b.nodes, b.scheme, a.wall_ns,
                                  None if c.unseen else predict(a, b.nodes, c, k, disk_bps), b.wall_ns,
                                  " ".join(map(str, a.others)), c.moves, c.unseen))
    return out


def _loss(preds: list[CellPrediction]) -> float:
    """Median and mean of |log(predicted / measured)|: a factor of 2 too high or too low weigh alike."""
    errs = [abs(math.log(max(p.predicted_ns, 1) / p.measured_ns)) for p in preds
            if p.measured_ns and p.predicted_ns is not None]
    return statistics.median(errs) + statistics.fmean(errs) if errs else math.inf


def fit(pairs_: list[tuple[Run, Run, Change]], disk_bps: float | None) -> Constants:
    """The constants that predict the odd-numbered queries best (a grid: 4,500 combinations)."""
    odd = {a.query for a, _, _ in pairs_ if a.query % 2}
    best, best_loss = Constants(), math.inf
    for values in itertools.product(*GRID.values()):
        k = Constants(**dict(zip(GRID, values)))
        loss = _loss(predict_all(pairs_, k, disk_bps, odd))
        if loss < best_loss:
            best, best_loss = k, loss
    return best


def whole_rows(plans) -> None:
    """Fills in the row counts of the tables the coordinator scans itself where a cell's results predate
    them (SF 1's 1-node cells): a table scanned on the coordinator is whole there, so its rows are the same
    in every cell of the run, measured in the others (Q5 under 1-part on 1 node: customer's 150,000 and
    orders' 1,500,000 rows, from the 2-node cell)."""
    local = [r for rs in plans for r in rs
             if r["side"] == COORDINATOR and r["node_type"] != "Foreign Scan" and r["tables"] and "," not in r["tables"]]
    rows = {}
    for r in local:
        if r.get("table_rows"):
            rows[r["tables"]] = max(rows.get(r["tables"], 0), r["table_rows"])
    for r in local:
        if not r.get("table_rows") and r["tables"] in rows:
            r["table_rows"] = rows[r["tables"]]


def load_runs(con, schemes: dict[str, dict]) -> list[Run]:
    """The runs of an experiment's results (report.open_results: cell_query, cell_level, results_op)."""
    levels: dict[str, dict] = {}
    for cell, factor, level in con.execute("SELECT cell, factor, level FROM cell_level").fetchall():
        levels.setdefault(cell, {})[factor] = level
    cur = con.execute("SELECT * FROM results_op ORDER BY cell, query, op")
    cols = [d[0] for d in cur.description]
    ops: dict[tuple, list[dict]] = {}
    for r in cur.fetchall():
        d = dict(zip(cols, r))
        ops.setdefault((d["cell"], d["query"]), []).append(d)
    whole_rows(ops.values())
    partitioned = {c: set(schemes.get(s, {}).get("partitioned", {}))
                   for c, s in con.execute("SELECT DISTINCT cell, scheme FROM cell_query").fetchall()}
    passes = {c: pass_tables([r for (c_, _), rs in ops.items() if c_ == c for r in rs], partitioned[c])
              for c in partitioned}
    out = []
    for r in con.execute("""
            SELECT cell, query, nodes, scheme, node_cpu, node_memory_mb, host_cpus, wall_ns,
                   wall_ns - coalesce(c_remote_wait, 0), coalesce(c_cpu_user, 0) + coalesce(c_cpu_sys, 0),
                   coalesce(node_work_ns, 0), coalesce(node_sum_ns, 0), coalesce(n_cpu_user, 0) + coalesce(n_cpu_sys, 0),
                   coalesce(n_cpu_sys, 0), coalesce(n_run_queue, 0), coalesce(n_disk_seq, 0) + coalesce(n_disk_random, 0), planning_ns, analyze_ns
            FROM cell_query WHERE wall_ns IS NOT NULL AND analyze_ns IS NOT NULL""").fetchall():
        cell, query = r[0], r[1]
        others = tuple(f"{f}={v}" for f, v in sorted(levels[cell].items()) if f not in ("nodes", "scheme"))
        out.append(Run(cell, query, r[2], r[3], others, r[4], r[5], r[6] or 1, *r[7:18],
                       plan_tree(ops.get((cell, query), [])), passes[cell]))
    return out


def errors(preds: list[CellPrediction]) -> dict | None:
    """Mean and median absolute relative error, how many within 10 % and 25 %."""
    errs = [abs(p.error) for p in preds if p.error is not None]
    if not errs:
        return None
    return {"n": len(errs), "mean": statistics.fmean(errs), "median": statistics.median(errs),
            "within_10": sum(e <= 0.10 for e in errs), "within_25": sum(e <= 0.25 for e in errs)}


def winners(preds: list[CellPrediction], differ: float = 0.10) -> dict[str, int]:
    """Of the pairs whose measured times differ by `differ` or more, how many the prediction sent the same
    way (the faster cell foreseen). Schemes that place only tables the query does not read otherwise run
    the same plan: their difference is noise, as the partitioning advice has it (report.scheme_advice)."""
    pairs_ = [p for p in preds if p.moves and p.predicted_ns is not None
              and abs(p.measured_ns - p.from_ns) >= differ * max(p.measured_ns, p.from_ns)]
    hits = sum((p.predicted_ns < p.from_ns) == (p.measured_ns < p.from_ns) for p in pairs_)
    return {"pairs": len(pairs_), "hits": hits}


def repeat_noise(con) -> dict | None:
    """How much one cell's runs of a query differ (its repetitions and streams), |a - b| / b over their
    ordered pairs as a prediction's error is taken: the noise a cell's median of its runs is compared
    through (results: every run's row)."""
    n, median, mean = con.execute("""
        SELECT count(*), median(abs(a.wall_ns - b.wall_ns) / b.wall_ns), avg(abs(a.wall_ns - b.wall_ns) / b.wall_ns)
        FROM results a JOIN results b ON a.cell = b.cell AND a.query = b.query
             AND (a.repetition, a.stream) <> (b.repetition, b.stream)
        WHERE a.error IS NULL AND b.error IS NULL AND b.wall_ns > 0""").fetchone()
    return {"pairs": n, "median": median, "mean": mean} if n else None


def noise(runs: list[Run]) -> dict | None:
    """The run-to-run noise no model of the cluster can predict: a query that ran on the coordinator alone in
    two cells (no foreign scan: its tables in the same place, the data nodes idle) takes the same time in both
    but for the host's other load and the plan its statistics' sample gave it; |a - b| / b over those pairs,
    as a prediction's error is taken. A cell's time is already the median of its runs (repetitions), so a
    plan with repetitions lowers it."""
    by: dict[tuple, list[Run]] = {}
    for r in runs:
        if r.root is not None and r.wall_ns and not _foreign(r.root):
            by.setdefault((r.others, r.query), []).append(r)
    d = [abs(a.wall_ns - b.wall_ns) / b.wall_ns for g in by.values() for a, b in itertools.permutations(g, 2)]
    if not d:
        return None
    return {"pairs": len(d), "queries": sorted({q for (_, q), g in by.items() if len(g) > 1}),
            "median": statistics.median(d), "mean": statistics.fmean(d)}
