"""TPC-H on PostgreSQL: data from DuckDB's bundled tpch extension (dbgen, the 22 queries with their
validation parameters, the official answers), schema with keys and indexes, COPY load, ANALYZE."""

from __future__ import annotations

import functools
import glob
import os
import math
import re
from decimal import Decimal
from pathlib import Path

from mwinv.correlator.load import literal
from mwinv.errors import MwinvError

TABLES = ("region", "nation", "part", "supplier", "partsupp", "customer", "orders", "lineitem")
QUERY_NUMBERS = tuple(range(1, 23))
ANSWER_SCALES = (0.01, 0.1, 1.0)

SCHEMA_SQL = """
CREATE TABLE region   (r_regionkey integer NOT NULL, r_name char(25) NOT NULL, r_comment varchar(152));
CREATE TABLE nation   (n_nationkey integer NOT NULL, n_name char(25) NOT NULL, n_regionkey integer NOT NULL,
                       n_comment varchar(152));
CREATE TABLE part     (p_partkey integer NOT NULL, p_name varchar(55) NOT NULL, p_mfgr char(25) NOT NULL,
                       p_brand char(10) NOT NULL, p_type varchar(25) NOT NULL, p_size integer NOT NULL,
                       p_container char(10) NOT NULL, p_retailprice decimal(15,2) NOT NULL,
                       p_comment varchar(23) NOT NULL);
CREATE TABLE supplier (s_suppkey integer NOT NULL, s_name char(25) NOT NULL, s_address varchar(40) NOT NULL,
                       s_nationkey integer NOT NULL, s_phone char(15) NOT NULL, s_acctbal decimal(15,2) NOT NULL,
                       s_comment varchar(101) NOT NULL);
CREATE TABLE partsupp (ps_partkey integer NOT NULL, ps_suppkey integer NOT NULL, ps_availqty integer NOT NULL,
                       ps_supplycost decimal(15,2) NOT NULL, ps_comment varchar(199) NOT NULL);
CREATE TABLE customer (c_custkey integer NOT NULL, c_name varchar(25) NOT NULL, c_address varchar(40) NOT NULL,
                       c_nationkey integer NOT NULL, c_phone char(15) NOT NULL, c_acctbal decimal(15,2) NOT NULL,
                       c_mktsegment char(10) NOT NULL, c_comment varchar(117) NOT NULL);
CREATE TABLE orders   (o_orderkey integer NOT NULL, o_custkey integer NOT NULL, o_orderstatus char(1) NOT NULL,
                       o_totalprice decimal(15,2) NOT NULL, o_orderdate date NOT NULL,
                       o_orderpriority char(15) NOT NULL, o_clerk char(15) NOT NULL,
                       o_shippriority integer NOT NULL, o_comment varchar(79) NOT NULL);
CREATE TABLE lineitem (l_orderkey integer NOT NULL, l_partkey integer NOT NULL, l_suppkey integer NOT NULL,
                       l_linenumber integer NOT NULL, l_quantity decimal(15,2) NOT NULL,
                       l_extendedprice decimal(15,2) NOT NULL, l_discount decimal(15,2) NOT NULL,
                       l_tax decimal(15,2) NOT NULL, l_returnflag char(1) NOT NULL, l_linestatus char(1) NOT NULL,
                       l_shipdate date NOT NULL, l_commitdate date NOT NULL, l_receiptdate date NOT NULL,
                       l_shipinstruct char(25) NOT NULL, l_shipmode char(10) NOT NULL,
                       l_comment varchar(44) NOT NULL);
"""

