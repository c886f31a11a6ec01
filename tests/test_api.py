"""The Python API (docs/python.md) on the capture kept in tests/golden: the page's example runs as
written, the API returns what mwinv-correlate prints, and pandas stays out of `import mwinv`."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
GOLDEN = ROOT / "tests" / "golden"


def doc_blocks(lang: str) -> list[str]:
    """The ```<lang> blocks of docs/python.md, in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```$", (ROOT / "docs" / "python.md").read_text(), re.S | re.M)


@pytest.fixture()
def capture_copy(tmp_path, monkeypatch):
    shutil.copytree(GOLDEN / "pg_small_capture", tmp_path / "out" / "run1")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "out" / "run1"


def test_the_documented_example_runs(capture_copy):
    blocks = doc_blocks("python")
    assert len(blocks) >= 4
    ns: dict = {}
    for block in blocks:
        exec(compile(block, "docs/python.md", "exec"), ns)
    assert ns["top"].iloc[0].text == "SELECT count(*) FROM nation"    # the statement that waited ~300 ms
    assert ns["per_statement"].loc[ns["slowest"].example_id, "lock_wait"] > 0.95 * ns["slowest"].total_ns
    assert len(ns["advice"][ns["advice"].rule == "lock.wait"]) == 1
    assert ns["events"].n.sum() > 0 and len(ns["cpu"]) > 1


def test_the_api_reads_what_the_terminal_prints(capture_copy):
    import mwinv

    cli = Path(sys.executable).parent / "mwinv-correlate"
    r = subprocess.run([sys.executable, str(cli), str(capture_copy), "--format", "json", "--top-sql", "10"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    printed = json.loads(r.stdout)
    with mwinv.open(capture_copy) as cap:
        top = cap.top_sql(10)
        assert list(top.query_id) == [p["query_id"] for p in printed]
        assert list(top.total_ns) == [p["total_ns"] for p in printed]
        assert list(top.lock_wait_ns) == [p["components"]["lock_wait"] for p in printed]
        advice = cap.advice()
        for p in printed:
            mine = advice[advice.statement_id == p["example_id"]]
            assert list(mine.rule) == [a["rule"] for a in p["advice"]], p["text"]
        one = cap.advice(query_id=printed[1]["query_id"])
        assert set(one.statement_id) <= {printed[1]["example_id"]}
        assert cap.top_sql(1, by="disk").iloc[0].query_id == printed_by(capture_copy, "disk")[0]["query_id"]
        assert len(cap.kernel_functions(printed[0]["query_id"])) == 0   # no stacks nor perf samples here
        with pytest.raises(mwinv.errors.MwinvError, match="no statement with query_id 12345"):
            cap.kernel_functions(12345)
        assert len(cap.statements()) == 56 and len(cap.nodes()) > 0


def printed_by(capture: Path, by: str) -> list[dict]:
    cli = Path(sys.executable).parent / "mwinv-correlate"
    r = subprocess.run([sys.executable, str(cli), str(capture), "--format", "json", "--by", by],
                       capture_output=True, text=True, timeout=300, check=True)
    return json.loads(r.stdout)


def test_pandas_only_when_a_frame_is_asked_for(capture_copy):
    code = f"""
import sys, mwinv
cap = mwinv.open({str(capture_copy)!r})
mwinv.experiment
assert "pandas" not in sys.modules, "opening"
cap.top_sql(1)
assert "pandas" in sys.modules
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_not_a_capture_is_one_error(tmp_path):
    import mwinv

    with pytest.raises(mwinv.errors.MwinvError, match="no such capture directory"):
        mwinv.open(tmp_path / "nothing")


def test_a_table_not_built_yet_is_left_to_the_runner(tmp_path):
    """A frame of a derived table the session does not hold is empty and creates nothing: a view made
    for it made the runner's later build of that table fail ("statement_attribution exists already")."""
    from mwinv.api import Capture
    from mwinv.capture.tables import SCHEMAS
    from mwinv.correlator.load import open_capture

    shutil.copytree(GOLDEN / "pg_small_capture", tmp_path / "cap")
    with Capture(open_capture(tmp_path / "cap")) as cap:   # a session not correlated yet
        empty = cap.attribution()
        assert len(empty) == 0 and list(empty.columns) == SCHEMAS["statement_attribution"].names
        cap.db.build("statement_attribution")
        assert cap.attribution().ns.sum() > 0
