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

    def replicated(self) -> list[str]:
        return [t for t in tpch.TABLES if t not in self.partitioned]


SCHEMES = {
    "2-part": Scheme("2-part", {"lineitem": "l_orderkey", "orders": "o_orderkey"}),
    "1-part": Scheme("1-part", {"lineitem": "l_orderkey"}),
}

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
    n = len(data_nodes)
    for t in tpch.TABLES:
        if t not in scheme.partitioned:
            coordinator.execute(ddl[t])
            continue
        coordinator.execute(f"{ddl[t]} PARTITION BY HASH ({scheme.partitioned[t]})")
        for i, node in enumerate(data_nodes):
            coordinator.execute(f"CREATE FOREIGN TABLE {t}_{node} PARTITION OF {t} "
                                f"FOR VALUES WITH (MODULUS {n}, REMAINDER {i}) SERVER {node} "
                                f"OPTIONS (table_name '{t}')")


def _copy(conn, table: str, path: Path) -> None:
    with conn.cursor() as cur, cur.copy(f"COPY {table} FROM STDIN (FORMAT csv, DELIMITER '|')") as copy, \
            open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            copy.write(chunk)


def load(coordinator, data_nodes: dict[str, tuple], scheme: Scheme, data_dir: Path, progress=None) -> dict:
    """Replicated tables into every node, partitioned ones through the coordinator (its partition routing
    sends each row to its node); then keys, indexes and statistics where the rows are. Row counts per
    table and node."""
    say = progress or (lambda _: None)
    counts: dict[str, dict[str, int]] = {}
    everyone = {"coordinator": coordinator, **{n: c for n, (c, _, _) in data_nodes.items()}}
    for t in tpch.TABLES:
        say(f"load {t}")
        targets = everyone if t not in scheme.partitioned else {"coordinator": coordinator}
        for conn in targets.values():
            _copy(conn, t, data_dir / f"{t}.tbl")
        counts[t] = {n: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for n, c in everyone.items()}
    say("keys, indexes and statistics")
    for conn, _, _ in data_nodes.values():
        for stmt in filter(str.strip, tpch.KEYS_SQL.split(";")):
            conn.execute(stmt)
        conn.execute("VACUUM ANALYZE")
    for stmt in _statements_on(tpch.KEYS_SQL, scheme.replicated()):
        coordinator.execute(stmt)
    coordinator.execute("VACUUM ANALYZE")
    for t in scheme.partitioned:   # the foreign partitions' statistics, sampled from the nodes
        coordinator.execute(f"ANALYZE {t}")
    for t in scheme.partitioned:
        total = counts[t]["coordinator"]
        parts = sum(v for n, v in counts[t].items() if n != "coordinator")
        if parts != total:
            raise MwinvError(f"table {t}: {parts} rows on the data nodes, {total} through the coordinator")
    return counts
