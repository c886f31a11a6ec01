"""MariaDB (issue 20): throw-away servers — several at once, always stopped and removed, also when the
owner gets SIGTERM, one-line errors — and TPC-H in MariaDB's dialect with the official answers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path

import pytest

from mwinv.capture.tables import Capture
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


def _thread_cpu_ns(pid: int, tid: int) -> int:
    fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def test_capture_tpch_with_kernel_tracing(mariadb_server, tmp_path):
    """TPC-H on MariaDB under a capture: every statement on its OS thread, its components summing to its
    wall time, its CPU against /proc's count for that thread, the clock mapping's error bounded,
    nothing overwritten unnoticed, and the background threads' roles recorded."""
    from mwinv.correlator.pipeline import correlate
    from mwinv.engines.mariadb.capture import MariaDBCapture

    with mariadb_server.connect() as conn:
        mtpch.load(conn, tpch.generate(0.01))
    conn = mariadb_server.connect("tpch")
    cur = conn.cursor()
    cur.execute("SELECT THREAD_OS_ID FROM performance_schema.threads WHERE PROCESSLIST_ID = CONNECTION_ID()")
    tid = cur.fetchone()[0]
    with MariaDBCapture(mariadb_server, tmp_path / "cap", node="maria") as cap:
        before = _thread_cpu_ns(mariadb_server.pid(), tid)
        for q in tpch.QUERY_NUMBERS:
            cur.execute(mtpch.query_sql(q))
            cur.fetchall()
        after = _thread_cpu_ns(mariadb_server.pid(), tid)
    conn.close()
    info = cap.summary["statements"]
    # the server counts a statement after its client has the result: the last one may count late
    assert info["statements"] == 22 and info["statements_executed"] in (21, 22) and info["statements_overwritten"] == 0
    clock = info["clock_mapping"]
    assert clock["start"]["error_ns"] < 1_000_000 and clock["end"]["error_ns"] < 1_000_000
    assert Capture(tmp_path / "cap").manifest()["nodes"]["maria"]["clock"] == "mono"   # the node's, kept
    db = correlate(tmp_path / "cap")
    assert db.warnings == []
    rows = db.sql("""
        SELECT s.statement_id, s.pid, any_value(s.end_ns - s.start_ns), sum(a.ns),
               sum(a.ns) FILTER (WHERE a.component IN ('cpu_user', 'cpu_sys'))
        FROM statement_clean s JOIN statement_attribution a USING (node, statement_id) GROUP BY ALL""").fetchall()
    assert len(rows) == 22 and all(pid == tid and wall == total for _, pid, wall, total, _ in rows)
    cpu = sum(c for *_, c in rows)
    assert abs(cpu - (after - before)) <= 0.2 * (after - before) + 30_000_000, (cpu, after - before)
    roles = dict(db.sql("SELECT role, count(*) FROM process WHERE role IS NOT NULL GROUP BY role").fetchall())
    assert roles.get("connection", 0) >= 1 and roles.get("page cleaner", 0) >= 1
    # MariaDB's own advice, on performance_schema's counters of the statement (Q1 scans lineitem unindexed)
    from mwinv.correlator.advice import advise_capture
    from mwinv.correlator.pipeline import top_statements

    top = top_statements(db, 5)
    advice = advise_capture(tmp_path / "cap", [t.example_id for t in top])
    rules = {a.rule for v in advice.values() for a in v}
    assert "mariadb.index" in rules and all(r.startswith(("mariadb.", "kernel_", "too-thin")) for r in rules), rules
    from mwinv.correlator.report import load, render_report

    html, md = render_report(load(tmp_path / "cap"), tmp_path / "report")
    text = md.read_text()
    assert "mariadb.index" in text and "l_returnflag" in text and "max_parallel_workers" not in text


