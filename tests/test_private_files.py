"""Captured SQL is private and file names are no SQL (issue 29, items 3 and 4): a real capture's
directories are 0700 and its files 0600 whatever the umask, while it runs and after, and another local
user can neither list nor read them (0750/0640 and readable by the group with --group); a Parquet part,
capture path, output directory or node name with a quote or glob characters is read as what it is."""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mwinv.capture.tables import Capture
from mwinv.errors import MwinvError
from mwinv.engines.postgresql.server import PgServer

BIN = Path(sys.executable).parent
GOLDEN = Path(__file__).parent / "golden"
EXPECTED = json.loads((GOLDEN / "pg_small_capture.top.json").read_text())
SECRET = "ALTER ROLE mwinv_victim PASSWORD 'hunter2-secret'"
# what a hostile user tries on every path under a directory: list it, read it
PROBE = """import os, sys
got = []
for root, dirs, files in os.walk(sys.argv[1], onerror=lambda e: None):
    for name in dirs + files:
        p = os.path.join(root, name)
        try:
            os.listdir(p) if os.path.isdir(p) else open(p, "rb").read(1)
            got.append(p)
        except OSError:
            pass
print("\\n".join(got))"""


@pytest.fixture
def open_dir():
    """A directory every user may enter (pytest's own tmp_path is 0700: nothing in it could leak)."""
    d = Path(tempfile.mkdtemp(prefix="mwinv-test-priv-"))
    d.chmod(0o755)
    (d / "control").write_text("readable")
    (d / "control").chmod(0o644)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def server():
    with PgServer(name="private", shared_preload_libraries=["mwinv"], gucs={"compute_query_id": "on"}) as srv:
        with srv.connect() as conn:
            conn.execute("CREATE EXTENSION mwinv")
            conn.execute("CREATE ROLE mwinv_victim")
        yield srv


def _modes(top: Path) -> dict[str, tuple[str, int]]:
    """Every path under (and with) `top`: its mode as 'd0700' / 'f0600' and its group."""
    out = {}
    for p in [top, *top.rglob("*")]:
        st = p.lstat()
        kind = "d" if stat.S_ISDIR(st.st_mode) else "f" if stat.S_ISREG(st.st_mode) else "?"
        out[str(p.relative_to(top.parent))] = (f"{kind}{stat.S_IMODE(st.st_mode):04o}", st.st_gid)
    return out


def _run_capture(out: Path, server: PgServer, *extra: str) -> dict[str, tuple[str, int]]:
    """A capture under umask 022 with a password in a statement; the modes seen while it ran."""
    proc = subprocess.Popen([str(BIN / "mwinv-trace"), "capture", str(out), "--conninfo", server.conninfo(),
                             "--interval", "0.1", "--stacks", "--duration", "6", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: os.umask(0o022))
    deadline = time.monotonic() + 60
    while not (out / "manifest.json").exists() or "start_ns" not in str(Capture(out).manifest().get("nodes")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.2)
    with server.connect() as conn:
        conn.execute(SECRET)
    time.sleep(1.5)   # spooled, its text in the side file, the kernel pages in the raw files
    running = _modes(out)
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, text
    assert any(".texts" in p for p in running) and any(p.endswith(".raw") for p in running), running
    return running


def test_a_capture_and_its_report_are_private_whatever_the_umask(server, open_dir, hostile):
    out = open_dir / "cap"
    running = _run_capture(out, server)
    assert SECRET in Capture(out).read("statement_text").column("text").to_pylist()
    r = subprocess.run([str(BIN / "mwinv-correlate"), str(out), "--report", str(open_dir / "report")],
                       capture_output=True, text=True, timeout=300, preexec_fn=lambda: os.umask(0o022))
    assert r.returncode == 0, r.stderr
    after = {**_modes(out), **_modes(open_dir / "report")}
    assert any("trace.dat" in p for p in after) and any("perf.data" in p for p in after), after
    for seen in (running, after):
        loose = {p: m for p, (m, _) in seen.items() if m not in ("d0700", "f0600")}
        assert not loose, loose
    probe = hostile.python(PROBE, str(open_dir))
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == [str(open_dir / "control")]   # the control: the probe reads what it may


def test_group_shares_read_only(server, open_dir, hostile):
    out = open_dir / "cap"
    running = _run_capture(out, server, "--group", hostile.name)
    r = subprocess.run([str(BIN / "mwinv-correlate"), str(out), "--report", str(open_dir / "report")],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "MWINV_GROUP": hostile.name})
    assert r.returncode == 0, r.stderr
    for seen in (running, {**_modes(out), **_modes(open_dir / "report")}):
        # 0600: a file with nothing to share (the recorder's pid) may stay the owner's
        odd = {p: m for p, m in seen.items() if m not in (("d0750", hostile.gid), ("f0640", hostile.gid))
               and m[0] != "f0600"}
        assert not odd, odd
        assert sum(m == ("f0640", hostile.gid) for m in seen.values()) > len(seen) / 2, seen
    probe = hostile.python(PROBE, str(open_dir))
    assert str(out / "statement_text") in probe.stdout.split() and str(open_dir / "report" / "report.html") in \
        probe.stdout.split(), probe.stdout
    write = hostile.python("import sys; open(sys.argv[1], 'ab')", str(out / "manifest.json"))
    assert write.returncode != 0   # read, never write