# Primary keys, foreign keys, and indexes on the join and filter columns the 22 queries use.
KEYS_SQL = """
ALTER TABLE region   ADD PRIMARY KEY (r_regionkey);
ALTER TABLE nation   ADD PRIMARY KEY (n_nationkey);
ALTER TABLE part     ADD PRIMARY KEY (p_partkey);
ALTER TABLE supplier ADD PRIMARY KEY (s_suppkey);
ALTER TABLE partsupp ADD PRIMARY KEY (ps_partkey, ps_suppkey);
ALTER TABLE customer ADD PRIMARY KEY (c_custkey);
ALTER TABLE orders   ADD PRIMARY KEY (o_orderkey);
ALTER TABLE lineitem ADD PRIMARY KEY (l_orderkey, l_linenumber);
ALTER TABLE nation   ADD FOREIGN KEY (n_regionkey) REFERENCES region;
ALTER TABLE supplier ADD FOREIGN KEY (s_nationkey) REFERENCES nation;
ALTER TABLE customer ADD FOREIGN KEY (c_nationkey) REFERENCES nation;
ALTER TABLE partsupp ADD FOREIGN KEY (ps_partkey) REFERENCES part;
ALTER TABLE partsupp ADD FOREIGN KEY (ps_suppkey) REFERENCES supplier;
ALTER TABLE orders   ADD FOREIGN KEY (o_custkey) REFERENCES customer;
ALTER TABLE lineitem ADD FOREIGN KEY (l_orderkey) REFERENCES orders;
ALTER TABLE lineitem ADD FOREIGN KEY (l_partkey, l_suppkey) REFERENCES partsupp;
CREATE INDEX ON lineitem (l_partkey, l_suppkey);
CREATE INDEX ON lineitem (l_suppkey);
CREATE INDEX ON lineitem (l_shipdate);
CREATE INDEX ON orders (o_custkey);
CREATE INDEX ON orders (o_orderdate);
CREATE INDEX ON partsupp (ps_suppkey);
CREATE INDEX ON customer (c_nationkey);
CREATE INDEX ON supplier (s_nationkey);
"""


def check_scale(scale: float) -> float:
    try:
        scale = float(scale)
    except (TypeError, ValueError):
        raise MwinvError(f"scale factor {scale!r} is not a number") from None
    if not 0 < scale < math.inf:
        raise MwinvError(f"scale factor must be a finite number > 0, got {scale:g}")
    return scale


def check_queries(numbers) -> list[int]:
    out = []
    for n in numbers:
        try:
            q = int(n)
        except (TypeError, ValueError):
            raise MwinvError(f"unknown TPC-H query {n!r} (valid: 1-22)") from None
        if q not in QUERY_NUMBERS:
            raise MwinvError(f"unknown TPC-H query {q} (valid: 1-22)")
        out.append(q)
    return out


def parse_query_list(spec: str) -> list[int]:
    """'1,3,5-7' -> [1, 3, 5, 6, 7]; 'all' -> 1..22."""
    if spec.strip().lower() in ("all", ""):
        return list(QUERY_NUMBERS)
    out: list[str | int] = []
    for part in spec.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)-(\d+)", part)
        if m:
            out.extend(range(int(m.group(1)), int(m.group(2)) + 1))
        else:
            out.append(part)
    return check_queries(out)


@functools.lru_cache(maxsize=1)
def _extension_path() -> str:
    import duckdb_extension_tpch

    found = glob.glob(os.path.join(os.path.dirname(duckdb_extension_tpch.__file__), "extensions", "*",
                                   "tpch.duckdb_extension"))
    if not found:
        raise MwinvError("duckdb-extension-tpch is installed but holds no tpch.duckdb_extension")
    return found[0]


def duckdb_tpch():
    """A DuckDB connection with the bundled tpch extension loaded by path (no network)."""
    import duckdb

    con = duckdb.connect(config={"allow_unsigned_extensions": "true", "autoinstall_known_extensions": "false"})
    con.execute(f"LOAD {literal(_extension_path())}")
    return con


@functools.lru_cache(maxsize=1)
def queries() -> dict[int, str]:
    con = duckdb_tpch()
    return {int(n): q for n, q in con.execute("SELECT query_nr, query FROM tpch_queries()").fetchall()}


def query_sql(number: int) -> str:
    (number,) = check_queries([number])
    return queries()[number]


def query_tables(number: int) -> set[str]:
    """The tables a query reads."""
    words = set(re.findall(r"[a-z_]+", query_sql(number).lower()))
    return {t for t in TABLES if t in words}


