"""Long captures (issue 33): DuckDB's memory limit as an option, with a one-line error naming it when
it is too low, on the project's small real capture (tests/golden/pg_small_capture); the raw trace
compressed or dropped once parsed, on real short captures."""

import dataclasses
import gc
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import pyarrow.compute as pc

from mwinv.capture.tables import COMPACT, SCHEMAS, Capture, one_valued
from mwinv.correlator import attribution, incremental, kernel_points, modules
from mwinv.correlator.load import connect, ident, literal, open_capture, open_correlated, read_parquet
from mwinv.correlator.pipeline import PER_NODE_TABLES, correlate, merge
from mwinv.kernel_trace.parse import count_events
from tests.test_golden_capture import CAPTURE, derived_tables

CLI = Path(sys.executable).parent / "mwinv-correlate"


def _correlate(cap: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CLI), str(cap), "--format", "json", *args],
                          capture_output=True, text=True, timeout=300)


def test_memory_limit_too_low_is_one_line_naming_the_option_and_keeps_the_tables(tmp_path):
    cap = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap)
    assert _correlate(cap).returncode == 0
    before = derived_tables(cap)
    r = _correlate(cap, "--memory", "1MB")
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("mwinv-correlate: error: Out of Memory Error") and "--memory" in lines[-1], r.stderr
    assert "Traceback" not in r.stderr
    assert derived_tables(cap) == before   # the earlier correlation's tables stay
    assert not list(cap.glob(".duckdb-spill-*"))   # its spill directory, inside the capture, is gone


def test_a_collected_connection_with_a_cursor_still_running_spills_nowhere_others_can_read(tmp_path):
    """The connection's private directory goes when it is collected; a cursor of it that then spills
    made that directory again with modes 0755 and left it there (spilled statements readable by other
    users). Now it fails with one line and leaves nothing."""
    con = connect(spill_in=tmp_path, memory_limit="64MB", threads=1)
    cur = con.cursor()
    del con
    gc.collect()
    with pytest.raises(duckdb.IOException, match="No such file or directory"):
        cur.execute("SELECT * FROM range(20000000) t(i) ORDER BY hash(i)").fetchall()
    assert not list(tmp_path.iterdir())


def test_the_spill_directory_of_a_killed_session_is_removed_by_the_next(tmp_path):
    """A session killed (kill -9, the OOM killer) left its spill directory in the capture for good, gigabytes
    of it after a long capture. The next session removes it; a live session's, one without a lock (an
    older mwinv's) and a symlink to a directory elsewhere are left."""
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; from mwinv.correlator.load import connect; "
                              "con = connect(spill_in=sys.argv[1]); print('up', flush=True); time.sleep(60)",
                              str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "up\n"
        (dead,) = tmp_path.glob(".duckdb-spill-*")
        (dead / "spill").mkdir(exist_ok=True)
        (dead / "spill" / "pages.tmp").write_bytes(b"x" * 4096)
        connect(spill_in=tmp_path).close()
        assert dead.exists()   # its session still lives
    finally:
        child.kill()
        child.wait()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "lock").touch()
    (tmp_path / ".duckdb-spill-link").symlink_to(elsewhere)
    (tmp_path / ".duckdb-spill-old").mkdir()
    con = connect(spill_in=tmp_path)
    assert not dead.exists()
    assert (tmp_path / ".duckdb-spill-old").is_dir() and (elsewhere / "lock").exists()
    con.close()


def test_a_moderate_memory_limit_gives_the_same_tables_as_the_default(tmp_path):
    small, default = tmp_path / "small", tmp_path / "default"
    shutil.copytree(CAPTURE, small)
    shutil.copytree(CAPTURE, default)
    a, b = _correlate(small, "--memory", "64MB"), _correlate(default)
    assert a.returncode == 0 and b.returncode == 0, a.stderr[-2000:] + b.stderr[-2000:]
    assert a.stdout == b.stdout
    assert derived_tables(small) == derived_tables(default)


def test_a_bad_memory_size_is_refused_before_anything_starts(tmp_path):
    cap = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap)
    r = _correlate(cap, "--memory", "lots")
    assert r.returncode == 2 and r.stderr.strip() == "mwinv-correlate: error: --memory 'lots': a size such as " \
                                                      "512MB or 2GB"
    assert not (cap / "statement_attribution").exists()


def _capture(out: Path, server, keep: str) -> Path:
    """A real short capture of an idle server, the trace's fate `keep`; its node's kernel directory."""
    r = subprocess.run([str(CLI.parent / "mwinv-trace"), "capture", str(out), "--conninfo", server.conninfo(),
                        "--node", "n1", "--duration", "2", "--keep-trace", keep],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert Capture(out).manifest()["nodes"]["n1"]["trace_kept"] == keep
    return out / "kernel" / "n1"


def _reparse(trace: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI.parent / "mwinv-trace"), "parse", str(trace), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)


def test_a_parsed_trace_is_compressed_or_dropped_and_a_reparse_says_so(tmp_path, pg):
    kdir = _capture(tmp_path / "zstd", pg, "zstd")
    assert not (kdir / "trace.dat").exists()
    # the compressed files are the whole traces (the pid-filtered one and the block completions'): zstd
    # gives back what has the events the tables have
    packed = sorted(kdir.glob("*.dat.zst"))
    assert [p.name for p in packed] == ["trace.dat.zst", "unfiltered.dat.zst"] and not list(kdir.glob("*.dat"))
    for p in packed:
        subprocess.run(["zstd", "-q", "-d", str(p), "-o", str(tmp_path / p.stem)], check=True)
    assert sum(count_events(tmp_path / p.stem) for p in packed) == \
        Capture(tmp_path / "zstd").read("kernel_event").num_rows > 0
    r = _reparse(kdir / "trace.dat", tmp_path / "again")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == (
        f"mwinv-trace: error: {kdir}/trace.dat: compressed after its parse (--keep-trace zstd): "
        f"zstd -d {kdir}/trace.dat.zst restores it"), r.stderr

    kdir = _capture(tmp_path / "drop", pg, "drop")
    assert not list(kdir.glob("trace.dat*")) and Capture(tmp_path / "drop").read("kernel_event").num_rows > 0
    r = _reparse(kdir / "trace.dat", tmp_path / "again")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == (
        f"mwinv-trace: error: {kdir}/trace.dat: dropped after its parse (--keep-trace drop): its events are "
        "in the capture's kernel_event table"), r.stderr

    kdir = _capture(tmp_path / "keep", pg, "keep")
    assert sum(count_events(kdir / n) for n in ("trace.dat", "unfiltered.dat")) == \
        Capture(tmp_path / "keep").read("kernel_event").num_rows


