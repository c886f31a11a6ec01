"""MariaDB (issue 20): throw-away servers — several at once, always stopped and removed, also when the
owner gets SIGTERM, one-line errors — and TPC-H in MariaDB's dialect with the official answers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mwinv.engines.mariadb import tpch as mtpch
from mwinv.engines.mariadb.server import MariaDBServer
from mwinv.errors import MwinvError
from mwinv.workloads import tpch

pytestmark = pytest.mark.skipif(not Path("/usr/sbin/mariadbd").exists(), reason="mariadb-server is not installed")


def _mariadbd_running(base: Path) -> bool:
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if str(base) in (p / "cmdline").read_bytes().decode(errors="replace"):
                    return True
            except OSError:
                pass
    return False


def test_two_servers_at_once_and_nothing_left(mariadb_server):
    with MariaDBServer(name="second") as other:
        assert other.port != mariadb_server.port
        assert other.sql("SELECT @@port")[0][0] == other.port
        assert mariadb_server.sql("SELECT @@performance_schema")[0][0] == 1
        base = other.base_dir
        user = subprocess.run(["ps", "-o", "user=", "-p", str(other.pid())], capture_output=True, text=True).stdout
        assert user.strip() == "mysql"
    assert not base.exists() and not _mariadbd_running(base)


def test_sigterm_stops_and_removes_server(tmp_path):
    marker = tmp_path / "base"
    script = textwrap.dedent(f"""
        import time
        from mwinv.engines.mariadb.server import MariaDBServer
        s = MariaDBServer(name="sigterm").start()
        open({str(marker)!r}, "w").write(str(s.base_dir))
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    for _ in range(300):
        if marker.exists() and marker.read_text():
            break
        time.sleep(0.1)
    base = Path(marker.read_text())
    assert _mariadbd_running(base)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert not base.exists() and not _mariadbd_running(base)


def test_start_failures_are_one_line(mariadb_server):
    with pytest.raises(MwinvError, match=f"port {mariadb_server.port} is in use"):
        MariaDBServer(name="taken", port=mariadb_server.port).start()
    bad = MariaDBServer(name="bad", settings={"innodb_buffer_pool_size": "nonsense"})
    with pytest.raises(MwinvError, match=r"mariadbd of server 'bad' exited .*mariadb\.err\)") as e:
        bad.start()
    assert "\n" not in str(e.value) and not bad.base_dir.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="MariaDB runs as mysql: only root can start it so")
def test_tpch_answers_equal_the_official_ones(mariadb_server):
    data = tpch.generate(0.01)
    with mariadb_server.connect() as conn:
        counts = mtpch.load(conn, data)
        assert counts["lineitem"] == 60175 and counts["orders"] == 15000
        problems = []
        with conn.cursor() as cur:
            cur.execute("USE tpch")
            for q in tpch.QUERY_NUMBERS:
                cur.execute(mtpch.query_sql(q))
                problems += tpch.compare_result(q, 0.01, list(cur.fetchall()))
    assert problems == []