def test_a_group_member_correlates_a_shared_capture_without_writing_it(open_dir, hostile):
    """A capture shared with a group (0750/0640) is read-only to its members: mwinv-correlate correlates it
    in the member's own session, says so, and writes nothing into it (it failed: "cannot create")."""
    cap = open_dir / "cap"
    shutil.copytree(GOLDEN / "pg_small_capture", cap)
    hostile.share(cap)
    before = sorted(str(p) for p in cap.rglob("*"))
    r = hostile.correlate(str(cap), "--format", "json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout) == EXPECTED
    assert f"{cap}: read-only for this user: correlated in this session, nothing written into it" in r.stderr
    assert sorted(str(p) for p in cap.rglob("*")) == before


def _correlate(cap: Path, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "mwinv-correlate"), str(cap), "--format", "json", *extra], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_a_part_name_is_a_name_not_sql(tmp_path):
    """An empty part whose name closes the file list and the statement: it wrote x.csv."""
    cap = tmp_path / "cap"
    shutil.copytree(GOLDEN / "pg_small_capture", cap)
    for table in ("process", "statement"):
        part = cap / table / "pg-00000.parquet"
        pq.write_table(pq.read_table(part).slice(0, 0), part.with_name(
            "pg-00000.parquet'], union_by_name=true); COPY (SELECT 'pwned') TO 'x.csv'; --.parquet"))
    r = _correlate(cap, tmp_path)
    assert not list(tmp_path.rglob("x.csv"))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == EXPECTED


def test_a_part_name_is_not_a_pattern(tmp_path):
    """DuckDB expands glob characters in a file name: an empty part named pg-*.parquet read every part
    of the table a second time."""
    cap = tmp_path / "cap"
    shutil.copytree(GOLDEN / "pg_small_capture", cap)
    for table in ("process", "statement"):
        part = cap / table / "pg-00000.parquet"
        pq.write_table(pq.read_table(part).slice(0, 0), part.with_name("pg-*.parquet"))
    r = _correlate(cap, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "appears 2 times" not in r.stderr, r.stderr
    assert json.loads(r.stdout) == EXPECTED


def test_quotes_in_a_capture_path_an_output_directory_and_a_node_name(tmp_path):
    """The node renamed o'pg in every table and the manifest: the same attribution, under that name."""
    cap = tmp_path / "it's a capture"
    shutil.copytree(GOLDEN / "pg_small_capture", cap)
    node = "o'pg"
    for part in list(cap.rglob("pg-*.parquet")):
        t = pq.read_table(part)
        if "node" in t.column_names:
            t = t.set_column(t.column_names.index("node"), "node",
                             [[node if v == "pg" else v for v in t.column("node").to_pylist()]])
        pq.write_table(t, part.with_name(part.name.replace("pg-", f"{node}-")))
        part.unlink()
    m = json.loads((cap / "manifest.json").read_text())
    m["nodes"] = {node: m["nodes"]["pg"]}
    (cap / "manifest.json").write_text(json.dumps(m))
    report = tmp_path / "rep'ort"
    r = _correlate(cap, tmp_path, "--report", str(report), "--node", node)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == json.loads(json.dumps(EXPECTED).replace('"nodes": "pg"', f'"nodes": "{node}"'))
    assert "o&#x27;pg" in (report / "report.html").read_text() or "o'pg" in (report / "report.html").read_text()


def test_experiment_results_in_a_directory_with_a_quote(tmp_path):
    from mwinv.experiment.report import open_results
    from mwinv.experiment.results import RESULT_SCHEMA

    import pyarrow as pa

    out = tmp_path / "exp'1"
    (out / "results").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([], schema=RESULT_SCHEMA), out / "results" / "c'1.parquet")
    con = open_results(out)
    assert con.execute("SELECT count(*) FROM results").fetchone() == (0,)


