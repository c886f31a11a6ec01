"""mwinv's servers live in one private directory, and what another local user plants elsewhere steers
no root command: `clean` signals only a pid that is the server of its data directory, `down` takes a
tag, not a path, and a server whose `mwinv tpch` was killed with -9 is found and removed."""

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mwinv import serverdir
from mwinv.cgroup import Cgroup
from mwinv.kernel_trace.tracefs import pid_alive
from mwinv.engines.postgresql.server import PgServer

MWINV = str(Path(sys.executable).parent / "mwinv")


def _mwinv(*argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([MWINV, *argv], capture_output=True, text=True, timeout=120, env={**os.environ, **env})


def _remove(path: Path) -> None:
    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sleepers():
    """Unrelated processes (root's): none of them may be signalled by a clean."""
    procs = []

    def start() -> subprocess.Popen:
        procs.append(subprocess.Popen(["sleep", "300"]))
        return procs[-1]

    yield start
    for p in procs:
        p.kill()
        p.wait()


def _plant(hostile, path: Path, pid: int) -> None:
    """As the hostile user: a fake server directory at path whose postmaster.pid names pid."""
    out = hostile.python("import os, sys; os.makedirs(sys.argv[1] + '/data'); "
                         "open(sys.argv[1] + '/data/postmaster.pid', 'w').write(sys.argv[2] + '\\n')",
                         str(path), str(pid))
    assert out.returncode == 0, out.stderr


def test_clean_ignores_what_other_users_plant_in_tmp(hostile, sleepers, tmp_path):
    tag = secrets.token_hex(3)
    planted, link = Path(f"/tmp/mwinv-pg-cl-{tag}-coord-x"), Path(f"/tmp/mwinv-pg-cl-{tag}-d1-x")
    victim = tmp_path / "victim"          # root's: what the symlink points at
    plain, through_link = sleepers(), sleepers()
    (victim / "data").mkdir(parents=True)
    (victim / "data" / "postmaster.pid").write_text(f"{through_link.pid}\n")
    (victim / "keep").write_text("root's")
    try:
        _plant(hostile, planted, plain.pid)
        assert hostile.run(["ln", "-s", str(victim), str(link)]).returncode == 0
        out = _mwinv("cluster", "clean")
        assert out.returncode == 0, out.stderr
        time.sleep(0.5)
        assert plain.poll() is None and through_link.poll() is None, "clean signalled an unrelated process"
        assert str(planted) not in out.stdout and str(link) not in out.stdout, out.stdout
        assert (planted / "data" / "postmaster.pid").exists() and link.is_symlink()
        assert (victim / "keep").read_text() == "root's"
    finally:
        _remove(planted)
        _remove(link)


def test_a_state_directory_another_user_made_is_refused(hostile):
    """root pointed MWINV_STATE_DIR at /tmp, where another user made the name first."""
    planted = Path(f"/tmp/mwinv-state-{secrets.token_hex(4)}")
    try:
        assert hostile.run(["mkdir", "-m", "0777", str(planted)]).returncode == 0
        out = _mwinv("cluster", "clean", MWINV_STATE_DIR=str(planted))
        assert out.returncode == 2, out
        assert out.stderr.count("\n") == 1 and "not a private directory" in out.stderr, out.stderr
        assert list(planted.iterdir()) == []
    finally:
        _remove(planted)


def test_down_takes_a_tag_not_a_path(hostile, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("root's")
    evil = Path(f"/tmp/mwinv-evil-{secrets.token_hex(4)}")
    state = json.dumps({"tag": "x", "servers": {"d1": {"base_dir": str(victim)}}, "cgroups": [str(victim)]})
    try:
        assert hostile.python("import sys; open(sys.argv[1], 'w').write(sys.argv[2])",
                              f"{evil}.json", state).returncode == 0
        out = _mwinv("cluster", "down", "../" * 12 + str(evil).lstrip("/"))
        assert out.returncode == 2, out
        assert out.stderr.count("\n") == 1 and "not a tag" in out.stderr, out.stderr
        assert (victim / "keep").read_text() == "root's"
    finally:
        Path(f"{evil}.json").unlink(missing_ok=True)


def test_a_pid_that_is_not_the_server_of_its_directory_is_not_signalled(sleepers):
    """A server directory whose owner is gone and whose postmaster.pid names another process (a pid
    reused after the server died): clean removes the directory and signals nobody."""
    sleeper = sleepers()
    base = serverdir.new_server_dir("pg", "pytest-reused")
    serverdir.set_owner(base, {"pid": 2**22 + 1, "start": 0, "boot": "gone"})
    (base / "data").mkdir()
    (base / "data" / "postmaster.pid").write_text(f"{sleeper.pid}\n")
    out = _mwinv("clean")
    assert out.returncode == 0, out.stderr
    assert f"server {base}" in out.stdout.splitlines(), out.stdout
    time.sleep(0.5)
    assert sleeper.poll() is None
    assert not base.exists() and not base.with_suffix(".json").exists()


def test_the_check_knows_a_real_postmaster(sleepers):
    with PgServer(name="pytest-check") as server:
        pid_file = server.data_dir / "postmaster.pid"
        fd = serverdir.server_pidfd(pid_file, server.data_dir, serverdir.PG_EXES)
        assert fd is not None
        os.close(fd)
        other = sleepers()
        assert serverdir.server_pidfd(pid_file, server.data_dir, {"sleep"}) is None   # not the DBMS
        assert serverdir.server_pidfd(pid_file, server.base_dir, serverdir.PG_EXES) is None   # another dir
        real = pid_file.read_text()
        pid_file.write_text(real.replace(str(server.postmaster_pid()), str(other.pid), 1))
        try:
            assert serverdir.server_pidfd(pid_file, server.data_dir, serverdir.PG_EXES) is None
        finally:
            pid_file.write_text(real)


def test_the_check_knows_a_real_mariadbd(mariadb_server):
    fd = serverdir.server_pidfd(mariadb_server.pid_file, mariadb_server.data_dir, serverdir.KINDS["maria"][2])
    assert fd is not None
    os.close(fd)


def test_a_cgroup_clean_cannot_remove_is_said_left_and_why(sleepers):
    """A dead cluster's cgroup that a process still holds: clean says it is left and names the process,
    and never that it removed it; once the process is gone the next clean removes it."""
    group = Cgroup(f"cl-{secrets.token_hex(3)}-pytest", cpu_fraction=1.0).create()
    path = group.path("cpu")
    sleeper = sleepers()
    group.add_pid(sleeper.pid)
    try:
        lines = _mwinv("clean").stdout.splitlines()
        assert f"cgroup {path} is left: 1 process still in it (sleep {sleeper.pid})" in lines, lines
        assert f"cgroup {path}" not in lines and path.is_dir()
        sleeper.kill()
        sleeper.wait()
        assert f"cgroup {path}" in _mwinv("clean").stdout.splitlines() and not path.exists()
    finally:
        group.remove()


def _server_of(pid: int, timeout_s: float = 120) -> tuple[Path, dict]:
    """The server directory owned by process pid and its record, once its postmaster accepts
    connections."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for base, record in serverdir.server_records():
            pid_file = base / "data" / "postmaster.pid"
            # initdb's standalone backend writes a negative pid; the postmaster, once up, "ready"
            if (record.get("owner") or {}).get("pid") == pid and pid_file.exists() and "ready" in pid_file.read_text():
                return base, record
        time.sleep(0.2)
    raise AssertionError(f"process {pid} started no server in {serverdir.servers_dir()}")


def test_a_killed_tpch_leaves_a_server_that_clean_removes():
    proc = subprocess.Popen([MWINV, "tpch", "--scale", "0.01", "--queries", "1", "--memory-mb", "256"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base, record = _server_of(proc.pid)
        postmaster = int((base / "data" / "postmaster.pid").read_text().split()[0])
    finally:
        proc.kill()
        proc.wait()
    assert pid_alive(postmaster), "the server did not outlive its mwinv"
    assert record["cgroups"] and all(Path(g).is_dir() for g in record["cgroups"])
    out = _mwinv("clean")
    assert out.returncode == 0, out.stderr
    assert f"server {base}" in out.stdout.splitlines(), out.stdout
    assert not pid_alive(postmaster)
    assert not base.exists() and not base.with_suffix(".json").exists()
    assert not any(Path(g).exists() for g in record["cgroups"])