def test_the_thread_pool_worker_of_each_statement(tmp_path):
    """With the thread pool a connection's statements run on whichever worker is free, and
    performance_schema names only the worker a connection last ran on. Each statement is placed on the
    worker that read its command from the connection's socket (the kernel's read on that fd): CPU-bound
    statements run one at a time over four connections then have their CPU on their own thread, and
    every worker named is one of the pool's."""
    import threading

    from mwinv.correlator.pipeline import correlate
    from mwinv.engines.mariadb.capture import MariaDBCapture

    server = MariaDBServer(settings={"thread_handling": "pool-of-threads", "thread_pool_size": "2"})
    server.start()
    try:
        conns = [server.connect() for _ in range(4)]
        sql = "SELECT BENCHMARK(400000, MD5('mwinv'))"
        with MariaDBCapture(server, tmp_path / "cap", node="maria"):
            for rnd in range(3):
                for i, conn in enumerate(conns):
                    cur = conn.cursor()
                    cur.execute(sql)
                    cur.fetchall()
                # two at once: the pool's two groups' workers both serve
                threads = [threading.Thread(target=lambda c=c: c.cursor().execute(sql)) for c in conns[:2]]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
        workers = {os_id for name, os_id in server.sql(
            "SELECT NAME, THREAD_OS_ID FROM performance_schema.threads") if name == "thread/threadpool/worker_thread"}
        for conn in conns:
            conn.close()
    finally:
        server.stop()
    db = correlate(tmp_path / "cap")
    mapped = db.sql("SELECT count(*) FROM statement_thread").fetchone()[0]
    rows = db.sql("""
        SELECT s.statement_id, s.pid, t.pid AS polled, s.end_ns - s.start_ns AS wall,
               sum(a.ns) FILTER (WHERE a.component IN ('cpu_user', 'cpu_sys', 'run_queue')) AS on_cpu
        FROM statement_clean s JOIN statement_text x USING (query_text_hash)
        JOIN statement t USING (node, statement_id) JOIN statement_attribution a USING (node, statement_id)
        WHERE starts_with(x.text, 'SELECT BENCHMARK') GROUP BY ALL ORDER BY s.statement_id""").fetchall()
    assert len(rows) == 18 and mapped >= 18
    assert {pid for _, pid, *_ in rows} <= workers, (rows, workers)
    # on its own thread a CPU-bound statement is on a CPU (or waiting for one) all the time
    assert all(on_cpu >= 0.9 * wall for *_, wall, on_cpu in rows), rows
    moved = sum(pid != polled for _, pid, polled, *_ in rows)
    print(f"{moved} of {len(rows)} statements ran on another worker than performance_schema's last one")


