"""TPC-H distributed over data nodes with PostgreSQL's own sharding: on the coordinator a partitioned
table is hash-partitioned on its key, each partition a postgres_fdw foreign table on one data node;
a replicated table is a full local copy on the coordinator and on every data node. With the fact
tables co-partitioned on the order key, partitionwise join and aggregate push their joins and
aggregates down to the nodes ([Taufer]'s 2-part scheme); 1-part partitions only lineitem."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from mwinv.errors import MwinvError
from mwinv.workloads import tpch


@dataclass(frozen=True)
class Scheme:
    name: str
    partitioned: dict[str, str] = field(default_factory=dict)   # table -> hash key column
    parts: int | None = None    # hash partitions per table, placed round robin on the nodes; None: one per node

    def replicated(self) -> list[str]:
        return [t for t in tpch.TABLES if t not in self.partitioned]

    def describe(self) -> dict:
        """What the manifest records: enough to rebuild the scheme."""
        return {"name": self.name, "partitioned": dict(self.partitioned), "replicated": self.replicated(),
                "parts": self.parts}


SCHEMES = {
    "2-part": Scheme("2-part", {"lineitem": "l_orderkey", "orders": "o_orderkey"}),
    "1-part": Scheme("1-part", {"lineitem": "l_orderkey"}),
}


def _columns(table: str) -> list[str]:
    body = table_ddl()[table].split("(", 1)[1]
    return re.findall(r"(?:^|,)\s*([a-z]+_\w+)\s", body)


def read_toml(p: Path) -> dict:
    """A TOML file (a scheme, an experiment plan); unreadable or invalid: a one-line error naming it
    (tomllib's message names the line and column)."""
    import tomllib

    try:
        return tomllib.loads(p.read_text())
    except OSError as exc:
        raise MwinvError(f"{p}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise MwinvError(f"{p}: byte {exc.start}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise MwinvError(f"{p}: {exc}") from None


def scheme_from_file(path: str | Path) -> Scheme:
    """A scheme a DBA writes (TOML):

        name = "3-part"
        parts = 4                         # optional: hash partitions per table (default: one per node)
        [partitioned]                     # table = its hash key column; every other table is replicated
        lineitem = "l_orderkey"
        orders = "o_orderkey"
        customer = "c_custkey"
    """
    p = Path(path)
    data = read_toml(p)
    unknown = set(data) - {"name", "parts", "partitioned"}
    if unknown:
        raise MwinvError(f"{p}: unknown key {sorted(unknown)[0]!r} (name, parts, partitioned)")
    part = data.get("partitioned") or {}
    if not isinstance(part, dict) or not part:
        raise MwinvError(f"{p}: [partitioned] must name at least one table = its key column")
    for table, key in part.items():
        if table not in tpch.TABLES:
            raise MwinvError(f"{p}: [partitioned] {table}: not a TPC-H table ({', '.join(tpch.TABLES)})")
        if key not in _columns(table):
            raise MwinvError(f"{p}: [partitioned] {table} = {key!r}: no such column (one of "
                             f"{', '.join(_columns(table))})")
    parts = data.get("parts")
    if parts is not None and (type(parts) is not int or not 1 <= parts <= 64):   # true is an int to Python
        raise MwinvError(f"{p}: parts = {parts!r}: an integer from 1 to 64")
    name = data.get("name", p.stem)
    if not isinstance(name, str) or not name:
        raise MwinvError(f"{p}: name = {name!r}: a string")
    return Scheme(name, dict(part), parts)


def resolve_scheme(spec: "str | Scheme") -> Scheme:
    """A scheme by name (1-part, 2-part) or from a scheme file."""
    if isinstance(spec, Scheme):
        return spec
    if spec in SCHEMES:
        return SCHEMES[spec]
    if spec.endswith(".toml") or Path(spec).exists():
        return scheme_from_file(spec)
    raise MwinvError(f"unknown scheme {spec!r} (choose from {', '.join(SCHEMES)}, or a scheme file)")

# postgres_fdw options of every data node's server on the coordinator: the remote scans of one query
# run at once on all nodes (async append), rows come in batches of fetch_size, inserts in batches.
# Remote estimates (an EXPLAIN on the node per path) let the planner push the co-partitioned joins
# down to the nodes; with local estimates it joined on the coordinator, and Q21 at SF 0.01 rescanned
# a remote lineitem per row: 65.6 s against 2.3 s with them.
FDW_OPTIONS = {"async_capable": "true", "fetch_size": "1000", "batch_size": "1000", "use_remote_estimate": "true"}
# The coordinator tags its postgres_fdw connections with its backend's pid (%p): a data node's session
# then names the coordinator backend it works for (Citus tags its worker connections the same way).
FDW_APPLICATION_NAME = "mwinv-fdw:%p"
COORDINATOR_GUCS = {"enable_partitionwise_join": "on", "enable_partitionwise_aggregate": "on",
                    "postgres_fdw.application_name": f"'{FDW_APPLICATION_NAME}'"}


def table_ddl() -> dict[str, str]:
    """CREATE TABLE statement per TPC-H table (from the single-node schema)."""
    out = {}
    for stmt in filter(str.strip, tpch.SCHEMA_SQL.split(";")):
        name = re.match(r"\s*CREATE TABLE (\w+)", stmt).group(1)
        out[name] = stmt.strip()
    return out


def _statements_on(sql: str, tables: list[str]) -> list[str]:
    """The statements of `sql` (KEYS_SQL) that touch only `tables`."""
    names = set(tpch.TABLES)
    out = []
    for stmt in filter(str.strip, sql.split(";")):
        touched = {w for w in re.findall(r"\b(\w+)\b", stmt) if w in names}
        if touched and touched <= set(tables):
            out.append(stmt.strip())
    return out


def create_schema(coordinator, data_nodes: dict[str, tuple], scheme: Scheme) -> None:
    """data_nodes: node name -> (connection to its tpch database, host address, port). The coordinator is a
    connection to its tpch database."""
    ddl = table_ddl()
    for conn, _, _ in data_nodes.values():
        for t in tpch.TABLES:
            conn.execute(ddl[t])
    coordinator.execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
    opts = ", ".join(f"{k} '{v}'" for k, v in FDW_OPTIONS.items())
    for node, (_, host, port) in data_nodes.items():
        coordinator.execute(f"CREATE SERVER {node} FOREIGN DATA WRAPPER postgres_fdw "
                            f"OPTIONS (host '{host}', port '{port}', dbname 'tpch', {opts})")
        coordinator.execute(f"CREATE USER MAPPING FOR CURRENT_USER SERVER {node} OPTIONS (user 'postgres')")
    for t in tpch.TABLES:
        if t not in scheme.partitioned:
            coordinator.execute(ddl[t])
            continue
        coordinator.execute(f"{ddl[t]} PARTITION BY HASH ({scheme.partitioned[t]})")
        places = placement(scheme, list(data_nodes), t)
        for i, (node, remote) in enumerate(places):
            if remote != t:   # more parts than nodes: each part a table of its own on its node
                data_nodes[node][0].execute(ddl[t].replace(f"CREATE TABLE {t}", f"CREATE TABLE {remote}", 1))
            coordinator.execute(f"CREATE FOREIGN TABLE {t}_{node}{remote[len(t):]} PARTITION OF {t} "
                                f"FOR VALUES WITH (MODULUS {len(places)}, REMAINDER {i}) SERVER {node} "
                                f"OPTIONS (table_name '{remote}')")


def placement(scheme: Scheme, nodes: list[str], table: str) -> list[tuple[str, str]]:
    """(node, table name there) of each hash partition of a partitioned table, by remainder: one per
    node, or `parts` of them placed round robin, each then a table `<table>_p<i>` of its own."""
    n = scheme.parts or len(nodes)
    return [(nodes[i % len(nodes)], table if n == len(nodes) else f"{table}_p{i}") for i in range(n)]


def _keys_on_node(scheme: Scheme, nodes: list[str], node: str) -> list[str]:
    """The keys and indexes of a data node's tables (a partition table gets its table's). A foreign key
    holds on a node only when both tables' rows are there together: the built-in schemes keep it so
    (co-partitioned or replicated); a scheme file may not, so its nodes get none."""
    out = []
    for stmt in filter(str.strip, tpch.KEYS_SQL.split(";")):
        stmt = stmt.strip()
        if "FOREIGN KEY" in stmt and scheme not in SCHEMES.values():
            continue
        table = re.search(r"(?:ALTER TABLE|ON)\s+(\w+)", stmt).group(1)
        if table not in scheme.partitioned:
            out.append(stmt)
            continue
        for where, remote in placement(scheme, nodes, table):
            if where == node:
                out.append(re.sub(rf"\b{table}\b(?!_)", remote, stmt, count=1) if remote != table else stmt)
    return out


def _copy(conn, table: str, path: Path) -> None:
    with conn.cursor() as cur, cur.copy(f"COPY {table} FROM STDIN (FORMAT csv, DELIMITER '|')") as copy, \
            open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            copy.write(chunk)


def _route(coordinator, data_nodes: dict[str, tuple], scheme: Scheme, table: str, path: Path) -> None:
    """A partitioned table's rows straight into their nodes' tables: the file into a temporary table on
    the coordinator, then each partition's rows (PostgreSQL's own routing test, satisfies_hash_partition
    on the coordinator's partitioned table) copied out of it into the node. Through the coordinator's
    foreign partitions postgres_fdw inserted the rows one statement each: hours for SF 1's lineitem."""
    stage = f"mwinv_stage_{table}"
    coordinator.execute(f"CREATE TEMP TABLE {stage} (LIKE {table})")
    try:
        _copy(coordinator, stage, path)
        places = placement(scheme, list(data_nodes), table)
        for i, (node, remote) in enumerate(places):
            rows = (f"SELECT * FROM {stage} WHERE satisfies_hash_partition('{table}'::regclass, {len(places)}, {i}, "
                    f"{scheme.partitioned[table]})")
            with coordinator.cursor() as out_cur, out_cur.copy(f"COPY ({rows}) TO STDOUT") as out, \
                    data_nodes[node][0].cursor() as in_cur, in_cur.copy(f"COPY {remote} FROM STDIN") as into:
                for chunk in out:
                    into.write(chunk)
    finally:
        coordinator.execute(f"DROP TABLE IF EXISTS {stage}")


def load(coordinator, data_nodes: dict[str, tuple], scheme: Scheme, data_dir: Path, progress=None) -> dict:
    """Replicated tables into every node, partitioned ones each row into its node (_route); then keys,
    indexes and statistics where the rows are. Row counts per table and node, the partitioned tables'
    counted through the coordinator too."""
    say = progress or (lambda _: None)
    counts: dict[str, dict[str, int]] = {}
    everyone = {"coordinator": coordinator, **{n: c for n, (c, _, _) in data_nodes.items()}}
    for t in tpch.TABLES:
        say(f"load {t}")
        if t in scheme.partitioned:
            _route(coordinator, data_nodes, scheme, t, data_dir / f"{t}.tbl")
        else:
            for conn in everyone.values():
                _copy(conn, t, data_dir / f"{t}.tbl")
        counts[t] = {"coordinator": coordinator.execute(f"SELECT count(*) FROM {t}").fetchone()[0]}
        for n, (c, _, _) in data_nodes.items():
            names = [r for where, r in placement(scheme, list(data_nodes), t) if where == n] \
                if t in scheme.partitioned else [t]
            counts[t][n] = sum(c.execute(f"SELECT count(*) FROM {r}").fetchone()[0] for r in names)
    say("keys, indexes and statistics")
    for node, (conn, _, _) in data_nodes.items():
        for stmt in _keys_on_node(scheme, list(data_nodes), node):
            conn.execute(stmt)
        conn.execute(tpch.vacuum_analyze([*tpch.TABLES, *(remote for t in scheme.partitioned for where, remote in
                                                          placement(scheme, list(data_nodes), t)
                                                          if where == node and remote != t)]))
    for stmt in _statements_on(tpch.KEYS_SQL, scheme.replicated()):
        coordinator.execute(stmt)
    if scheme.replicated():
        coordinator.execute(tpch.vacuum_analyze(scheme.replicated()))
    for t in scheme.partitioned:   # the foreign partitions' statistics, sampled from the nodes
        coordinator.execute(f"ANALYZE {t}")
    for t in scheme.partitioned:
        total = counts[t]["coordinator"]
        parts = sum(v for n, v in counts[t].items() if n != "coordinator")
        if parts != total:
            raise MwinvError(f"table {t}: {parts} rows on the data nodes, {total} through the coordinator")
    return counts
