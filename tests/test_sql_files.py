"""The derived tables' SQL files: each states what it reads and writes in its header, and those whose
columns or rules are named in Python too (the components, the classes) agree with it: adding a
component or a class without its SQL fails here, not as a silently missing column in a report."""

import re
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from mwinv.capture.columns import empty_table
from mwinv.capture.tables import ATTRIBUTION_COMPONENTS, SCHEMAS
from mwinv.correlator import modules
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


def test_every_correlator_module_declares_what_it_builds_and_reads():
    # the checks run when the modules load: a table built twice, CREATE OR REPLACE, a statement creating
    # another table than the header's builds:, a table read but not declared, a cycle
    loaded = modules.load_modules()
    assert {m.name for m in loaded if m.sql} == {p.stem for p in SQL_DIRS[0].glob("*.sql")}
    assert {"segment_walk", "node_clock"} <= {m.name for m in loaded if m.is_python}


def _module(tmp_path, name, text):
    path = tmp_path / f"{name}.sql"
    path.write_text(text)
    return modules.from_sql(path)


@pytest.mark.parametrize("sql, error", [
    ("-- b2: x\n-- builds:  b2\n-- inputs:  a\nCREATE TABLE b2 AS SELECT * FROM a JOIN c USING (k);",
     "reads c, not among its inputs"),
    ("-- b2: x\n-- builds:  b2\n-- inputs:  a\nCREATE OR REPLACE TABLE b2 AS SELECT * FROM a;", "CREATE OR REPLACE"),
    ("-- b2: x\n-- builds:  b2\n-- inputs:  a\nCREATE TABLE b3 AS SELECT * FROM a;", "creates ['b3']"),
    ("-- b2: x\n-- builds:  b\n-- inputs:  a\nCREATE TABLE b AS SELECT * FROM a;", "which"),
    ("-- b2: x\n-- builds:  b2\n-- inputs:  b\nCREATE TABLE b2 AS SELECT * FROM b;", "cycle"),
    ("-- b2: x\n-- builds:  c\n-- inputs:  a\nCREATE TABLE c AS SELECT * FROM a;", "the capture's table c"),
])
def test_the_runner_refuses_a_module_that_contradicts_the_others(tmp_path, sql, error):
    b = _module(tmp_path, "b", "-- b: x\n-- builds:  b\n-- inputs:  a, b2 (why)\nCREATE VIEW b AS "
                               "SELECT * FROM a JOIN b2 USING (k);")
    with pytest.raises(modules.ModuleError, match=re.escape(error)):
        modules.check([b, _module(tmp_path, "b2", sql)], known_tables={"a", "c"})


def test_the_runner_builds_in_order_once_and_per_slice(tmp_path):
    # a sliced module runs once per slice (the first creates its table, the others append), after what
    # it reads; a table already built is refused, not rebuilt
    import duckdb

    from mwinv.correlator.load import CaptureDB

    ms = [_module(tmp_path, "ev", "-- ev: x\n-- builds:  ev\n-- inputs:  src\n"
                                  "CREATE TABLE ev AS SELECT * FROM src WHERE t % 2 = 0;"),
          _module(tmp_path, "part", "-- part: x\n-- builds:  part\n-- inputs:  ev; the variables slice_lo, slice_hi\n"
                                    "-- slice:   pid\nCREATE TABLE part AS SELECT count(*) AS n FROM ev\n"
                                    "WHERE t >= getvariable('slice_lo') AND t < getvariable('slice_hi');"),
          _module(tmp_path, "total", "-- total: x\n-- builds:  total\n-- inputs:  part\n"
                                     "CREATE TABLE total AS SELECT sum(n) AS n, count(*) AS slices FROM part;")]
    modules.check(ms, {"src"})
    con = duckdb.connect()
    con.execute("CREATE TABLE src AS SELECT range AS t FROM range(100)")
    run = modules.Modules(CaptureDB(None, con, set()), {"src"}, slices=lambda kind: [(0, 30), (30, 60), (60, 100)])
    monkey = modules._LOADED
    modules._LOADED = ms
    try:
        run.build("total")
        assert con.execute("SELECT n, slices FROM total").fetchone() == (50, 3)
        assert run.built == ["ev", "part", "total"]
        run.build("total")   # held: nothing runs again
        assert run.built == ["ev", "part", "total"]
        with pytest.raises(modules.ModuleError, match="exists already"):
            run._run(ms[0])
    finally:
        modules._LOADED = monkey


