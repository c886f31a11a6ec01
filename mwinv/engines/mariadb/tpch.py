"""TPC-H on MariaDB from the same generated data as PostgreSQL's (mwinv.workloads.tpch): the same schema,
its keys in MariaDB's dialect (named indexes, referenced columns listed), LOAD DATA of the '|'-separated files, and the 22 queries — the common text
where MariaDB takes it, a file of its own (`tpch/qNN.sql`) where it does not."""

from __future__ import annotations

from pathlib import Path

from mwinv.workloads import tpch

HERE = Path(__file__).parent / "tpch"


def _statements(name: str) -> list[str]:
    text = "\n".join(line for line in (HERE / name).read_text().splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in text.split(";") if s.strip()]


def query_sql(number: int) -> str:
    own = HERE / f"q{number:02d}.sql"
    return own.read_text() if own.exists() else tpch.query_sql(number)


def load(conn, data_dir: Path, database: str = "tpch", progress=None) -> dict[str, int]:
    """Create `database` with the schema, load every table, add keys and indexes, analyze. Row counts."""
    counts = {}
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {database}")
        cur.execute(f"CREATE DATABASE {database}")
        cur.execute(f"USE {database}")
        for stmt in filter(str.strip, tpch.SCHEMA_SQL.split(";")):   # standard SQL MariaDB takes as it is
            cur.execute(stmt)
        for t in tpch.TABLES:
            if progress:
                progress(f"load {t}")
            cur.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE {t} FIELDS TERMINATED BY '|' "   # pymysql quotes
                        "OPTIONALLY ENCLOSED BY '\"'", [str(data_dir / (t + ".tbl"))])       # the path
            cur.execute(f"SELECT count(*) FROM {t}")
            counts[t] = cur.fetchone()[0]
        if progress:
            progress("keys and indexes")
        for stmt in _statements("keys.sql"):
            cur.execute(stmt)
        cur.execute("ANALYZE TABLE " + ", ".join(tpch.TABLES))
        cur.fetchall()
    return counts