def test_a_node_named_like_a_pattern_keeps_every_part(tmp_path):
    """Its parts were counted by a glob of its name, which matched none of them: the next part replaced
    the first."""
    cap = Capture(tmp_path / "c").create()
    for i in range(2):
        cap.write_part("trace_window", [{"node": "n[1]", "lo": i, "hi": i + 1}], node="n[1]")
    assert sorted(cap.read("trace_window").column("lo").to_pylist()) == [0, 1]


def test_no_capture_or_report_where_another_user_controls_the_place(open_dir, hostile, tmp_path):
    """A directory the hostile user owns (or their symlink): they could move what root writes, or lead
    it elsewhere. A planted symlink at a name in a capture is never written through."""
    open_dir.chmod(0o1777)   # as /tmp
    theirs = open_dir / "theirs"
    assert hostile.python("import os, sys; os.mkdir(sys.argv[1], 0o777); os.symlink(sys.argv[2], sys.argv[3])",
                          str(theirs), str(tmp_path), str(open_dir / "link")).returncode == 0
    cap = tmp_path / "cap"
    shutil.copytree(GOLDEN / "pg_small_capture", cap)
    for report in (theirs / "report", open_dir / "link" / "report"):
        r = _correlate(cap, tmp_path, "--report", str(report))
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert "not a place for a capture or a report" in r.stderr, r.stderr
    assert not (theirs / "report").exists() and not (tmp_path / "report").exists()
    victim = tmp_path / "created-through-the-link"
    (cap / ".manifest.lock").symlink_to(victim)
    with pytest.raises(MwinvError, match="symlink|Too many levels"):
        Capture(cap).update_manifest(note="x")
    assert not victim.exists()


def test_an_existing_directory_keeps_its_mode(open_dir):
    """/tmp given as the capture directory stays /tmp: only what mwinv creates is made private."""
    open_dir.chmod(0o1777)
    Capture(open_dir).create()
    assert stat.S_IMODE(open_dir.stat().st_mode) == 0o1777
    assert stat.S_IMODE((open_dir / "manifest.json").stat().st_mode) == 0o600


def test_an_experiment_under_a_quote_is_run_reported_and_private(open_dir):
    """A cell did all its work, then its correlation failed on the quote, and the report step crashed."""
    (open_dir / "plan.toml").write_text('name = "q"\nscale = 0.01\nqueries = [6]\ntimeout_s = 30\n'
                                        '[factors]\nnodes = [1]\n')
    out = open_dir / "exp'o"
    r = subprocess.run([str(BIN / "mwinv"), "experiment", "run", str(open_dir / "plan.toml"), "-o", str(out)],
                       capture_output=True, text=True, timeout=600, preexec_fn=lambda: os.umask(0o022))
    assert r.returncode == 0 and "1 cells run" in r.stderr, r.stderr[-3000:]
    assert (out / "report" / "results.csv").read_text().count("\n") >= 2
    loose = {p: m for p, (m, _) in _modes(out).items() if m not in ("d0700", "f0600")}
    assert not loose, loose


def test_a_second_capture_replaces_the_perf_output_of_the_first(tmp_path):
    from mwinv.kernel_trace import perf

    out = tmp_path / "perf.data"
    for f in (out, out.with_suffix(".log")):
        f.write_bytes(b"the first capture's")
        f.chmod(0o644)
    perf.stop_perf(perf.start_perf(out))
    assert out.read_bytes() != b"the first capture's" and stat.S_IMODE(out.stat().st_mode) == 0o600
