import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mwinv.errors import MwinvError
from mwinv.engines.postgresql.server import PgServer


def _postgres_running(data_dir: Path) -> bool:
    out = subprocess.run(["pgrep", "-f", f"-D {data_dir}"], capture_output=True, text=True).stdout
    return bool(out.strip()) or (data_dir / "postmaster.pid").exists()


def test_several_servers_at_once_and_removed_after():
    with PgServer(name="a") as a, PgServer(name="b") as b:
        assert a.port != b.port
        assert a.psql("select 1+1").strip() == "2"
        assert b.psql("select current_setting('port')").strip() == str(b.port)
        dirs = [a.base_dir, b.base_dir]
    for d in dirs:
        assert not d.exists()


def test_port_in_use_is_refused_and_nothing_left():
    with PgServer(name="first", listen_addresses="127.0.0.1") as first:
        with pytest.raises(MwinvError, match=f"port {first.port} is in use"):
            PgServer(name="second", port=first.port).start()


def test_existing_data_directory_is_refused(tmp_path):
    (tmp_path / "something").write_text("x")
    with pytest.raises(MwinvError, match="exists and is not empty"):
        PgServer(name="x", base_dir=tmp_path).start()
    assert (tmp_path / "something").exists()  # never removes what it did not create


def test_failed_start_leaves_nothing_behind():
    srv = PgServer(name="bad", gucs={"shared_buffers": "'nonsense'"})
    with pytest.raises(MwinvError, match="pg_ctl start failed"):
        srv.start()
    assert not srv.base_dir.exists()


def test_sigterm_stops_and_removes_server(tmp_path):
    marker = tmp_path / "base"
    script = textwrap.dedent(f"""
        import time
        from mwinv.engines.postgresql.server import PgServer
        s = PgServer(name="sigterm").start()
        open({str(marker)!r}, "w").write(str(s.base_dir))
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    for _ in range(200):
        if marker.exists() and marker.read_text():
            break
        time.sleep(0.1)
    base = Path(marker.read_text())
    assert (base / "data" / "postmaster.pid").exists()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert not base.exists()
    assert not _postgres_running(base / "data")


def test_missing_postgres_user_is_one_line_error(monkeypatch):
    import pwd

    real = pwd.getpwnam

    def fake(name):
        if name == "postgres":
            raise KeyError(name)
        return real(name)

    monkeypatch.setattr(pwd, "getpwnam", fake)
    with pytest.raises(MwinvError, match="user 'postgres' does not exist"):
        PgServer(name="nouser").start()