def test_the_architecture_doc_shows_the_current_module_graph():
    doc = (Path(__file__).parent.parent / "docs" / "architecture.md").read_text()
    assert modules.graph() in doc, "docs/architecture.md: paste `python -m mwinv.correlator.modules --graph`"


def _model_connection():
    statements = pa.table({"statement_id": [1, 2], "parent_statement_id": pa.array([None, 1], pa.int64()),
                           "query_id": [7, 7], "node": ["n1", "n1"], "pid": [10, 11], "leader_pid": [10, 10],
                           "start_ns": [0, 100], "end_ns": [1000, 900]})
    attribution = pa.table({"statement_id": [1, 1], "component": ["cpu_user", "disk_seq"], "ns": [600, 400],
                            "from_workers_ns": [0, 0], "node": ["n1", "n1"], "query_id": [7, 7]})
    return model_connection(statements, attribution, empty_table(SCHEMAS["statement_io"]))


def test_statement_shares_has_a_column_per_component():
    con = _model_connection()
    cols = [d[0] for d in con.execute("SELECT * FROM statement_shares('model')").description]
    assert cols == ["statement_id", "query_id", "db_ns", "from_workers_ns", *ATTRIBUTION_COMPONENTS]
    assert con.execute("SELECT db_ns, cpu_user, disk_seq, lock_wait FROM statement_shares('model')").fetchall() == \
        [(1000, 600, 400, None)]


def test_duration_text_writes_durations_as_fmt_duration_does():
    from mwinv.fmt import duration

    values = [0, 1, 850, 999, 1000, 1500, 412_345, 999_949, 999_950, 1_000_000, 4_850_000, 1_234_567_891,
              -120_000, -2_500_000, None]
    con = _model_connection()
    got = [con.execute("SELECT duration_text($1::DOUBLE)", [v]).fetchone()[0] for v in values]
    assert got == [duration(v) for v in values]


def test_class_shares_has_the_classes_and_ranks_them_in_order():
    con = _model_connection()
    con.execute("SET VARIABLE internal_threshold = 0.2")
    cols = [d[0] for d in con.execute("SELECT * FROM class_shares('model')").description]
    assert [c for c in cols if c.startswith("s_")] == [f"s_{k}" for k in CLASS_COMPONENTS]
    assert con.execute("SELECT lim, s_cpu, s_disk_seq, explained FROM class_shares('model')").fetchall() == \
        [("cpu", 0.6, 0.4, 1.0)]
    sql = (SQL_DIRS[0] / "class_shares.sql").read_text()
    assert re.findall(r"WHEN s_(\w+) = top THEN '(\w+)'", sql) == [(c, c) for c in LIMIT_CLASSES]
    evidence = (SQL_DIRS[0] / "class_evidence.sql").read_text()
    assert re.findall(r"'name': '(\w+)'", evidence) == list(LIMIT_CLASSES)


def test_model_node_inputs_ends_on_parents_that_loop():
    """Statement ids two nodes share (a capture an older Oracle import numbered per node) can make a loop of
    parents reachable from a root: the recursion to the roots ran without end; it stops at 64 levels. A
    legitimate chain of three levels still reaches its root."""
    statements = pa.table({"statement_id": [1, 2, 1, 5, 6, 7], "parent_statement_id": pa.array([None, 1, 2, None, 5, 6]),
                           "query_id": [7] * 6, "node": ["n1", "n1", "n2", "n1", "n2", "n3"], "pid": [10, 11, 12, 13, 14, 15],
                           "leader_pid": pa.array([None] * 6, pa.int64()), "start_ns": [0] * 6, "end_ns": [1000] * 6})
    attribution = pa.table({"statement_id": [5, 7], "component": ["cpu_user", "cpu_user"], "ns": [600, 400],
                            "from_workers_ns": [0, 0], "node": ["n1", "n3"], "query_id": [7, 7]})
    con = model_connection(statements, attribution, None)
    timer = threading.Timer(30, con.interrupt)   # a loop fails the test instead of hanging it
    timer.start()
    try:
        rows = con.execute("SELECT statement_id, node, cpu_ns FROM model_node_inputs('model') ORDER BY ALL").fetchall()
    finally:
        timer.cancel()
    assert (5, "n1", 600.0) in rows and (5, "n3", 400.0) in rows