def test_reads_that_io_threads_complete_are_disk_waits(tmp_path):
    """A cold scan through a buffer pool smaller than the table, O_DIRECT: the query thread submits its
    reads and sleeps on a futex until InnoDB has reaped the completion and released the page. Those
    sleeps are disk waits, not lock waits: the block completions (recorded without the pid filter) give
    the thread's requests their end, and its sleeps with its own requests in flight are the disk's.
    Checked by another reading of the trace: the sleeps during which one of the thread's own requests
    completed, and which ended after it, are at least 80 % in the disk components."""
    from mwinv.correlator.pipeline import correlate
    from mwinv.engines.mariadb.capture import MariaDBCapture

    settings = {"innodb_buffer_pool_size": "6M", "innodb_flush_method": "O_DIRECT",
                "innodb_buffer_pool_load_at_startup": "OFF", "innodb_buffer_pool_dump_at_shutdown": "OFF"}
    with MariaDBServer(name="cold", settings=settings) as server:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE scan")
            cur.execute("USE scan")
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY, pad VARCHAR(1000)) ENGINE=InnoDB")
            cur.execute("INSERT INTO t SELECT seq, repeat('x', 1000) FROM seq_1_to_30000")   # ~30 MB
            conn.commit()
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT THREAD_OS_ID FROM performance_schema.threads WHERE PROCESSLIST_ID = CONNECTION_ID()")
            tid = cur.fetchone()[0]
            with MariaDBCapture(server, tmp_path / "cap", node="maria"):
                cur.execute("SELECT count(*), sum(length(pad)) FROM scan.t")
                assert cur.fetchall()[0][0] == 30000
    db = correlate(tmp_path / "cap")
    (sid, wall), = db.sql(f"SELECT s.statement_id, s.end_ns - s.start_ns FROM statement_clean s JOIN statement_text x "
                          f"USING (query_text_hash) WHERE s.pid = {tid} AND starts_with(x.text, 'SELECT count')"
                          ).fetchall()
    parts = defaultdict(int, db.sql("SELECT component, ns FROM statement_attribution WHERE statement_id = ?",
                                    [sid]).fetchall())
    assert sum(parts.values()) == wall
    timed, reqs = db.sql(f"SELECT count(complete_ns), count(*) FROM disk_request WHERE pid = {tid}").fetchone()
    assert reqs > 100 and timed >= 0.95 * reqs, (timed, reqs)   # pid-filtered, 4 % of them were
    # each sleep of the thread (switched out in S) until its waking; those an own completion ended
    io, other, tails = db.sql(f"""
        WITH sw AS (SELECT ts_ns, prev_pid = {tid} AND prev_state LIKE 'S%' AS sleeps FROM kernel_event
                    WHERE event = 'sched_switch' AND (prev_pid = {tid} OR next_pid = {tid})),
             waking AS (SELECT ts_ns FROM kernel_event WHERE event = 'sched_waking' AND target_pid = {tid}),
             done AS (SELECT complete_ns FROM disk_request WHERE pid = {tid} AND complete_ns IS NOT NULL),
             slept AS (SELECT o.ts_ns AS off_ns, w.ts_ns AS wake_ns FROM sw o ASOF JOIN waking w ON w.ts_ns >= o.ts_ns
                       WHERE o.sleeps),
             ended AS (SELECT s.*, d.complete_ns, d.complete_ns >= s.off_ns AS by_io FROM slept s
                       ASOF LEFT JOIN done d ON d.complete_ns <= s.wake_ns)
        SELECT coalesce(sum(wake_ns - off_ns) FILTER (WHERE by_io), 0),
               coalesce(sum(wake_ns - off_ns) FILTER (WHERE NOT coalesce(by_io, false)), 0),
               coalesce(sum(wake_ns - complete_ns) FILTER (WHERE by_io), 0)
        FROM ended e JOIN statement_clean s ON s.statement_id = {sid} AND e.off_ns BETWEEN s.start_ns AND s.end_ns
        """).fetchone()
    disk = parts.get("disk_seq", 0) + parts.get("disk_random", 0) + parts.get("disk_unknown", 0)
    print(f"wall {wall / 1e6:.1f} ms: { {k: round(v / 1e6, 1) for k, v in parts.items() if v} }; sleeps an own "
          f"completion ended {io / 1e6:.1f} ms (from the completions to the wakings {tails / 1e6:.1f} ms), "
          f"others {other / 1e6:.1f} ms")
    # the scan waited on the disk: a busy machine stretches its CPU, not its reads (CI: io 17.4 ms of a
    # 213.6 ms wall with 161.3 ms of CPU, where a quiet run has 30 ms of 150)
    assert io > 10_000_000, (io, wall)
    assert disk >= 0.8 * (io - tails), (disk, io, tails)
    # (with 5 % of the wall for the sleeps this reading does not see: the attribution found 4.4 ms more
    # sleep than it in a run of 55.9 ms, split between disk and lock; with the completions unpaired,
    # all of io went to lock_wait)
    assert parts.get("lock_wait", 0) <= other + tails + 0.25 * io + 0.05 * wall, (parts, io, other, tails)


def test_statements_the_ring_overwrote_are_counted(tmp_path):
    """A 100-row history ring drained every 0.5 s under 3,000 quick statements: what was overwritten
    before a drain is counted from the server's own counters, and the capture's manifest says so."""
    from mwinv.capture.tables import Capture
    from mwinv.engines.mariadb.reader import PerfSchemaReader

    cap = Capture(tmp_path / "cap").create()
    settings = {"performance_schema_events_statements_history_long_size": "100"}
    with MariaDBServer(name="ring", settings=settings) as srv:
        reader = PerfSchemaReader(srv.connect, cap, "m1", interval_s=0.5).start()
        with srv.connect() as conn, conn.cursor() as cur:
            for i in range(3000):
                cur.execute(f"SELECT {i}")
                cur.fetchall()
        info = reader.stop()
        # the statement consumers are restored: this server had them off
        assert srv.sql("SELECT count(*) FROM performance_schema.setup_consumers "
                       "WHERE NAME LIKE 'events_statements%' AND ENABLED = 'YES'")[0][0] == 0
    captured = cap.read("statement").num_rows
    assert captured == info["statements"] < 3000
    assert captured + info["statements_overwritten"] >= 3000
    assert info["statements_overwritten"] > 0


SLOWLOGS = sorted((Path(__file__).parent / "golden" / "mysql_slowlog").glob("*.log"))


