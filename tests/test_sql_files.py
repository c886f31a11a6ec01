"""The derived tables' SQL files: each states what it reads and writes in its header, and those whose
columns or rules are named in Python too (the components, the classes) agree with it: adding a
component or a class without its SQL fails here, not as a silently missing column in a report."""

import re
from pathlib import Path

import pyarrow as pa
import pytest

from mwinv.capture.columns import empty_table
from mwinv.capture.tables import ATTRIBUTION_COMPONENTS, SCHEMAS
from mwinv.correlator.classify import CLASS_COMPONENTS, LIMIT_CLASSES
from mwinv.correlator.model import model_connection

SQL_DIRS = [Path(__file__).parent.parent / "mwinv" / d / "sql" for d in ("correlator", "experiment")]
FILES = sorted(p for d in SQL_DIRS for p in d.glob("*.sql"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_each_file_names_its_table_inputs_and_columns(path):
    text = path.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("--"))
    assert text.startswith(f"-- {path.stem}: "), f"{path}: begins with '-- {path.stem}: what it is'"
    assert re.search(r"^-- inputs: ", header, re.M) and re.search(r"^-- columns: ", header, re.M), path


def _model_connection():
    statements = pa.table({"statement_id": [1, 2], "parent_statement_id": pa.array([None, 1], pa.int64()),
                           "query_id": [7, 7], "node": ["n1", "n1"], "pid": [10, 11], "leader_pid": [10, 10],
                           "start_ns": [0, 100], "end_ns": [1000, 900]})
    attribution = pa.table({"statement_id": [1, 1], "component": ["cpu_user", "disk_seq"], "ns": [600, 400],
                            "from_workers_ns": [0, 0], "node": ["n1", "n1"], "query_id": [7, 7]})
    return model_connection(statements, attribution, empty_table(SCHEMAS["statement_io"]))


def test_statement_shares_has_a_column_per_component():
    con = _model_connection()
    cols = [d[0] for d in con.execute("SELECT * FROM statement_shares").description]
    assert cols == ["statement_id", "query_id", "wall_ns", "from_workers_ns", *ATTRIBUTION_COMPONENTS]
    assert con.execute("SELECT wall_ns, cpu_user, disk_seq, lock_wait FROM statement_shares").fetchall() == \
        [(1000, 600, 400, None)]


def test_class_shares_has_the_classes_and_ranks_them_in_order():
    con = _model_connection()
    con.execute("SET VARIABLE internal_threshold = 0.2")
    cols = [d[0] for d in con.execute("SELECT * FROM class_shares").description]
    assert [c for c in cols if c.startswith("s_")] == [f"s_{k}" for k in CLASS_COMPONENTS]
    assert con.execute("SELECT lim, s_cpu, s_disk_seq, explained FROM class_shares").fetchall() == \
        [("cpu", 0.6, 0.4, 1.0)]
    sql = (SQL_DIRS[0] / "class_shares.sql").read_text()
    assert re.findall(r"WHEN s_(\w+) = top THEN '(\w+)'", sql) == [(c, c) for c in LIMIT_CLASSES]
    evidence = (SQL_DIRS[0] / "statement_class.sql").read_text()
    assert re.findall(r"'name': '(\w+)'", evidence) == list(LIMIT_CLASSES)