def test_statement_clean_fits_a_small_memory_limit_and_keeps_the_first_of_a_duplicated_id(tmp_path):
    """A million statements (the golden capture's, repeated under new ids) in DuckDB's 100 MB: the
    first-row window over every row could not spill and ran out, and so did a CTE of every statement
    read twice (slice_statement's too); the session's tables are compressed in its own file (26 MB here), not held uncompressed
    and paged out (196 MB in memory and spill); a duplicated id keeps its earliest row."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    cap = Capture(cap_dir)
    one = cap.read("statement")
    rows = pa.concat_tables([one] * -(-1_000_000 // one.num_rows))
    rows = rows.set_column(rows.schema.get_field_index("statement_id"), "statement_id",
                           pa.array(range(rows.num_rows), pa.int64()))
    # ids 0-4 recorded again, starting later: the first (earliest) rows are the ones kept
    again = rows.slice(0, 5)
    again = again.set_column(again.schema.get_field_index("start_ns"), "start_ns",
                             pc.add(again.column("start_ns"), 1))
    for p in cap.parts("statement"):
        p.unlink()
    cap.write_part("statement", pa.concat_tables([rows, again]), node="all")
    db = open_capture(cap_dir, memory_limit="100MB")
    db.build("traced_statement", "dbms_attribution")
    slicing = next(m for m in modules.modules() if m.name == "slice_statement").sql
    assert "CTE" not in "".join(r[1] for r in db.sql("EXPLAIN " + slicing).fetchall())
    db.build("slice_statement")
    # the tables in the session's file, compressed: held in memory or paged out as such, 279 MB before
    # (6.5 MB now: rows appended not yet written to the file)
    assert db.sql("SELECT sum(memory_usage_bytes + temporary_storage_bytes) FROM duckdb_memory() "
                  "WHERE tag = 'IN_MEMORY_TABLE'").fetchone()[0] < 32 << 20
    assert 0 < db.sql("SELECT total_blocks * block_size FROM pragma_database_size()").fetchone()[0] < 60 << 20
    valid = pc.sum(pc.greater_equal(rows.column("end_ns"), rows.column("start_ns"))).as_py()
    assert db.sql("SELECT count(*), count(DISTINCT (node, statement_id)) FROM statement_clean").fetchone() \
        == (valid, valid)
    kept = db.sql("SELECT statement_id, start_ns FROM statement_clean WHERE statement_id < 5 ORDER BY 1").fetchall()
    assert kept == [(r["statement_id"], r["start_ns"]) for r in rows.slice(0, 5).to_pylist()
                    if r["start_ns"] is not None and r["end_ns"] >= r["start_ns"]]


def test_a_statement_column_of_one_value_is_not_copied_and_reads_as_before(tmp_path):
    """statement_clean copied every column of every statement (20 s of a 600 s capture's opening), most
    of the cost in columns of one value (its node, DBMS, database and user, the rusage its recorder left
    NULL): such a column is a constant of its view, not copied (slice_statement's too); its rows and
    columns read as before. A statement with another thread (statement_thread) keeps its pid, one of one
    value or not."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    cap = Capture(cap_dir)
    rows = cap.read("statement")
    rows = rows.set_column(rows.schema.get_field_index("pid"), "pid", pa.array([7] * rows.num_rows, pa.int32()))
    for p in cap.parts("statement"):
        p.unlink()
    cap.write_part("statement", rows, node="all")
    db = open_capture(cap_dir)
    stored = {n for n, *_ in db.sql("DESCRIBE statement_varying").fetchall()}
    assert {"node", "dbms", "pid"} <= {n for n, *_ in db.sql("DESCRIBE statement_clean").fetchall()}
    assert {"node", "dbms"} <= set(db.one_valued) and not stored & set(db.one_valued) and "pid" in stored
    assert db.sql("DESCRIBE statement_clean").fetchall() == db.sql("DESCRIBE statement_typed").fetchall()
    valid = "SELECT * FROM statement_typed WHERE start_ns IS NOT NULL AND end_ns >= start_ns"
    assert sorted(db.sql("SELECT * FROM statement_clean").fetchall(), key=repr) \
        == sorted(db.sql(valid).fetchall(), key=repr)
    # slice_statement likewise (60 M statements sorted with their node's text: 15 s)
    db.build("slice_statement")
    assert not {n for n, *_ in db.sql("DESCRIBE slice_varying").fetchall()} & set(db.one_valued)
    assert db.sql("SELECT count(*), count(DISTINCT statement_id), min(node), max(node) FROM slice_statement"
                  ).fetchone() == (len(db.sql(valid).fetchall()),) * 2 + (db.one_valued["node"],) * 2
    db.con.execute("DROP VIEW statement_clean; DROP TABLE statement_varying; DROP TABLE statement_thread; "
                   f"CREATE TABLE statement_thread AS SELECT node, statement_id, 8 AS pid FROM ({valid}) LIMIT 1")
    db.modules.available -= {"statement_clean", "statement_varying"}
    db.build("statement_clean")
    assert db.sql("SELECT count(*) FILTER (pid = 8), count(*) FILTER (pid = 7) FROM statement_clean").fetchone() \
        == (1, len(db.sql(valid).fetchall()) - 1)


def test_the_columns_of_one_value_come_from_the_footers_as_from_the_rows(tmp_path):
    """The columns of one value were found by a scan of every column's minimum and maximum (3.3 s at
    600 s); the row groups' statistics give them, and a part without statistics makes the scan run:
    both give what the rows hold. A part without a column (an older recorder's) holds NULL in it, and a
    NULL beside a value is two values."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    cap = Capture(cap_dir)
    rows = cap.read("statement")
    half = rows.num_rows // 2
    first = rows.slice(0, half).drop_columns(["client_wait_ns"])   # an older recorder's part: no client_wait_ns
    later = rows.slice(half)
    for name, value in (("database", pa.array(["other"] * later.num_rows)),
                        ("client_wait_ns", pa.array([0] * later.num_rows, pa.int64()))):
        later = later.set_column(later.schema.get_field_index(name), name, value)
    for p in cap.parts("statement"):
        p.unlink()
    pq.write_table(first, cap.table_dir("statement") / "all-00000.parquet", write_page_checksum=True)
    cap.write_part("statement", later, node="all")
    names = [n for n in SCHEMAS["statement"].names if n != "pid"]
    table = pa.concat_tables([first.append_column("client_wait_ns", pa.nulls(half, pa.int64()))
                              .select(later.column_names), later])
    truth = {n: table[n][0].as_py() for n in names if len(set(table[n].to_pylist())) == 1}
    assert "client_wait_ns" not in truth and "database" not in truth and truth["node"]
    assert one_valued(cap.parts("statement"), names) == truth
    assert open_capture(cap_dir).one_valued == {n: v for n, v in truth.items() if isinstance(v, (int, str, type(None)))}
    # no statistics in a part: the rows are scanned, the same columns
    p = cap.parts("statement")[0]
    pq.write_table(pq.read_table(p), p, write_statistics=False, write_page_checksum=True)
    assert one_valued(cap.parts("statement"), names) is None
    assert open_capture(cap_dir).one_valued == {n: v for n, v in truth.items() if isinstance(v, (int, str, type(None)))}


def test_a_statement_column_beyond_the_contract_goes_into_sql_only_quoted(tmp_path):
    """A part may hold a column the contract does not name, named as its writer chose: the names of the
    statements' columns went into the SQL of statement_clean's view and of the one-value search as
    written, so a quote in one ended the identifier (here, a column that would read another file)."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    cap = Capture(cap_dir)
    rows = cap.read("statement")
    name = 'x" , (SELECT count(*) FROM read_text(\'/etc/hostname\')) AS "y'
    rows = rows.append_column(name, pa.array(["z"] * rows.num_rows))
    for p in cap.parts("statement"):
        p.unlink()
    pq.write_table(rows, cap.table_dir("statement") / "all-00000.parquet")
    db = open_capture(cap_dir)
    assert db.sql("DESCRIBE statement_clean").fetchall() == db.sql("DESCRIBE statement_typed").fetchall()
    assert "y" not in {n for n, *_ in db.sql("DESCRIBE statement_clean").fetchall()}
    assert db.sql(f"SELECT DISTINCT {ident(name)} FROM statement_clean").fetchall() == [("z",)]


def test_statement_dup_groups_a_million_statements_in_a_small_memory_limit(tmp_path):
    """statement_dup over a million statements in DuckDB's 18 MB: one grouping of every statement by
    node and id (the node's text in the key) ran out of it; an id recorded twice on a node is counted,
    one recorded once on each of two nodes is not."""
    con = connect(tmp_path, stored=True, memory_limit="18MB")
    con.execute("COPY (SELECT 'all' AS node, range AS statement_id FROM range(1000000) UNION ALL "
                "FROM (VALUES ('all', 5), ('all', 5), ('other', 7), ('other', 9), ('other', 9))) "
                f"TO {literal(str(tmp_path / 'statement.parquet'))}")
    con.execute(f"CREATE VIEW statement_typed AS SELECT * FROM read_parquet({literal(str(tmp_path / 'statement.parquet'))})")
    con.execute(next(m for m in modules.modules() if m.name == "statement_dup").sql)
    assert con.sql("SELECT * FROM statement_dup ORDER BY ALL").fetchall() == [("all", 5, 3), ("other", 9, 2)]


@pytest.mark.parametrize("ids, unique", [("as recorded", True), ("one twice", False), ("far apart", False)])
def test_statement_ids_recorded_once_are_known_by_a_bitmap(tmp_path, ids, unique):
    """The golden capture's statement ids, each recorded once, are found unique by the bitmap of their
    range (load._ids_unique), and statement_dup holds none; an id recorded twice is not (its rows are
    counted), nor are ids too far apart for a bitmap (grouped: the same rows as over ids recorded once)."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    cap = Capture(cap_dir)
    rows = cap.read("statement")
    sid = rows["statement_id"].to_pylist()
    if ids == "one twice":
        sid[1] = sid[0]
    elif ids == "far apart":
        sid[-1] += 1 << 40
    rows = rows.set_column(rows.schema.get_field_index("statement_id"), "statement_id", pa.array(sid, pa.int64()))
    for p in cap.parts("statement"):
        cap.remove_part(p)
    cap.write_part("statement", rows, node="all")
    db = open_capture(cap_dir)
    assert db.modules.variables["statement_ids_unique"] is unique
    dups = db.sql("SELECT statement_id, n FROM statement_dup").fetchall()
    assert dups == ([] if ids != "one twice" else [(sid[0], 2)])


# the golden capture's SELECT pg_sleep(0.2) and the later SELECT that waited for the table lock, on
# another backend: made its parallel worker, it starts in a later slice than its leader
LEADER, WORKER = 1838743949164766209, 1838743949164768256


def _with_worker(cap_dir: Path) -> list[dict]:
    """The golden capture's statements, WORKER made LEADER's parallel worker (written back); its rows."""
    cap = Capture(cap_dir)
    stmts = cap.read("statement").to_pylist()
    leader = next(s for s in stmts if s["statement_id"] == LEADER)
    for s in stmts:
        if s["statement_id"] == WORKER:
            s.update(leader_pid=leader["pid"], parent_statement_id=LEADER)
    for p in cap.parts("statement"):
        p.unlink()
    cap.write_part("statement", stmts, node="all")
    return stmts


def _per_statement_tables(db) -> dict[str, list]:
    """What a correlation writes per statement, as it is read (rusage_attribution's rows in
    statement_attribution's), and the list of queries, each table's rows sorted."""
    return {t: sorted(db.sql(f"SELECT * FROM {t}").fetchall(), key=repr) for t in (*PER_NODE_TABLES, "query_summary")
            if t not in COMPACT.values()}


def test_a_capture_correlated_slice_by_slice_gives_the_tables_of_one_correlated_whole(tmp_path, monkeypatch):
    """The golden capture (with a parallel worker) correlated in slices of 5 statements (and of 200
    points) gives every per-statement table and query row of one whole pass, row for row: a statement
    crossing a cut, or starting on one, is attributed once, a worker in its leader's slice."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    stmts = _with_worker(cap_dir)

    whole = correlate(cap_dir, write=False)
    monkeypatch.setattr(attribution, "CHUNK_STATEMENTS", 5)
    monkeypatch.setattr(attribution, "CHUNK_POINTS", 200)
    sliced = correlate(cap_dir, write=False)
    bounds = attribution.statement_bounds(sliced, attribution.CHUNK_STATEMENTS)
    point_bounds = attribution.slice_bounds(sliced, attribution.CHUNK_POINTS)
    assert len(bounds) >= 10 and len(point_bounds) >= 10
    cuts = [hi for _, hi in bounds[:-1]]
    assert set(cuts) <= {s["start_ns"] for s in stmts}   # statements start on the cuts
    assert sum(s["start_ns"] < c < s["end_ns"] for s in stmts for _, c in point_bounds[:-1]) >= 2   # run across
    slice_of = {s: sum(c <= sliced.sql(f"SELECT start_ns FROM statement_clean WHERE statement_id = {s}").fetchone()[0]
                       for c in cuts) for s in (LEADER, WORKER)}
    assert slice_of[LEADER] < slice_of[WORKER]
    worker_ns = "SELECT sum(from_workers_ns) FROM statement_attribution WHERE statement_id = " + str(LEADER)
    wall = sliced.sql(f"SELECT end_ns - start_ns FROM statement_clean WHERE statement_id = {WORKER}").fetchone()[0]
    assert sliced.sql(worker_ns).fetchone()[0] == whole.sql(worker_ns).fetchone()[0] == wall > 0
    got, want = _per_statement_tables(sliced), _per_statement_tables(whole)
    assert [t for t, rows in want.items() if not rows] == ["statement_kernel_function"]   # no stacks recorded
    assert got == want


def test_a_capture_correlated_in_parts_gives_the_tables_of_one_correlated_whole(tmp_path, monkeypatch):
    """The golden capture correlated in three parts (cuts at a third and two thirds of its trace, the
    walk's carry and the unfinished statements' sums kept between the runs, one part run again after
    it failed) writes every derived table and query row of one correlation of the whole, row for row,
    and its parts are appended, not rewritten; a part that brings a statement started before the
    earlier cut is refused in one line."""
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    for d in (whole, parts):
        shutil.copytree(CAPTURE, d)
        stmts = _with_worker(d)
    monkeypatch.setattr(attribution, "CHUNK_STATEMENTS", 5)
    monkeypatch.setattr(attribution, "CHUNK_POINTS", 300)
    want = correlate(whole)
    lo, hi = want.sql("SELECT min(ts_ns), max(ts_ns) FROM kernel_event").fetchone()
    cuts = [lo + (hi - lo) // 3, lo + 2 * (hi - lo) // 3]
    # statements run across both cuts, and some were written by the first part
    assert all(any(s["start_ns"] < c < s["end_ns"] for s in stmts) for c in cuts)
    correlate(parts, until_ns=cuts[0])
    first = {p.name: p.read_bytes() for p in (parts / "statement_attribution").glob("*.parquet")}
    assert 0 < len(derived_tables(parts)["statement_attribution"]["rows"]) < len(stmts) * 12
    queries = "SELECT * FROM query_summary"
    # a session that writes nothing correlates the capture whole
    assert sorted(correlate(parts, write=False).sql(queries).fetchall(), key=repr) == \
        sorted(want.sql(queries).fetchall(), key=repr)
    correlate(parts, until_ns=cuts[1])
    # the last part failed after writing its tables, before its state was updated, and run again: its
    # files replaced
    with monkeypatch.context() as m:
        m.setattr(incremental, "save", lambda db, p: (_ for _ in ()).throw(OSError(28, "No space left on device")))
        with pytest.raises(OSError):
            correlate(parts)
    got = correlate(parts)
    assert not (parts / incremental.STATE_DIR).exists()
    assert {p.name: p.read_bytes() for p in (parts / "statement_attribution").glob("*.parquet")
            if p.name in first} == first
    assert derived_tables(parts) == derived_tables(whole)
    assert sorted(got.sql(queries).fetchall(), key=repr) == sorted(want.sql(queries).fetchall(), key=repr)

    # the first part correlated without a statement that was still running at its cut
    late = tmp_path / "late"
    shutil.copytree(CAPTURE, late)
    cap = Capture(late)
    running = next(s for s in stmts if s["start_ns"] < cuts[0] < s["end_ns"])
    all_rows = cap.read("statement")
    for p in cap.parts("statement"):
        p.unlink()
    cap.write_part("statement", [s for s in all_rows.to_pylist() if s["statement_id"] != running["statement_id"]])
    correlate(late, until_ns=cuts[0])
    cap.write_part("statement", [s for s in all_rows.to_pylist() if s["statement_id"] == running["statement_id"]])
    r = _correlate(late)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == (
        f"mwinv-correlate: error: {late}: 1 statement(s) started before the cut at {cuts[0]} ns that the part "
        f"correlated before did not have (still running then); remove {late / incremental.STATE_DIR} to "
        "correlate the capture whole"), r.stderr


def _duty_cycled(cap_dir: Path) -> tuple[tuple[int, int], list[dict]]:
    """The golden capture made duty-cycled (written back): trace windows but from 72.8 to 74 % of it,
    where one backend ran its 50 short statements, no kernel events there. The gap, and its statements."""
    cap = Capture(cap_dir)
    (window,) = cap.read("trace_window").to_pylist()
    gap = (window["lo"] + (window["hi"] - window["lo"]) * 728 // 1000, window["lo"] + (window["hi"] - window["lo"]) * 74 // 100)
    events = cap.read("kernel_event")
    for table, rows in (("trace_window", [dict(window, hi=gap[0]), dict(window, lo=gap[1])]),
                        ("kernel_event", events.filter(pc.invert(pc.and_(pc.greater(events["ts_ns"], gap[0]),
                                                                         pc.less(events["ts_ns"], gap[1])))))):
        for p in cap.parts(table):
            p.unlink()
        cap.write_part(table, rows, node="all")
    manifest = cap.manifest()
    for info in manifest["nodes"].values():
        info["duty"] = 0.5
    cap.write_manifest(manifest)
    return gap, [s for s in cap.read("statement").to_pylist() if gap[0] < s["start_ns"] and s["end_ns"] < gap[1]]


def _walking_every_statement(monkeypatch) -> None:
    """The segment walk made to take every top-level statement's boundaries as points (walked_statement
    leaves out those it can tell nothing of)."""
    every = [m if m.name != "walked_statement" else dataclasses.replace(m, sql=(
        "CREATE TABLE walked_statement AS SELECT node, pid, statement_id, start_ns, end_ns FROM statement_clean "
        "WHERE coalesce(nesting_level, 0) = 0 ORDER BY start_ns")) for m in modules.modules()]
    monkeypatch.setattr(modules, "_LOADED", every)


def test_between_trace_windows_a_pid_carries_its_last_row_only(tmp_path, monkeypatch):
    """The golden capture made duty-cycled (trace windows but from 72.8 to 74 % of it, where one backend
    ran its 50 short statements, no kernel events there), every statement's boundaries walked: walked in
    slices, a pid carries from one slice to the next only its last row where no traced statement ran
    since its last switch (the statements between the windows piled up in its tail, walked again slice
    after slice), and the tables are those of one whole pass."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    gap, between = _duty_cycled(cap_dir)
    assert len(between) >= 40
    _walking_every_statement(monkeypatch)

    whole = correlate(cap_dir, write=False)
    assert whole.duty_cycled
    carried = []
    state = attribution._segment_state

    def walk(raw, infos, last_slice, traced=None):
        columns, carry = state(raw, infos, last_slice, traced)
        if carry is not None:
            in_gap = ~carry["context"] & (carry["ts"] > gap[0]) & (carry["ts"] < gap[1])
            carried.append(max(np.unique(carry["pid"][in_gap], return_counts=True)[1], default=0))
        return columns, carry

    monkeypatch.setattr(attribution, "_segment_state", walk)
    monkeypatch.setattr(attribution, "CHUNK_STATEMENTS", 5)
    monkeypatch.setattr(attribution, "CHUNK_POINTS", 100)
    sliced = correlate(cap_dir, write=False)
    assert len(carried) >= 10 and max(carried) == 1
    assert _per_statement_tables(sliced) == _per_statement_tables(whole)


def test_a_pids_state_is_not_carried_across_a_gap_between_trace_windows(tmp_path):
    """The golden capture made duty-cycled, its backend switched out to sleep just before the gap and
    every switch with a kernel stack: the statements between the trace windows (no kernel events there)
    get no sleeping stretch with that switch's stack (nothing was observed there, the "sleeping" was
    carried across the gap), while the sleeping stretches within the windows keep theirs."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    gap, between = _duty_cycled(cap_dir)
    cap = Capture(cap_dir)
    events = cap.read("kernel_event")
    events = events.set_column(events.schema.get_field_index("stack_id"), "stack_id", pc.if_else(
        pc.equal(events["event"], "sched_switch"), pa.scalar(7, pa.int64()), pa.scalar(None, pa.int64())))
    sleep = {c: None for c in events.column_names} | {
        "node": events["node"][0].as_py(), "ts_ns": gap[0] - 1000, "cpu": 0, "event": "sched_switch",
        "pid": between[0]["pid"], "prev_pid": between[0]["pid"], "prev_state": "S", "next_pid": 0, "stack_id": 7}
    for p in cap.parts("kernel_event"):
        p.unlink()
    cap.write_part("kernel_event", pa.concat_tables([events, pa.Table.from_pylist([sleep], events.schema)]), node="all")
    db = correlate(cap_dir, write=False)
    ids = [s["statement_id"] for s in between]
    assert db.sql("SELECT count(*) FROM seg_off_stack WHERE list_contains(?, statement_id)", [ids]).fetchone()[0] == 0
    assert db.sql("SELECT count(*) FROM seg_off_stack WHERE NOT list_contains(?, statement_id) AND stack_id = 7",
                  [ids]).fetchone()[0] > 0


def test_the_statements_between_trace_windows_are_not_walked_and_the_tables_stay(tmp_path, monkeypatch):
    """The golden capture made duty-cycled, a network exit (a window's closing) left in the gap: the
    boundaries of the statements between the trace windows are no points of the walk (it can tell
    nothing of them), but for the one that holds the exit, and every per-statement table and query row
    is that of the same capture with every statement's boundaries walked, row for row."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    _, between = _duty_cycled(cap_dir)
    held = between[len(between) // 2]
    cap = Capture(cap_dir)
    events = cap.read("kernel_event")
    recv = {c: None for c in events.column_names} | {
        "node": events["node"][0].as_py(), "ts_ns": (held["start_ns"] + held["end_ns"]) // 2, "cpu": 0,
        "event": "sys_exit_recvfrom", "pid": held["pid"], "syscall_nr": 45, "syscall_ret": 321}
    cap.write_part("kernel_event", [recv], node="late")
    ids = [s["statement_id"] for s in between]
    walked = "SELECT DISTINCT sid FROM derived_point WHERE kind IN ('stmt_start', 'stmt_end') AND list_contains(?, sid)"

    fast = correlate(cap_dir, write=False)
    assert [r[0] for r in fast.sql(walked, [ids]).fetchall()] == [held["statement_id"]]
    # of the statements no trace window covers, only the one the trace saw I/O of has a statement_io row
    assert fast.sql("SELECT statement_id, net_rx_bytes FROM statement_io WHERE list_contains(?, statement_id)",
                    [ids]).fetchall() == [(held["statement_id"], 321)]
    _walking_every_statement(monkeypatch)
    every = correlate(cap_dir, write=False)
    assert len(every.sql(walked, [ids]).fetchall()) == len(between) >= 40
    assert _per_statement_tables(fast) == _per_statement_tables(every)


def test_a_statement_of_its_rusage_alone_is_not_summed_and_gets_the_summed_rows(tmp_path, monkeypatch):
    """The golden capture made duty-cycled, with a parallel worker: the statements between its trace
    windows (rusage alone) have no summed_statement row and none stored in the session (their
    rusage_attribution rows are made as they are read: a table of them took 15 s per 10 M statements to
    write), and every per-statement table and query row is that of the same capture with every
    statement summed from its own rows, row for row."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    _with_worker(cap_dir)
    _, between = _duty_cycled(cap_dir)
    ids = ", ".join(literal(s["statement_id"]) for s in between)
    # their rusage and idle time, some beyond the wall time (each part bounded by what the others left)
    cap = Capture(cap_dir)
    stmts = cap.read("statement").to_pylist()
    for i, s in enumerate(x for x in stmts if x["statement_id"] in {b["statement_id"] for b in between}):
        wall = s["end_ns"] - s["start_ns"]
        s.update(cpu_user_ns=wall // 3 * (1 + i % 4), cpu_sys_ns=wall // 8, client_wait_ns=wall // 4 * (i % 2))
    for p in cap.parts("statement"):
        p.unlink()
    cap.write_part("statement", stmts, node="all")
    fast = correlate(cap_dir, write=False)
    assert fast.sql(f"SELECT count(*) FILTER (WHERE rusage_only) FROM slice_statement WHERE statement_id IN ({ids})"
                    ).fetchone()[0] == len(between) >= 40
    assert fast.sql(f"SELECT count(*) FROM summed_statement WHERE statement_id IN ({ids})").fetchone()[0] == 0
    assert fast.sql(f"SELECT count(*) FROM summed_attribution WHERE statement_id IN ({ids})").fetchone()[0] == 0
    assert fast.sql("SELECT table_type FROM information_schema.tables WHERE table_name = 'rusage_attribution'"
                    ).fetchone()[0] == "VIEW"
    rows = fast.sql(f"SELECT component, sum(ns) FROM statement_attribution WHERE statement_id IN ({ids}) GROUP BY ALL"
                    ).fetchall()
    assert {c for c, ns in rows if ns > 0} == {"cpu_user", "cpu_sys", "client_wait", "not_allocated"}

    # the same capture with no statement of its rusage alone: each summed from its own rows
    every = [m if m.name != "slice_statement" else dataclasses.replace(
        m, sql=re.sub(r"coalesce\(s\.nesting_level, 0\) = 0 AND t\.statement_id IS NULL AND o\.statement_id IS NULL",
                      "false", m.sql)) for m in modules.modules()]
    monkeypatch.setattr(modules, "_LOADED", every)
    summed = correlate(cap_dir, write=False)
    assert summed.sql("SELECT count(*) FILTER (WHERE rusage_only) FROM slice_statement").fetchone()[0] == 0
    assert summed.sql(f"SELECT count(DISTINCT statement_id) FROM summed_statement WHERE statement_id IN ({ids})"
                      ).fetchone()[0] == len(between)
    assert _per_statement_tables(fast) == _per_statement_tables(summed)


def test_a_statement_of_its_rusage_alone_is_written_as_one_row_and_read_as_its_rows(tmp_path):
    """The golden capture made duty-cycled: a statement of its rusage alone is written as one row of
    rusage_attribution and in none of statement_attribution's parts (its 12 rows took 60 of 208 s of a
    600 s capture's correlation to write), and every reader sees the correlation's rows: the capture
    opened again, Capture.read, and a merge of its node's own correlation."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    _, between = _duty_cycled(cap_dir)
    db = correlate(cap_dir)
    rows = sorted(db.sql("SELECT * FROM statement_attribution").fetchall())
    alone = sorted(db.sql("SELECT node, statement_id FROM slice_statement WHERE rusage_only").fetchall())
    (node,) = {n for n, _ in alone}
    assert len(alone) >= len(between) >= 40
    cap = Capture(cap_dir)
    compact = cap.read("rusage_attribution")
    assert sorted(zip(compact["node"].to_pylist(), compact["statement_id"].to_pylist())) == alone
    stored = set(duckdb.sql(f"SELECT node, statement_id FROM {read_parquet(cap.parts('statement_attribution'))}").fetchall())
    assert stored and not stored & set(alone)
    assert sorted(open_correlated(cap_dir).sql("SELECT * FROM statement_attribution").fetchall()) == rows
    assert sorted(tuple(r.values()) for r in cap.read("statement_attribution").to_pylist()) == rows
    correlate(cap_dir, node=node)
    merge(cap_dir)
    assert sorted(open_correlated(cap_dir).sql("SELECT * FROM statement_attribution").fetchall()) == rows


def test_an_older_mwinvs_correlation_supersedes_the_compact_rows_it_left(tmp_path):
    """A capture correlated with the compact rows, then by an mwinv from before them (statement_attribution
    parts of every row, without the compact mark; rusage_attribution, which it does not know, left): read
    with every row once, the stale compact parts left out (they were read on top: twice the rows)."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    _duty_cycled(cap_dir)
    rows = sorted(correlate(cap_dir).sql("SELECT * FROM statement_attribution").fetchall())
    cap = Capture(cap_dir)
    assert cap.parts("rusage_attribution")
    full = cap.read("statement_attribution")
    for p in cap.parts("statement_attribution"):
        p.unlink()
    pq.write_table(full, cap.table_dir("statement_attribution") / "all-00000.parquet")
    assert not cap.parts("rusage_attribution")
    assert sorted(open_correlated(cap_dir).sql("SELECT * FROM statement_attribution").fetchall()) == rows
    assert cap.read("statement_attribution").num_rows == len(rows)


def test_the_walks_slices_follow_the_memory_limit(tmp_path, monkeypatch):
    """The segment walk's slices (outside DuckDB's limit) hold a point per POINT_BYTES of --memory: the
    golden capture at 64 MB walks in twice the slices it walks in at 128 MB (a byte budget scaled to
    its size), and gives the same tables."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    events = Capture(cap_dir).read("kernel_event").num_rows
    monkeypatch.setattr(attribution, "POINT_BYTES", (128 << 20) // (events // 2))   # ~4 slices at 128 MB
    got = {}
    for memory in ("64MB", "128MB"):
        db = correlate(cap_dir, write=False, memory=memory)
        got[memory] = (len(attribution.slice_bounds(db, attribution.chunk_points(db))), _per_statement_tables(db))
    assert got["128MB"][0] >= 3 and got["64MB"][0] >= 2 * got["128MB"][0] - 1
    assert got["64MB"][1] == got["128MB"][1]


def test_the_attribution_view_gives_bigint_columns(tmp_path):
    """statement_attribution's ns and from_workers_ns are BIGINT, as written: the sums moved to a linked
    coordinator statement's remote_wait made them HUGEINT, which Arrow carried as decimal128 and the
    writer cast back row by row (13.0 s against 10.7 s writing a 120 s capture's 124 M rows)."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    db = correlate(cap_dir, write=False)
    types = dict(db.sql("SELECT column_name, column_type FROM (DESCRIBE statement_attribution)").fetchall())
    assert types["ns"] == types["from_workers_ns"] == "BIGINT"


def test_a_large_derived_table_is_written_in_parts_at_once_with_the_rows_of_one(tmp_path, monkeypatch):
    """A derived table of more than load.PARALLEL_ROWS rows is written as one part per DuckDB thread at
    once (its statements split by a hash; at most load.PARALLEL_PARTS), with the rows of one part written
    alone; a later correlation replaces all of them."""
    from mwinv.correlator import load

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one DuckDB thread: one part")
    one, split = tmp_path / "one", tmp_path / "split"
    shutil.copytree(CAPTURE, one)
    shutil.copytree(CAPTURE, split)
    correlate(one)
    monkeypatch.setattr(load, "PARALLEL_ROWS", 0)
    for _ in range(2):   # the second replaces the first's parts
        correlate(split)
    parts = Capture(split).parts("statement_attribution")
    assert len(parts) > 1 and all(pq.read_metadata(p).num_rows for p in parts)
    assert derived_tables(split) == derived_tables(one)
    monkeypatch.setattr(load, "PARALLEL_PARTS", 1)   # at most that many
    correlate(split)
    assert len(Capture(split).parts("statement_attribution")) == 1


def test_a_state_kept_by_another_version_is_refused_in_one_line(tmp_path):
    """A capture correlated in parts by an older mwinv (its state without a format, its carry without the
    column the walk now reads) and resumed by this one: one line naming the state, not a traceback."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    ts = pc.min_max(Capture(cap_dir).read("kernel_event")["ts_ns"]).as_py()
    correlate(cap_dir, until_ns=(ts["min"] + ts["max"]) // 2)
    state = cap_dir / incremental.STATE_DIR / "state.json"
    kept = json.loads(state.read_text())
    del kept["format"]
    state.write_text(json.dumps(kept))
    r = _correlate(cap_dir)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"mwinv-correlate: error: {state.parent}: state of a correlation in parts in format 1, not "
        f"{incremental.STATE_FORMAT} (kept by another version of mwinv); remove it to correlate the capture whole"], r.stderr


def test_the_pages_a_session_query_freed_go_back_to_the_system():
    """DuckDB's jemalloc kept what a query freed until a later allocation came by (a session holding
    600-800 MiB of it between queries on a 120 s capture); its background threads purge it. What the
    query held is the process's peak from just before it (VmHWM, reset through clear_refs): its RSS right
    after the query is already being purged (169 MiB of a query that peaked higher, in one run of five)."""
    code = """if True:
        import re, time
        from mwinv.correlator.load import connect
        def rss():
            return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20
        con = connect(threads=1)
        base = rss()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")   # the peak RSS from here on
        con.execute("SELECT count(*) FROM (SELECT i, count(*) FROM range(10000000) t(i) GROUP BY i)").fetchall()
        used = (int(re.search(r"VmHWM:\\s*(\\d+)", open("/proc/self/status").read()).group(1)) >> 10) - base
        for _ in range(100):
            if rss() - base < used / 4:
                break
            time.sleep(0.1)
        print(used, rss() - base)"""
    used, kept = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                         timeout=120).stdout.split())
    assert used > 200 and kept < used / 4, (used, kept)


def test_the_walk_gives_its_sums_the_rows_of_statements_only(tmp_path, monkeypatch):
    """The per-slice sums (sql/seg_*_part.sql) count the stretches within statements: the walk gives them
    those rows only, not every point of its slice (87 % of a duty-cycled pgbench capture's points lie
    between statements; the fills' values taken at every row were 3.6 s of the 600 s capture's 13.9 s)."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    seen = []
    state = attribution._segment_state

    def walk(raw, infos, last_slice, traced=None):
        columns, carry = state(raw, infos, last_slice, traced)
        seen.append((len(raw["ts"]), columns["sid"]))
        return columns, carry

    monkeypatch.setattr(attribution, "_segment_state", walk)
    db = correlate(cap_dir, write=False)
    sids = np.concatenate([sid for _, sid in seen])
    assert (sids > 0).all() and 0 < len(sids) < sum(n for n, _ in seen)
    assert db.sql("SELECT count(DISTINCT statement_id) FROM seg_component").fetchone()[0] > 10


def test_the_c_walk_names_the_point_kinds_in_their_order():
    """walkstate.c reads a point's kind by its code, the index in attribution.POINT_KINDS: a kind added
    or moved on one side only would walk every point as another kind."""
    source = (Path(attribution.__file__).with_name("walkstate.c")).read_text()
    kinds = re.search(r"enum \{ (ON, OFF,[^}]*), NKINDS \}", source, re.S).group(1)
    assert [k.strip().lower() for k in kinds.split(",")] == list(attribution.POINT_KINDS)


def _c_enum(source: str, prefix: str, last: str = "") -> list[str]:
    """The names of a C enum of `prefix`_ names (its last one `last`, a count, left out), lowercase."""
    found = re.search(rf"enum \{{ ({prefix}_[^}}]*?)(, {last})? \}}", source, re.S).group(1)
    return [n.strip()[len(prefix) + 1:].lower() for n in found.split(",")]


def test_the_c_kernel_points_and_slice_order_read_the_columns_in_their_order():
    """kernelpoints.c and slicepoints.c read and write columns by their index in kernel_points' COLUMNS,
    LABELS and POINT_COLUMNS and attribution's SLICE_COLUMNS and WALK_INPUTS: one moved on one side only
    would read one column as another."""
    source = (Path(kernel_points.__file__).with_name("kernelpoints.c")).read_text()
    columns = [c.removesuffix("_ns").replace("syscall_", "") for c in kernel_points.COLUMNS]
    assert _c_enum(source, "C", "NCOLS") == columns
    assert _c_enum(source, "L", "NLABELS") == list(kernel_points.LABELS)
    assert _c_enum(source, "O") == list(kernel_points.POINT_COLUMNS)
    source = (Path(attribution.__file__).with_name("slicepoints.c")).read_text()
    assert _c_enum(source, "R", "NRUNCOLS") == [c for c, _ in attribution.SLICE_COLUMNS]
    assert _c_enum(source, "O") == [c for c, _ in attribution.WALK_INPUTS]


def test_kernel_parts_without_statistics_or_time_order_give_the_same_tables(tmp_path, monkeypatch):
    """The walk reads kernel_event's parts itself (kernel_points.py), a row group once for the slices it
    overlaps, found by its time statistics, a slice's points a range of its time-ordered events: parts
    of another writer, without statistics, their events shuffled, in row groups of 300, walked in slices
    of 200 points, give every per-statement table and query row of the recorder's parts."""
    cap_dir = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap_dir)
    before = _per_statement_tables(correlate(cap_dir, write=False))
    rng = np.random.default_rng(7)
    for part in Capture(cap_dir).parts("kernel_event"):
        t = pq.read_table(part)
        pq.write_table(t.take(pa.array(rng.permutation(t.num_rows))), part, write_statistics=False, row_group_size=300)
        assert not pq.ParquetFile(part).metadata.row_group(0).column(1).is_stats_set
    monkeypatch.setattr(attribution, "CHUNK_POINTS", 200)
    assert _per_statement_tables(correlate(cap_dir, write=False)) == before


def test_a_slice_is_put_in_the_walks_order_as_a_stable_sort_would():
    """slicepoints.c sorts a slice's runs of points by (node, pid, ts, ord), ties in the runs' order, and
    marks each seen where a window of its node covers it (a window's end inclusive, a gap never seen):
    against numpy's stable lexsort and searchsorted on 500 random slices of ties, unsorted runs, nodes
    without windows and columns at their default."""
    rng = np.random.default_rng(3)
    gap = attribution.POINT_KINDS.index("gap")
    defaults = {"stack_id": -1, "sid": -1}
    for _ in range(500):
        pids = np.unique([nd << 32 | p for nd in range(2) for p in rng.integers(1, 50, rng.integers(1, 5))])
        runs = []
        for _ in range(rng.integers(1, 5)):
            m = int(rng.integers(0, 60))
            key = pids[rng.integers(0, len(pids), m)]
            ts = rng.integers(0, 40, m)
            runs.append({"node": key >> 32, "pid": key & 0xffffffff, "ts": np.sort(ts) if rng.random() < 0.7 else ts,
                         "ord": rng.integers(-2, 10, m), "kind": rng.integers(0, len(attribution.POINT_KINDS), m),
                         "info": rng.integers(-1, 3, m), "nr": rng.integers(-1, 300, m), "ret": rng.integers(-5, 5, m),
                         **({"stack_id": rng.integers(-1, 9, m)} if rng.random() < 0.5 else
                            {c: rng.integers(-1, 2, m) for c in ("sid", "io_seq", "io_rand")})})
        cuts = np.sort(rng.choice(45, size=2 * int(rng.integers(0, 4)), replace=False))
        windows = {0: (cuts[0::2], cuts[1::2])}   # node 1 has none
        every = {c: np.concatenate([r[c] if c in r else np.full(len(r["ts"]), defaults.get(c, 0)) for r in runs])
                 .astype(t) for c, t in attribution.SLICE_COLUMNS}
        order = np.lexsort((every["ord"], every["ts"], every["pid"], every["node"]))
        want = {c: every[c][order] for c, _ in attribution.WALK_INPUTS if c in every}
        lo, hi = windows[0]
        at = np.searchsorted(lo, want["ts"], side="right") - 1
        covered = (at >= 0) & (want["ts"] <= np.append(hi, -1)[at])
        want["seen"] = (want["node"] == 0) & covered & (want["kind"] != gap)
        got = attribution._in_order(runs, pids, windows)
        assert not got["context"].any()
        assert all(np.array_equal(got[c], want[c]) for c in want), runs