def answer(number: int, scale: float) -> tuple[list[str], list[list[str]]]:
    """The official answer as (column names, rows of strings)."""
    (number,) = check_queries([number])
    if scale not in ANSWER_SCALES:
        raise MwinvError(f"no official answers at scale factor {scale:g} (have {ANSWER_SCALES})")
    con = duckdb_tpch()
    (text,) = con.execute("SELECT answer FROM tpch_answers() WHERE query_nr = ? AND scale_factor = ?",
                          [number, scale]).fetchone()
    # Each row ends in a newline; a row can be empty (one NULL column, e.g. Q17 at SF 0.01).
    lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
    return lines[0].split("|"), [line.split("|") for line in lines[1:]]


def default_data_dir() -> Path:
    return Path(os.environ.get("MWINV_DATA_DIR", Path.home() / ".cache" / "mwinv" / "tpch"))


def generate(scale: float, out_dir: Path | None = None, progress=None) -> Path:
    """Write one '|'-separated file per table at `scale`; reuse files already generated."""
    scale = check_scale(scale)
    out = Path(out_dir or default_data_dir()) / f"sf{scale:g}"
    done = out / ".complete"
    if done.exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    con = duckdb_tpch()
    con.execute(f"CALL dbgen(sf={scale})")
    for t in TABLES:
        if progress:
            progress(f"generate {t}")
        con.execute(f"COPY {t} TO {literal(out / (t + '.tbl'))} (FORMAT csv, DELIMITER '|', HEADER false)")
    done.write_text(f"{scale}\n")
    return out


def load(conn, data_dir: Path, progress=None) -> dict[str, int]:
    """Create the schema, COPY every table, add keys and indexes, ANALYZE. Returns row counts."""
    counts = {}
    with conn.cursor() as cur:
        for t in reversed(TABLES):
            cur.execute(f"DROP TABLE IF EXISTS {t} CASCADE")
        cur.execute(SCHEMA_SQL)
        for t in TABLES:
            if progress:
                progress(f"load {t}")
            with cur.copy(f"COPY {t} FROM STDIN (FORMAT csv, DELIMITER '|')") as copy, open(
                data_dir / f"{t}.tbl", "rb"
            ) as f:
                while chunk := f.read(1 << 20):
                    copy.write(chunk)
            cur.execute(f"SELECT count(*) FROM {t}")
            counts[t] = cur.fetchone()[0]
        if progress:
            progress("keys and indexes")
        for stmt in filter(str.strip, KEYS_SQL.split(";")):
            cur.execute(stmt)
        if progress:
            progress("analyze")
        cur.execute(vacuum_analyze(TABLES))
    return counts


def vacuum_analyze(tables) -> str:
    """VACUUM ANALYZE of the loaded tables (code's names) alone: the whole database's took 0.8-0.9 s a
    server at SF 0.01, most of it the system catalogs, which no measured query reads."""
    return "VACUUM ANALYZE " + ", ".join(tables)


def _cell_equal(got, want: str) -> bool:
    if got is None:
        return want in ("", "NULL")
    if isinstance(got, (int, float, Decimal)):
        try:
            w = Decimal(want)
        except ArithmeticError:
            return False
        g = Decimal(str(got))
        # TPC-H 2.1.3.5: answers must match to the precision shown; allow 1 cent or 1e-9 relative.
        return abs(g - w) <= max(Decimal("0.01"), abs(w) * Decimal("1e-9"))
    return str(got).strip() == want.strip()


def compare_result(number: int, scale: float, rows: list[tuple]) -> list[str]:
    """Differences between `rows` and the official answer; empty when they match."""
    _, want = answer(number, scale)
    problems = []
    if len(rows) != len(want):
        problems.append(f"Q{number}: {len(rows)} rows, answer has {len(want)}")
    for i, (g, w) in enumerate(zip(rows, want)):
        if len(g) != len(w):
            problems.append(f"Q{number} row {i + 1}: {len(g)} columns, answer has {len(w)}")
            continue
        for j, (gc, wc) in enumerate(zip(g, w)):
            if not _cell_equal(gc, wc):
                problems.append(f"Q{number} row {i + 1} column {j + 1}: got {gc!r}, answer {wc!r}")
    return problems
