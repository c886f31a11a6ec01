"""The correlator, the derivation step and the report on a small real capture kept in the project
(tests/golden/pg_small_capture, recorded by scripts/record_golden_capture.py): they run anywhere, with
no root, no tracefs and no server. Its statements: TPC-H Q6, pg_sleep(0.2), a SELECT that waited for a
table lock another session held, 50 prepared point selects."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from mwinv.capture.tables import ATTRIBUTION_COMPONENTS, COMPACT, DERIVED_TABLES, Capture
from mwinv.correlator.modules import modules

GOLDEN = Path(__file__).parent / "golden"
CAPTURE = GOLDEN / "pg_small_capture"
# mwinv-correlate CAPTURE --format json when the capture was recorded: a change of any number of it is
# a change of the attribution, the model or the advice, to be looked at (and this file rewritten with
# the same command if it is right)
EXPECTED = GOLDEN / "pg_small_capture.top.json"
# Every derived table the same command writes into the capture, its rows sorted: a change of any row is
# a change of the attribution, the model or the advice (MWINV_GOLDEN_WRITE=1 rewrites it, once looked at)
EXPECTED_TABLES = GOLDEN / "pg_small_capture.derived.json"


@pytest.fixture(scope="module")
def correlated(tmp_path_factory):
    out = tmp_path_factory.mktemp("golden")
    cap = out / "cap"
    shutil.copytree(CAPTURE, cap)
    cli = Path(sys.executable).parent / "mwinv-correlate"
    r = subprocess.run([sys.executable, str(cli), str(cap), "--format", "json", "--report", str(out / "report"),
                        "--profile"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (out / "stderr").write_text(r.stderr)
    return cap, json.loads(r.stdout), out / "report"


def derived_tables(cap: Path) -> dict[str, dict]:
    """Each derived table written into cap, as its readers see it (a table's rows stored compactly in another
    expanded: COMPACT): its columns and its rows, sorted, as JSON gives them back."""
    out = {}
    for table in sorted(set(DERIVED_TABLES) - set(COMPACT.values())):
        if Capture(cap).has(table):
            t = Capture(cap).read(table)
            rows = sorted((list(r.values()) for r in t.to_pylist()), key=lambda r: [(v is None, v) for v in r])
            out[table] = {"columns": t.column_names, "rows": rows}
    return json.loads(json.dumps(out))


def test_every_derived_table_is_the_recorded_one(correlated):
    cap, _, _ = correlated
    got = derived_tables(cap)
    if os.environ.get("MWINV_GOLDEN_WRITE"):
        EXPECTED_TABLES.write_text("{\n" + ",\n".join(
            f'"{t}": {{"columns": {json.dumps(v["columns"])}, "rows": [\n'
            + ",\n".join(json.dumps(r) for r in v["rows"]) + "]}" for t, v in got.items()) + "\n}\n")
    expected = json.loads(EXPECTED_TABLES.read_text())
    assert sorted(got) == sorted(expected)
    for table, want in expected.items():
        assert got[table]["columns"] == want["columns"], table
        missing = [r for r in want["rows"] if r not in got[table]["rows"]]
        extra = [r for r in got[table]["rows"] if r not in want["rows"]]
        assert (missing, extra) == ([], []), f"{table}: rows recorded but not derived, derived but not recorded"


def _by_text(rows: list[dict], start: str) -> dict:
    (row,) = [r for r in rows if r["text"].lstrip().startswith(start)]
    return row


def test_the_terminal_output_is_the_recorded_one(correlated):
    _, rows, _ = correlated
    assert rows == json.loads(EXPECTED.read_text())


def test_every_statement_sums_to_its_window_and_the_lock_wait_to_its_probes(correlated):
    cap, rows, _ = correlated
    con = duckdb.connect()
    off = con.sql(f"""
        WITH a AS (SELECT statement_id, sum(ns) AS ns FROM read_parquet('{cap}/statement_attribution/*.parquet')
                   GROUP BY 1)
        SELECT count(*), count(*) FILTER (WHERE a.ns <> s.end_ns - s.start_ns)
        FROM read_parquet('{cap}/statement/*.parquet') s JOIN a USING (statement_id)""").fetchone()
    assert off == (56, 0)
    # the trace's own account of the lock wait: PostgreSQL's lock__wait__start/done probes in the backend
    probes = dict(con.sql(f"""SELECT split_part(event, '_', 4), ts_ns FROM read_parquet('{cap}/kernel_event/*.parquet')
                              WHERE event LIKE 'pg_lock_wait_%'""").fetchall())
    locked = _by_text(rows, "SELECT count(*) FROM nation")
    assert locked["calls"] == 1
    assert abs(locked["components"]["lock_wait"] - (probes["done"] - probes["start"])) < 1_000_000
    assert locked["components"]["lock_wait"] > 0.95 * locked["total_ns"]
    sleep = _by_text(rows, "SELECT pg_sleep(0.2)")
    assert sleep["components"]["other_wait"] > 0.95 * sleep["total_ns"] and sleep["total_ns"] >= 0.2e9
    assert _by_text(rows, "SELECT o_totalprice")["calls"] == 50   # the extended protocol: one record per run
    assert set(locked["components"]) == set(ATTRIBUTION_COMPONENTS)


def test_advice_names_the_blocker_and_the_report_reads_what_was_derived(correlated):
    cap, rows, report = correlated
    locked = _by_text(rows, "SELECT count(*) FROM nation")
    (lock,) = [a for a in locked["advice"] if a["rule"] == "lock.wait"]
    # the holder: the session whose COMMIT woke the waiter (the kernel's sched_waking), its LOCK TABLE before
    assert "released it" in lock["advice"] and "COMMIT" in lock["advice"] and "LOCK TABLE nation" in lock["advice"]
    c = Capture(cap)
    for table in ("statement_class", "statement_estimate", "prediction", "statement_advice", "advised_statement"):
        assert c.has(table), table
    classes = {r["statement_id"]: r["limit"] for r in c.read("statement_class").to_pylist()}
    assert classes[locked["example_id"]] == "lock"
    md = (report / "report.md").read_text()
    assert "SELECT count(*) FROM nation" in md and "lock.wait" in md


def test_the_query_list_of_a_correlated_capture_hashes_no_statements(correlated):
    """The queries' executions are kept to the nodes the attribution has rows of by a list looked up, not a
    semi join: DuckDB built that join's hash table on the statements, and opening a correlated 120 s capture
    (11 M statements) ran out of its 768 MiB."""
    from mwinv.correlator.load import open_correlated
    from mwinv.correlator.modules import SQL_DIR

    db = open_correlated(correlated[0])
    sql = (SQL_DIR / "query_summary.sql").read_text().replace("CREATE TABLE query_summary AS", "")
    plan = "".join(r[1] for r in db.sql("EXPLAIN " + sql).fetchall())
    assert "SEMI" not in plan and "HASH_GROUP_BY" in plan


def test_a_table_asked_for_is_built_with_what_it_needs_once(tmp_path):
    """The kernel hot spots need the attribution's segments, not the attribution: asked for in a session
    that has neither, the runner builds exactly their inputs, each once; the derived tables then build
    on the attribution."""
    from mwinv.correlator import derive
    from mwinv.correlator.load import open_capture

    shutil.copytree(CAPTURE, tmp_path / "cap")
    db = open_capture(tmp_path / "cap")
    db.build("statement_kernel_function")
    assert "seg_off_stack" in db.modules.built and not db.modules.holds("statement_attribution")
    db.build("statement_attribution", "statement_kernel_function")
    assert len(db.modules.built) == len(set(db.modules.built))
    assert db.sql("SELECT count(DISTINCT statement_id) FROM statement_attribution").fetchone()[0] == 56
    derive.derive(db, derive.MODEL_TABLES, write=False)
    assert db.sql("SELECT count(*) FROM statement_class").fetchone()[0] == 56
    assert db.sql("SELECT count(*) FROM model_statement").fetchone()[0] == 56
    assert not Capture(tmp_path / "cap").has("statement_class")   # write=False: the session only


def test_a_later_advice_request_appends_only_the_statements_not_advised_yet(tmp_path):
    """Derived rows are never rewritten: asked for one more statement, the advice adds its rows as a new
    part and leaves the earlier ones as they were, in the session and in the capture."""
    from mwinv.correlator import derive
    from mwinv.correlator.load import open_correlated
    from mwinv.correlator.pipeline import correlate

    shutil.copytree(CAPTURE, tmp_path / "cap")
    db = correlate(tmp_path / "cap")
    derive.derive(db, derive.ADVICE_TABLES)
    first = sorted(db.sql("SELECT * FROM statement_advice").fetchall(), key=repr)
    advised = {r[0] for r in db.sql("SELECT statement_id FROM advised_statement").fetchall()}
    (other,) = db.sql("""SELECT min(statement_id) FROM statement_clean WHERE coalesce(nesting_level, 0) = 0
                         AND statement_id NOT IN (SELECT statement_id FROM advised_statement)""").fetchone()
    derive.derive(db, derive.ADVICE_TABLES, advise=[other, *advised])
    assert {r[0] for r in db.sql("SELECT statement_id FROM advised_statement").fetchall()} == advised | {other}
    now = sorted(db.sql("SELECT * FROM statement_advice").fetchall(), key=repr)
    assert [r for r in now if r[0] != other] == first and any(r[0] == other for r in now)
    assert len(Capture(tmp_path / "cap").parts("statement_advice")) == 2
    again = open_correlated(tmp_path / "cap")
    assert sorted(again.sql("SELECT * FROM statement_advice").fetchall(), key=repr) == now


def test_profile_accounts_for_the_wall_time(correlated):
    """--profile: the steps' seconds, the small ones' and the rest sum to the wall time its title states;
    a step is named by its module (a sliced one's summed over its slices) or the table it wrote."""
    _, _, report = correlated
    err = (report.parent / "stderr").read_text()
    wall = float(re.search(r"where the correlation's ([0-9.]+) s went: [0-9,]+ statements/s", err)[1])
    steps = dict((m[0].strip(), float(m[1])) for m in re.findall(r"│ ([^│]+?)\s+│\s+([0-9.]+) │", err))
    names = {m.name for m in modules()} | {f"writing {t}" for t in DERIVED_TABLES}
    assert sum(k in names for k in steps) >= 3 and any(k.startswith("the rest") for k in steps), steps
    assert all(k in names or k.startswith("the rest") or k.endswith("under 0.5 %") for k in steps), steps
    assert abs(sum(steps.values()) - wall) <= 0.005 * len(steps) + 0.01, (wall, steps)
