"""Without the extension (issue 15, item 5): on a server that does not preload mwinv, the capture takes
statement boundaries from PostgreSQL's own USDT probes, the correlator attributes them unchanged, and
what is lost is said; the CPU of the same TPC-H queries agrees with the extension's capture."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mwinv.node_capture import NodeCapture
from mwinv.capture.tables import text_hash
from mwinv.correlator.pipeline import correlate
from mwinv.engines.sqltext import normalized
from mwinv.workloads import tpch
from mwinv.workloads.setup import tpch_server

QUERIES = (1, 6, 3, 12)
RUNS = 4   # one cold, then warm ones: the fastest warm one is compared


def _capture(server, out: Path) -> None:
    """Each query RUNS times, each on its own connection, serial plans."""
    with NodeCapture(out, postmaster_pid=server.postmaster_pid(), conninfo=server.conninfo("tpch")):
        for q in QUERIES:
            for _ in range(RUNS):
                with server.connect("tpch", options="-c max_parallel_workers_per_gather=0") as conn:
                    conn.execute(tpch.query_sql(q)).fetchall()


def _cpu_by_query(out: Path) -> dict[int, list[tuple[int, int, int]]]:
    """query -> (CPU ns, wall ns, components' sum) of each execution, in order."""
    db = correlate(out)
    rows = db.sql("""
        SELECT t.text, s.statement_id, s.end_ns - s.start_ns AS wall,
               sum(a.ns) FILTER (WHERE a.component IN ('cpu_user', 'cpu_sys')) AS cpu, sum(a.ns) AS total
        FROM statement_clean s JOIN (SELECT DISTINCT query_text_hash, text FROM statement_text) t USING (query_text_hash)
        JOIN statement_attribution a USING (node, statement_id) GROUP BY ALL ORDER BY min(s.start_ns)""").fetchall()
    def key(text):   # the extension keeps the statement without its ';'
        return " ".join(text.split()).rstrip(";").strip()

    by_text = {key(tpch.query_sql(q)): q for q in QUERIES}
    out_ = {}
    for text, _, wall, cpu, total in rows:
        if (q := by_text.get(key(text))) is not None:
            out_.setdefault(q, []).append((int(cpu or 0), int(wall), int(total)))
    return out_


@pytest.fixture(scope="module")
def degraded_server():
    server = tpch_server(0.01, name="pytest-degraded", gucs={"shared_buffers": "'16MB'"})
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def degraded(degraded_server, tmp_path_factory):
    out = tmp_path_factory.mktemp("degraded") / "capture"
    _capture(degraded_server, out)
    return out


def test_statements_come_from_the_query_probes(degraded):
    from mwinv.capture.tables import Capture

    node = next(iter(Capture(degraded).manifest()["nodes"].values()))
    assert node["statements"] == "usdt" and "not loaded" in node["statements_lost"]
    got = _cpu_by_query(degraded)
    assert sorted(got) == sorted(QUERIES)
    for q, runs in got.items():
        assert len(runs) == RUNS, (q, runs)
        for cpu, wall, total in runs:
            assert total == wall, (q, cpu, wall, total)   # the breakdown sums to the wall time
            assert 0 < cpu <= wall


def test_cpu_agrees_with_the_extension(degraded, degraded_server, tpch_pg, tmp_path):
    """The extension's capture of the same queries on a server that preloads it: per query, the CPU of the
    fastest warm execution within 30 % + 5 ms (two servers, two runs: the windows differ by the
    extension's parse-to-end against the probes' Query message). The fastest, because one execution
    alone is at the mercy of the shared VM: a CI run had Q1 at 58 ms under the probes and 31 ms under the
    extension, where three local runs agreed within 1 ms at 33 ms; on a slower day a whole capture's
    warm runs of Q1 took 102-107 ms under the probes, 59-80 ms in others. Noise only adds CPU, so where
    the two disagree both sides are captured again (at most twice) and each keeps its fastest."""
    with tpch_pg.connect("tpch") as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS mwinv")
    probes = _cpu_by_query(degraded)
    best: dict[str, dict[int, int]] = {"ext": {}, "probes": {}}
    for attempt in range(3):
        _capture(tpch_pg, tmp_path / f"ext{attempt}")
        if attempt:
            _capture(degraded_server, tmp_path / f"probes{attempt}")
            probes = _cpu_by_query(tmp_path / f"probes{attempt}")
        for side, got in (("ext", _cpu_by_query(tmp_path / f"ext{attempt}")), ("probes", probes)):
            for q in QUERIES:
                fastest = min(cpu for cpu, _, _ in got[q][1:])
                best[side][q] = min(best[side].get(q, fastest), fastest)
        if all(abs(best["ext"][q] - best["probes"][q]) <= 0.3 * max(best["ext"][q], best["probes"][q]) + 5e6
               for q in QUERIES):
            break
    for q in QUERIES:
        a, b = best["ext"][q], best["probes"][q]
        print(f"Q{q}: CPU extension {a / 1e6:.1f} ms, probes {b / 1e6:.1f} ms")
        assert abs(a - b) <= 0.3 * max(a, b) + 5e6, (q, a, b)


def test_the_terminal_says_what_is_lost(degraded):
    proc = subprocess.run([str(Path(sys.executable).parent / "mwinv-correlate"), str(degraded), "--top-sql", "3"],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "the mwinv extension is not loaded" in proc.stderr and "no query id" in proc.stderr, proc.stderr
    # each statement named by its text, under a stable id (its text's hash, literals folded), in the
    # terminal and the JSON, and its executions grouped under it
    assert "query_id None" not in proc.stdout
    proc = subprocess.run([str(Path(sys.executable).parent / "mwinv-correlate"), str(degraded), "--top-sql", "10",
                           "--format", "json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr

    def key(text):
        return " ".join(text.split()).rstrip(";").strip()

    by_text = {key(tpch.query_sql(q)): q for q in QUERIES}
    named = {by_text.get(key(r["text"])): r for r in json.loads(proc.stdout)}
    for q in QUERIES:
        assert named[q]["query_id"] == text_hash(normalized(named[q]["text"])), q
        assert named[q]["calls"] == RUNS, q
