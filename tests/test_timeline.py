"""mwinv-correlate --timeline on the capture kept in tests/golden: a file in the Trace Event format
(checked against the format's rules), its statements with their components nested under them and
summing to their attribution, node samples as counters, and the limits said in the file and on stderr.
The flows between a coordinator's statements and its data nodes': tests/test_cluster.py."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import trace_events
from mwinv.capture.tables import ATTRIBUTION_COMPONENTS

GOLDEN = Path(__file__).parent / "golden" / "pg_small_capture"
CLI = Path(sys.executable).parent / "mwinv-correlate"


def correlate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CLI), *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    cap = tmp_path_factory.mktemp("tl") / "cap"
    shutil.copytree(GOLDEN, cap)
    return cap


def test_statements_and_their_components_on_a_timeline(capture, tmp_path):
    out = tmp_path / "timeline.json"
    r = correlate(capture, "--timeline", out, "--format", "json")
    assert r.returncode == 0, r.stderr[-2000:]
    top = json.loads(r.stdout)
    doc = json.loads(out.read_text())
    tracks = trace_events.check(doc)
    statements = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "statement"]
    assert len(statements) == 56 and doc["otherData"]["mwinv"]["statements_shown"] == 56
    for s in statements:
        assert s["dur"] == pytest.approx(s["args"]["wall_ns"] / 1000, abs=1e-3)   # ts and dur in µs
        kids = [e for e in tracks[(s["pid"], s["tid"])] if e["cat"] == "component"
                and s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1e-3]
        assert {k["name"]: k["args"]["ns"] for k in kids} == \
            {c: s["args"][f"{c}_ns"] for c in ATTRIBUTION_COMPONENTS if f"{c}_ns" in s["args"]}
        assert sum(k["args"]["ns"] for k in kids) == s["args"]["wall_ns"]
    locked = next(t for t in top if t["text"] == "SELECT count(*) FROM nation")
    (slice_,) = [s for s in statements if s["args"]["statement_id"] == str(locked["example_id"])]
    assert slice_["args"]["lock_wait_ns"] == locked["components"]["lock_wait"]
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert {c["name"] for c in counters} >= {"CPU %", "disk MiB/s"}
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"node pg"}
    assert "timeline: " in r.stderr and "56 of 56 top-level statements" in r.stderr


def test_bounded_by_top_and_range(capture, tmp_path):
    out = tmp_path / "t.json"
    r = correlate(capture, "--timeline", out, "--timeline-top", "3", "--timeline-range", "0.1:0.3", "--format", "json")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    trace_events.check(doc)
    meta = doc["otherData"]["mwinv"]
    assert meta["top"] == 3 and meta["range_s"] == [0.1, 0.3] and meta["statements_total"] == 56
    shown = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "statement"]
    assert len(shown) == meta["statements_shown"] <= 3
    assert "the longest 3 in 0.1-0.3 s" in r.stderr
    # inside the range: each statement ends after 0.1 s and begins before 0.3 s from the first one
    first = meta["t0_ns"]
    assert all(s["ts"] + s["dur"] >= 0 for s in shown) and first > 0


@pytest.mark.parametrize("bad", ["5", "a:b", "3:1", "-1:"])
def test_a_bad_range_is_one_line(capture, tmp_path, bad):
    r = correlate(capture, "--timeline", tmp_path / "t.json", "--timeline-range", bad)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"--timeline-range {bad!r}: FROM:TO" in r.stderr
    assert not (tmp_path / "t.json").exists()


def test_the_timeline_only_reads(capture):
    """A renderer creates nothing in the session (it made tl_* temp tables over and over): the session's
    tables are those before, and a second timeline is the first."""
    import mwinv
    from mwinv.correlator.load import session_tables
    from mwinv.correlator.timeline import timeline

    with mwinv.open(capture) as cap:
        before = session_tables(cap.db)   # temporary tables too (their schema is main, in catalog temp)
        first = timeline(cap.db, top=10).json()
        assert session_tables(cap.db) == before
        assert timeline(cap.db, top=10).json() == first