def test_slow_query_logs_are_read_as_the_fallback(tmp_path):
    """Real slow logs (Percona's test logs of MySQL 5.6 and MariaDB 10.2, and one of MariaDB 10.11 written
    here): every entry a statement whose duration is its Query_time, counted here from the raw lines;
    the lock time attributed, the rest unaccounted-for; MariaDB's advice on it."""
    import re

    from mwinv.correlator.pipeline import correlate

    out = tmp_path / "slow"
    r = subprocess.run([str(Path(sys.executable).parent / "mwinv"), "mariadb", "slowlog", *map(str, SLOWLOGS),
                        "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want = [float(m.group(1)) for f in SLOWLOGS for m in re.finditer(r"^# Query_time: ([\d.]+)", f.read_text(), re.M)]
    locks = [float(m.group(1)) for f in SLOWLOGS for m in re.finditer(r"Lock_time: ([\d.]+)", f.read_text())]
    db = correlate(out)
    n, total = db.sql("SELECT count(*), sum(end_ns - start_ns) FROM statement_clean").fetchone()
    assert n == len(want) == 39 and total == round(sum(round(q * 1e9) for q in want))
    lock = db.sql("SELECT sum(ns) FROM statement_attribution WHERE component = 'lock_wait'").fetchone()[0]
    assert lock == sum(round(x * 1e9) for x in locks)
    bad = db.sql("""SELECT count(*) FROM (SELECT s.statement_id FROM statement_clean s JOIN statement_attribution a
                    USING (node, statement_id) GROUP BY s.statement_id HAVING sum(a.ns) <> any_value(s.end_ns - s.start_ns))
                 """).fetchone()[0]
    assert bad == 0
    stats = dict(db.sql("SELECT name, count(*) FROM statement_stat GROUP BY name").fetchall())
    assert stats["rows_examined"] > 0 and stats["no_index_used"] > 0 and stats["created_tmp_tables"] > 0
    broken = tmp_path / "broken.log"
    broken.write_text(SLOWLOGS[0].read_text().replace("# Query_time: 0.000180", "# Query_time: x", 1))
    r = subprocess.run([str(Path(sys.executable).parent / "mwinv"), "mariadb", "slowlog", str(broken), "-o",
                        str(tmp_path / "b")], capture_output=True, text=True)
    assert r.returncode == 2 and f"mwinv: error: {broken}:4: entry without a valid Query_time" in r.stderr
    assert "the other 28 entries were read" in r.stderr


def _sysbench(server: MariaDBServer, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sysbench", "oltp_read_write", f"--mysql-socket={server.socket}", "--mysql-user=root",
                           "--mysql-db=sbtest", "--tables=1", "--table-size=1000", "--db-driver=mysql", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not Path("/usr/bin/sysbench").exists(), reason="sysbench is not installed")
def test_capture_a_running_server_from_the_command_line(mariadb_server, tmp_path):
    """`mwinv mariadb capture` against a server it did not start, as a DBA would: credentials from an
    option file or MYSQL_PWD, the privileges checked first (one line naming each missing one), the
    server's pid from the socket's peer or the TCP listener; sysbench in its default mode (server-side
    prepared statements) meanwhile: its executions are kept, and those whose text performance_schema
    does not give are counted and said, with the texts their connections prepared."""
    srv = mariadb_server
    srv.sql("CREATE DATABASE sbtest")
    assert _sysbench(srv, "prepare").returncode == 0
    for host in ("localhost", "127.0.0.1"):
        srv.sql(f"CREATE USER 'weak'@'{host}' IDENTIFIED BY 'pw1'")
        srv.sql(f"GRANT SELECT ON performance_schema.* TO 'weak'@'{host}'")
        srv.sql(f"CREATE USER 'perf'@'{host}' IDENTIFIED BY 'pw2'")
        srv.sql(f"GRANT SELECT, UPDATE ON performance_schema.* TO 'perf'@'{host}'")
        srv.sql(f"GRANT PROCESS ON *.* TO 'perf'@'{host}'")
    mwinv = str(Path(sys.executable).parent / "mwinv")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MYSQL")}
    r = subprocess.run([mwinv, "mariadb", "capture", str(tmp_path / "no"), "--socket", str(srv.socket), "--user", "weak",
                        "--duration", "1"], capture_output=True, text=True, env={**env, "MYSQL_PWD": "pw1"})
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "weak@localhost lacks UPDATE on performance_schema.setup_consumers" in r.stderr and "PROCESS" in r.stderr
    assert not (tmp_path / "no" / "manifest.json").exists()

    from mwinv.engines.mariadb.live import LiveServer

    cnf = tmp_path / "perf.cnf"
    cnf.write_text(f"[client]\nuser = perf\npassword = pw2\nsocket = {srv.socket}\n")
    cnf.chmod(0o600)
    assert LiveServer(host="127.0.0.1", port=srv.port, user="perf", defaults_file=str(cnf)).pid() == srv.pid()
    cnf.chmod(0o666)
    with pytest.raises(MwinvError, match="writable by its owner only"):
        LiveServer(defaults_file=str(cnf))
    cnf.chmod(0o600)
    out = tmp_path / "cap"
    consumers_off = ("SELECT count(*) FROM performance_schema.setup_consumers WHERE ENABLED = 'NO' "
                     "AND NAME LIKE 'events_statements%'")
    assert srv.sql(consumers_off)[0][0] == 3
    cap = subprocess.Popen([mwinv, "mariadb", "capture", str(out), "--defaults-file", str(cnf), "--duration", "5",
                            "--node", "db"], stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(2)
    bench = _sysbench(srv, "run", "--time=0", "--events=300", "--threads=2")
    _, err = cap.communicate(timeout=120)
    assert cap.returncode == 0 and bench.returncode == 0, err
    assert f"server pid {srv.pid()}" in err and "CPU not split into user and system" in err
    node = Capture(out).manifest()["nodes"]["db"]
    texts = {r["query_text_hash"]: r["text"] for r in Capture(out).read("statement_text").to_pylist()}
    hashes = Capture(out).read("statement").column("query_text_hash").to_pylist()
    executed = sum(1 for h in hashes if "sbtest1" in texts[h] or "prepared statement" in texts[h])
    assert executed > 1000
    assert node["prepared_executions"] > 1000 and "SELECT c FROM sbtest1 WHERE id=?" in node["prepared_texts"]
    unknown = node["prepared_executions"] - node["prepared_recovered"]
    assert f"{unknown:,} executions of server-side prepared statements" in node["statements_lost"]
    # the kernel side of the same server: its threads' events
    pids = set(Capture(out).read("kernel_event").column("pid").to_pylist())
    assert {p for p in set(Capture(out).read("statement").column("pid").to_pylist()) if p} & pids
    # the statement consumers, off on this server, were switched on for the capture and off again
    assert "switching on for the capture" in err
    assert srv.sql(consumers_off)[0][0] == 3

    # --prepared-texts: each execution's text from the general log, which needs SUPER (perf lacks it)
    r = subprocess.run([mwinv, "mariadb", "capture", str(tmp_path / "no2"), "--defaults-file", str(cnf),
                        "--prepared-texts"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "lacks SUPER (--prepared-texts" in r.stderr, r.stderr
    root_cnf = tmp_path / "root.cnf"
    root_cnf.write_text(f"[client]\nuser = root\nsocket = {srv.socket}\n")
    root_cnf.chmod(0o600)
    out = tmp_path / "cap2"
    cap = subprocess.Popen([mwinv, "mariadb", "capture", str(out), "--defaults-file", str(root_cnf), "--duration", "5",
                            "--node", "db", "--prepared-texts"], stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(2)
    bench = _sysbench(srv, "run", "--time=0", "--events=300", "--threads=2")
    _, err = cap.communicate(timeout=120)
    assert cap.returncode == 0 and bench.returncode == 0, err
    node = Capture(out).manifest()["nodes"]["db"]
    assert node["prepared_executions"] > 1000 and node["prepared_recovered"] >= 0.99 * node["prepared_executions"]
    texts = {r["query_text_hash"]: r["text"] for r in Capture(out).read("statement_text").to_pylist()}
    shapes = {}
    for h in Capture(out).read("statement").column("query_text_hash").to_pylist():
        shapes[texts[h]] = shapes.get(texts[h], 0) + 1
    # each of sysbench's statement shapes, with its text, and its share of the executions
    assert set(node["prepared_texts"]) <= set(shapes), set(node["prepared_texts"]) - set(shapes)
    assert shapes["SELECT c FROM sbtest1 WHERE id=?"] == 10 * shapes["BEGIN"] > 0
    assert srv.sql("SELECT @@global.general_log")[0][0] == 0


def _point_selects(server, out):
    """300 point selects on one connection under a capture with node "m"; the capture."""
    from mwinv.engines.mariadb.capture import MariaDBCapture

    conn = server.connect()
    cur = conn.cursor()
    with MariaDBCapture(server, out, node="m") as cap:
        for i in range(300):
            cur.execute(f"SELECT {i}")
            cur.fetchall()
    conn.close()
    return cap


def test_statement_windows_lie_in_their_command_cycles(mariadb_server, tmp_path):
    """performance_schema's timers mapped through a marker statement missed a point select's own command
    cycle by some µs (80 % began before the read that brought their command, 66 % ended after the thread
    had begun waiting for the next): each window is clamped into its thread's cycle, so no recvfrom of
    the thread falls inside a statement's window."""
    import duckdb

    cap = _point_selects(mariadb_server, tmp_path / "cap")
    bounded = cap.summary["statements"]["windows_bounded_by_socket_calls"]
    why = cap.summary["statements"]["windows_not_bounded"]
    # the capture accounts for every window it left unbounded; on a loaded CI host 287 of 300 were
    # bounded once (why was not yet said), 300 of 300 in 6 runs here beside 2-4 busy loops and a dd
    assert bounded >= 270 and bounded + sum(why.values()) == 300, (bounded, why)
    inside = duckdb.sql(f"""
        WITH s AS (SELECT * FROM read_parquet('{tmp_path}/cap/statement/*.parquet') WHERE pid IS NOT NULL),
             k AS (SELECT * FROM read_parquet('{tmp_path}/cap/kernel_event/*.parquet')
                   WHERE event = 'sys_enter_recvfrom' OR (event = 'sys_exit_recvfrom' AND syscall_ret > 0))
        SELECT count(*), count(*) FILTER (WHERE EXISTS (SELECT 1 FROM k WHERE k.pid = s.pid
                                                        AND k.ts_ns > s.start_ns AND k.ts_ns < s.end_ns))
        FROM s""").fetchone()
    # a window the capture could not bound by its thread's socket calls (it says how many) keeps the
    # timers' mapping and may hold a read: 1 of 300 did once; every bounded one holds none
    assert inside[0] >= 300 and inside[1] <= inside[0] - bounded, (inside, bounded)


def test_statements_pair_with_their_commands_in_order(mariadb_server, tmp_path):
    """A thread that answered as many commands as it ran statements pairs them in order, so a clock
    mapping error of a few cycles moves no window out of its own: the same real windows mapped 40 µs
    early or late are bounded into the same cycles. Matched by time alone, 2-10 of 300 windows here
    (32 once on a loaded CI host) were left unbounded as reaching the next command's cycle."""
    import duckdb

    from mwinv.engines.mariadb.bounds import command_cycles, socket_bounds

    cap = _point_selects(mariadb_server, tmp_path / "cap")
    windows, slack = cap.reader.windows(), cap.reader.clock_slack()
    (pid,) = {p for p, _, _ in windows.values()}
    cycles = command_cycles(sorted(
        (ts, event) for ts, p, event, ret in duckdb.sql(f"""
            SELECT ts_ns, pid, event, syscall_ret FROM read_parquet('{tmp_path}/cap/kernel_event/*.parquet')
            WHERE event IN ('sys_exit_recvfrom', 'sys_enter_recvfrom', 'sys_exit_sendto')""").fetchall()
        if p == pid and (event != "sys_exit_recvfrom" or ret > 0)))

    def cycle_of(moved: int) -> dict:
        bounds, why = socket_bounds(cap.capture, "m", {k: (p, s + moved, e + moved) for k, (p, s, e) in windows.items()},
                                    slack)
        assert len(bounds) == 300 and not sum(why.values()), (moved, why)
        return {k: next(c for c in cycles if c[0] <= s and e <= c[1]) for k, (s, e) in bounds.items()}

    paired = cycle_of(0)
    assert cycle_of(-40_000) == paired == cycle_of(40_000)
    cycles = sorted(paired.values())
    assert len(set(cycles)) == 300 and all(a[1] <= b[0] for a, b in zip(cycles, cycles[1:]))
