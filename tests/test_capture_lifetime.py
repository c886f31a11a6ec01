"""A capture and its server's lifetime (issue 15, item 4): a server that stops ends the capture by itself
with what was recorded so far; with --data-dir a restart is followed (a cold run in one capture); a
memory cap applies to the queries, not to the load."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from mwinv.capture.tables import Capture
from mwinv.engines.postgresql.server import PgServer, pg_bindir

MWINV_TRACE = str(Path(sys.executable).parent / "mwinv-trace")


@pytest.fixture
def server():
    with PgServer(name="lifetime", shared_preload_libraries=["mwinv"], gucs={"compute_query_id": "on"}) as srv:
        with srv.connect() as conn:
            conn.execute("CREATE EXTENSION mwinv")
        yield srv


def _capture(out: Path, server: PgServer, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen([MWINV_TRACE, "capture", str(out), "--conninfo", server.conninfo(), "--interval", "0.1",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not (out / "manifest.json").exists() or "start_ns" not in str(Capture(out).manifest().get("nodes")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.2)
    time.sleep(1.0)   # the recorder and the drainer are running
    return proc


def _texts(out: Path) -> dict[str, list[int]]:
    cap = Capture(out)
    texts = dict(zip(cap.read("statement_text").column("query_text_hash").to_pylist(),
                     cap.read("statement_text").column("text").to_pylist()))
    pids: dict[str, list[int]] = {}
    for r in cap.read("statement").to_pylist():
        pids.setdefault(texts.get(r["query_text_hash"]), []).append(r["pid"])
    return pids


def _stop(server: PgServer, mode: str = "fast") -> None:
    subprocess.run(["runuser", "-u", "postgres", "--", str(pg_bindir() / "pg_ctl"), "-D", str(server.data_dir), "-m",
                    mode, "-w", "stop"], check=True, capture_output=True)


def test_a_server_that_stops_ends_the_capture(server, tmp_path):
    out = tmp_path / "capture"
    proc = _capture(out, server)
    with server.connect() as conn:
        conn.execute("SELECT 'before the stop', pg_sleep(0.1)")
    time.sleep(1.5)   # drained (every 0.5 s): a record still in the ring dies with the server's shared memory
    _stop(server)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, text
    assert "the server stopped (postmaster" in text and "Traceback" not in text and "error" not in text.lower(), text
    assert "SELECT 'before the stop', pg_sleep(0.1)" in _texts(out)
    assert "CREATE EXTENSION mwinv" not in _texts(out)   # it ran before the capture began
    assert Capture(out).has("kernel_event")


def test_a_killed_capture_keeps_its_spooled_statements(server, tmp_path):
    """A capture spools the raw records and converts them when it stops: one killed with SIGKILL never
    stops, and the correlation converts what it left (the texts were written as they came)."""
    from mwinv.correlator.pipeline import correlate

    out = tmp_path / "killed"
    with server.connect() as conn:   # its text is kept before the capture begins
        conn.execute("SELECT 'before the kill', %s::int", [-1])
    proc = _capture(out, server, "--no-trace")
    with server.connect() as conn:
        for i in range(50):
            conn.execute("SELECT 'before the kill', %s::int", [i])
    time.sleep(1.5)   # spooled (every 0.1 s), and the text remembered (every 0.5 s)
    proc.kill()
    proc.communicate(timeout=30)
    spools = list(out.glob(".statement-*.spool"))
    assert spools and not Capture(out).has("statement")
    with open(spools[-1], "ab") as f:   # a record the kill cut short: left out
        f.write(b"\x01" * 100)
    correlate(out).con.close()
    assert not list(out.glob(".statement-*"))
    assert len(_texts(out)["SELECT 'before the kill', $1::int"]) == 50


def test_a_restart_is_followed_with_the_data_directory(server, tmp_path):
    out = tmp_path / "capture"
    proc = _capture(out, server, "--data-dir", str(server.data_dir), "--duration", "12")
    with server.connect() as conn:
        conn.execute("SELECT 'before the restart'")
    time.sleep(1.5)
    old = server.postmaster_pid()
    _stop(server)
    time.sleep(0.5)
    server.restart()   # a cold start of the same server (pg_ctl start on the same data directory)
    # the capture sees the new postmaster within its check (every 0.2 s) and records the restart as it
    # follows it: a backend that came and went before then is not traced (one did, beside another test run)
    deadline = time.monotonic() + 30
    while not next(iter(Capture(out).manifest()["nodes"].values())).get("restarts"):
        assert proc.poll() is None and time.monotonic() < deadline, "the capture did not follow the restart"
        time.sleep(0.05)
    with server.connect() as conn:
        after_pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        conn.execute("SELECT 'after the restart', pg_sleep(0.2)")
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in text, text
    assert f"the server restarted: postmaster {old} -> {server.postmaster_pid()}" in text, text
    seen = _texts(out)
    assert "SELECT 'before the restart'" in seen and seen["SELECT 'after the restart', pg_sleep(0.2)"] == [after_pid]
    node = next(iter(Capture(out).manifest()["nodes"].values()))
    (gap,) = node["restarts"]
    assert gap["postmaster_pid_before"] == old and gap["back_ns"] > gap["gone_ns"]
    events = Capture(out).read("kernel_event")
    assert after_pid in set(events.column("pid").to_pylist()), "the new postmaster's backend was not traced"


def test_the_memory_cap_is_for_the_queries_not_the_load():
    """SF 0.1 loads under no cap (building its indexes wants more than the cap); the cap is then on the
    server's group, and the queries run under it, also after a cold restart."""
    from mwinv.workloads.runner import run_queries
    from mwinv.workloads.setup import tpch_server

    server = tpch_server(0.1, name="pytest-memcap", memory_mb=160)
    try:
        cg = next(line.split(":", 2)[2] for line in Path(f"/proc/{server.postmaster_pid()}/cgroup").read_text()
                  .splitlines() if "memory" in line.split(":")[1].split(","))
        limit = Path(f"/sys/fs/cgroup/memory{cg}/memory.limit_in_bytes")
        assert int(limit.read_text()) == 160 * 2**20
        runs = run_queries(server, [6, 1], cold=True)
        assert [r.error for r in runs] == [None, None]
        cg_after = next(line.split(":", 2)[2] for line in Path(f"/proc/{server.postmaster_pid()}/cgroup").read_text()
                        .splitlines() if "memory" in line.split(":")[1].split(","))
        assert cg_after == cg   # the restarted server is in the capped group
    finally:
        server.stop()


def test_a_memory_cap_below_what_the_processes_hold_says_so():
    """A cap below the anonymous memory a group's process holds (no swap to reclaim it to): refused by the
    kernel as busy on every try, and said in one line with what the processes hold, not as a raw EBUSY."""
    from mwinv.cgroup import Cgroup
    from mwinv.errors import MwinvError

    if Path("/proc/swaps").read_text().count("\n") > 1:
        pytest.skip("swap: the kernel could reclaim the process's memory")
    group = Cgroup("pytest-tight", memory_bytes=-1).create()
    holder = subprocess.Popen([*group.exec_prefix(), sys.executable, "-c", "import time; b = bytearray(64 << 20); "
                               "b[::4096] = b'x' * len(b[::4096]); print(flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE)
    try:
        holder.stdout.readline()   # its 64 MiB touched in the group
        with pytest.raises(MwinvError, match=r"^cannot cap \S+ at 16 MiB: its processes hold (\d+) MiB that the "
                                             r"kernel cannot reclaim \(raise the cap\)$") as e:
            group.limit_memory(16 << 20)
        assert int(e.value.args[0].split(" hold ")[1].split()[0]) >= 64
    finally:
        holder.kill()
        holder.wait()
        group.remove()
