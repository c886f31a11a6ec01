"""Storage back-ends as an experiment factor (mwinv/cluster/storage.py), on real parts: a data node's
tables on sshfs served by sshd/sftp-server in another namespace over the node's capped link, the
answers unchanged, and no mount, daemon or directory left after the level, after SIGTERM of an
experiment run, or after kill -9 and `mwinv clean`."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mwinv import serverdir
from mwinv.cgroup import drop_page_cache
from mwinv.cluster import harness, storage
from mwinv.cluster.capture import ClusterCapture
from mwinv.cluster.harness import Cluster, NodeCaps
from mwinv.correlator.pipeline import correlate
from mwinv.errors import MwinvError
from mwinv.experiment.plan import load_plan
from mwinv.workloads import tpch

EXES = storage.DAEMON_EXES | storage.CLIENT_EXES


def _left(tag: str) -> dict:
    """What a storage back-end of cluster `tag` left: mounts, live processes of its cgroups, its directory."""
    root = serverdir.root() / "storage" / tag
    mounts = [p for p, _ in storage._mounts() if p == str(root) or p.startswith(f"{root}/")]
    procs = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            groups = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            continue
        if state != "Z" and comm in EXES and f"/mwinv/cl-{tag}-" in groups:
            procs.append(f"{pid} {comm}")
    return {k: v for k, v in dict(mounts=mounts, procs=procs, dir=[str(root)] if root.exists() else []).items() if v}


def test_levels_are_checked_when_the_plan_is_read(tmp_path):
    for bad, said in (('"nfs"', "'nfs' is not local, sshfs, glusterfs or glusterfs:K"),
                      ('"glusterfs:9"', "'glusterfs:9' is not local"), ('"sshfs:2"', "'sshfs:2' is not local"),
                      ('"local,read_ahead_kb=512"', "'local,read_ahead_kb=512' is not local"),
                      ('"sshfs,read_ahead_kb=0"', "'sshfs,read_ahead_kb=0' is not local"), ("1", "1 is not local")):
        plan = tmp_path / "p.toml"
        plan.write_text(f"scale = 0.01\nqueries = [6]\n[factors]\nstorage = [\"local\", {bad}]\n")
        with pytest.raises(MwinvError) as exc:
            load_plan(plan)
        assert str(exc.value).startswith(f"{plan}: [factors] storage: {said}"), exc.value
        assert "\n" not in str(exc.value)
    levels = ["local", "sshfs", "glusterfs:3", "glusterfs:3,read_ahead_kb=4096"]
    plan.write_text(f'scale = 0.01\nqueries = [6]\n[factors]\nstorage = {levels}\n'.replace("'", '"'))
    assert [c.levels["storage"] for c in load_plan(plan).cells()] == levels
    assert storage.read_ahead_kb(levels[3]) == 4096 and storage.read_ahead_kb(levels[2]) is None
    assert storage.parse("glusterfs") == ("glusterfs", 2) and storage.parse("sshfs") == ("sshfs", 1)


def test_missing_programs_are_one_line_before_anything_starts(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MwinvError, match=r"^storage sshfs: sshfs, .* not installed \(make deps\)$"):
        storage.check_tools(["local", "sshfs"])


def _q6(server) -> list:
    with server.connect("tpch") as conn:
        return conn.execute(tpch.query_sql(6)).fetchall()


def test_sshfs_end_to_end(tmp_path):
    caps = NodeCaps(cpu=0.5, memory_mb=384, link_mbit=200)
    with Cluster(nodes=1, scale=0.01, node_caps=caps) as cl:
        d1 = cl.servers["d1"]
        local = _q6(cl.coordinator)
        cl.set_storage("sshfs,read_ahead_kb=1024")   # the mount's own readahead, set on its bdi
        rec = cl.storage_in_force()
        s1 = cl.storage.nodes["s1"]
        assert rec["data_nodes"]["d1"]["served_by"] == ["s1"] and rec["data_nodes"]["d1"]["relations"] >= 16
        assert rec["storage_nodes"]["s1"]["caps"]["cpu"] == 0.5 and rec["storage_nodes"]["s1"]["link_mbit"] == 200
        # what governs the mount's readahead (kernel.readahead's advice for a FUSE scan): its own bdi
        dev = os.stat(cl.storage.mounts["d1"]).st_dev
        bdi = rec["data_nodes"]["d1"]["bdi"]
        assert bdi == f"{os.major(dev)}:{os.minor(dev)}" and "allow_other" in rec["data_nodes"]["d1"]["fuse_options"]
        assert rec["data_nodes"]["d1"]["read_ahead_kb"] == 1024 == int(Path(f"/sys/class/bdi/{bdi}/read_ahead_kb").read_text())
        # the tables' files are on the serving side, written by sftp-server as postgres
        files = [p for p in (s1.dir / "export").rglob("*") if p.is_file()]
        assert len(files) >= 16 and {p.stat().st_uid for p in files} == {storage._postgres()[0]}
        # sshd serves in s1's namespace, the client runs in d1's cgroup; its bytes cross both links
        sshd = [pid for pid in map(int, (s1.cgroup.path("cpu") / "cgroup.procs").read_text().split())
                if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd"]
        assert sshd and os.stat(f"/proc/{sshd[0]}/ns/net").st_ino == os.stat(f"/run/netns/{s1.netns}").st_ino
        with ClusterCapture(cl, tmp_path / "cap", stacks=True) as cap:
            before = cl.storage.counters()
            drop_page_cache()
            t0 = time.monotonic_ns()
            assert _q6(cl.coordinator) == local
            t1 = time.monotonic_ns()
            mid = cl.storage.counters()   # as the runner reads them after each query of a one-stream pass
            with cl.coordinator.connect("tpch") as conn:   # Q11: partsupp, a sixth of lineitem's bytes
                conn.execute(tpch.query_sql(11)).fetchall()
            t2 = time.monotonic_ns()
            after = cl.storage.counters()
            cap.capture.update_manifest(storage_counters={"start": before, "end": after, "marks": [before, mid, after]})
        served = after["storage_nodes"]["s1"]["from_node_bytes"] - before["storage_nodes"]["s1"]["from_node_bytes"]
        lineitem = sum(p.stat().st_size for p in files)
        assert served > 0.3 * lineitem, (served, lineitem)   # lineitem is most of it; a cold Q6 reads it all
        assert after["storage_nodes"]["s1"]["cpu_ns"] > before["storage_nodes"]["s1"]["cpu_ns"]
        # the data node's scan slept on its FUSE tablespace: remote storage, split over the blocks
        db = correlate(tmp_path / "cap")
        sid, sid11 = (db.sql("SELECT statement_id FROM statement_clean WHERE node = 'coord' AND start_ns >= $1 "
                             "AND end_ns <= $2 ORDER BY end_ns - start_ns DESC LIMIT 1", [a, b]).fetchone()[0]
                      for a, b in ((t0, t1), (t1, t2)))
        got = storage.attribute(db, [sid, sid11])
        db.con.close()
        st, st11 = got["statements"][str(sid)], got["statements"][str(sid11)]
        assert st["by_node"]["d1"] > 0 and {"link", "daemons", "client"} <= set(st["split_ns"]), got
        assert got["bound"] in got["kinds"] and got["backend"] == "sshfs,read_ahead_kb=1024"
        # each statement split over its own blocks' work, read around it, not the pass's: Q6's link carried
        # lineitem, Q11's partsupp
        assert st["split_basis"] == st11["split_basis"] == "statement", got
        assert st["busy_ns"]["link"] > 2 * st11["busy_ns"]["link"] > 0, got
        assert abs(sum(st["split_ns"].values()) - st["remote_ns"]) <= len(st["split_ns"]), got
        tag = cl.tag
        cl.set_storage("local")
        assert _left(tag) == {}
        with d1.connect("tpch") as conn:
            assert conn.execute("SELECT count(*) FROM pg_tablespace WHERE spcname = %s", [storage.TABLESPACE]).fetchone()[0] == 0
        assert _q6(cl.coordinator) == local
        assert "s1" not in cl.net.links and not Path(f"/run/netns/{s1.netns}").exists()
        # the next cell's storage node: the same address, a new MAC (the old one cached, its set-up took
        # 71 s, or sshd was not reached in 10 s)
        t0 = time.monotonic()
        cl.set_storage("sshfs")
        assert time.monotonic() - t0 < 30 and _q6(cl.coordinator) == local
        cl.set_storage("local")
    assert _left(tag) == {}


def test_a_remote_wait_split_by_following_its_tcp_connections(tmp_path):
    """A cold Q6 on sshfs while a stray reader in the storage node's cgroup reads another file: the
    processes that served d1 are found by the TCP connection its ssh holds (sshd's session holds the
    same 4-tuple reversed, sftp-server under it), so the disk's part counts their reads, not the stray
    ones the cgroup's counters mix in; the link is what remains of the wait."""
    caps = NodeCaps(cpu=0.5, memory_mb=384, read_mbps=20, link_mbit=200)
    with Cluster(nodes=1, scale=0.01, node_caps=caps) as cl:
        cl.set_storage("sshfs")
        s1, d1_address = cl.storage.nodes["s1"], cl.address("d1")
        stray = s1.dir / "stray"
        with open(stray, "xb") as f:
            f.write(os.urandom(6 << 20))
        with ClusterCapture(cl, tmp_path / "cap", stacks=True) as cap:
            drop_page_cache()
            before = cl.storage.counters()
            reader = subprocess.Popen(s1.cgroup.exec_prefix() + ["dd", f"if={stray}", "of=/dev/null", "bs=1M"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            t0 = time.monotonic_ns()
            _q6(cl.coordinator)
            t1 = time.monotonic_ns()
            assert reader.wait(timeout=30) == 0
            after = cl.storage.counters()
            cap.capture.update_manifest(storage_counters={"start": before, "end": after, "marks": [before, after]})
        files = sum(p.stat().st_size for p in (s1.dir / "export").rglob("*") if p.is_file())
        db = correlate(tmp_path / "cap")
        sid = db.sql("SELECT statement_id FROM statement_clean WHERE node = 'coord' AND start_ns >= $1 AND end_ns <= $2 "
                     "ORDER BY end_ns - start_ns DESC LIMIT 1", [t0, t1]).fetchone()[0]
        got = storage.attribute(db, [sid])
        db.con.close()
        cl.set_storage("local")
    st = got["statements"][str(sid)]
    assert st["split_by"] == "tcp", st
    served = st["links"]["d1"]["storage_nodes"]["s1"]
    (conn, pid), = served["connections"].items()
    assert conn.startswith(f"{d1_address}:") and conn.endswith(f" -> {s1.address}:{storage.SSH_PORT}"), served
    assert f"sshd {pid}" in served["serving"] and any(p.startswith("sftp-server ") for p in served["serving"]), served
    # the scan's reads are sftp-server's; the cgroup's counter also holds the stray 6 MiB
    counted = after["storage_nodes"]["s1"]["disk_read_bytes"] - before["storage_nodes"]["s1"]["disk_read_bytes"]
    assert served["read_bytes"] > 0.3 * files and counted - served["read_bytes"] > 0.9 * (6 << 20), (served, counted)
    assert st["busy_ns"]["disk"] - st["linked_busy_ns"]["disk"] > 0.9 * (6 << 20) / 20e6 * 1e9, st
    split = st["split_ns"]
    assert sum(split.values()) == st["remote_ns"] > 0 and split["disk"] > 0 and split["daemons"] > 0, st
    assert sum(st["counter_split_ns"].values()) <= st["remote_ns"], st


def _child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _tag_when(proc: subprocess.Popen, marker: str) -> tuple[str, str]:
    """The cluster tag in the line that says `marker`, once the child printed it."""
    seen = []
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        seen.append(line)
        if marker in line or time.monotonic() > deadline:
            break
    tag = next((p for line in seen for p in line.split("/") if re.fullmatch(r"[0-9a-f]{6}", p)), None)
    assert tag and marker in seen[-1], "".join(seen)
    return tag, "".join(seen)


def test_sigterm_of_an_experiment_removes_mounts_and_daemons(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text('scale = 0.01\nqueries = [6]\nrepetitions = 50\n[factors]\nnodes = [1]\nstorage = ["sshfs"]\n')
    proc = subprocess.Popen([str(Path(sys.executable).parent / "mwinv"), "experiment", "run", str(plan), "-o",
                             str(tmp_path / "out")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tag, out = _tag_when(proc, "capture of node")
    assert _left(tag)["mounts"] and _left(tag)["procs"], out
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in rest, out + rest
    assert _left(tag) == {}
    assert not list(Path("/sys/fs/cgroup/cpu/mwinv").glob(f"cl-{tag}-*"))


def test_kill_9_then_clean_removes_mounts_and_daemons():
    proc = _child("""
        import time
        from mwinv.cluster.harness import Cluster
        cl = Cluster(nodes=1, scale=0.01, progress=lambda s: print(s, flush=True)).up()
        cl.set_storage("sshfs")
        print("ready", cl.storage.root, flush=True)
        time.sleep(600)
        """)
    tag, out = _tag_when(proc, "ready")
    left = _left(tag)
    assert left["mounts"] and left["procs"] and left["dir"], out
    proc.kill()
    proc.wait()
    assert _left(tag)["procs"]   # the daemons and the FUSE client outlive a kill -9
    removed = harness.clean()
    assert any(tag in r for r in removed), removed
    assert _left(tag) == {}
    assert not [ns for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
                if tag in ns]


def test_a_page_read_of_a_fuse_file_with_a_64_bit_inode(tmp_path):
    """GlusterFS hands out inode numbers above 2**63 (13820536547798011712 on a volume here); page_read
    cast them to BIGINT and the whole correlation of a GlusterFS cell failed."""
    from mwinv.capture.tables import Capture
    from mwinv.kernel_trace.syscalls import numbers

    cap = Capture(tmp_path / "capture").create(node="n1")
    pid, t0, ms, pread = 1000, 1_000_000_000, 1_000_000, numbers("pread64")[0]
    cap.write_part("statement", [dict(node="n1", dbms="postgresql", pid=pid, statement_id=1, query_id=1,
                                      query_text_hash=1, start_ns=t0, end_ns=t0 + 10 * ms, nesting_level=0,
                                      errored=False)], node="n1")
    cap.write_part("statement_text", [dict(query_text_hash=1, query_id=1, text="scan")], node="n1")
    events = [dict(ts_ns=t0 - ms, pid=0, event="sched_switch", prev_pid=0, prev_state="R", next_pid=pid),
              dict(ts_ns=t0 + ms, pid=pid, event="sys_enter", syscall_nr=pread),
              dict(ts_ns=t0 + 2 * ms, pid=pid, event="mm_filemap_add_to_page_cache", dev="0,47",
                   fields=f"ino={2**64 - 5}", sector=0, nr_bytes=4096),
              dict(ts_ns=t0 + 3 * ms, pid=pid, event="sys_exit", syscall_nr=pread, syscall_ret=4096),
              dict(ts_ns=t0 + 200 * ms, pid=0, event="sched_switch", prev_pid=0, prev_state="R", next_pid=pid)]
    cap.write_part("kernel_event", [dict(e, node="n1", cpu=0) for e in events], node="n1")
    db = correlate(cap.path, write=False)
    assert db.sql("SELECT ino FROM page_read").fetchall() == [(2**64 - 5,)]


def test_the_experiment_report_shows_the_storage_factor(tmp_path):
    """The report of a recorded storage experiment (tests/golden/experiment_storage: 4 cells, one per back-end,
    see SOURCES.md): the back-end is a factor of its own (a cell column, a sweep), not four cells that look alike
    in every factor, and a section gives per query the remote wait split over the blocks and the bound."""
    import shutil

    from mwinv.experiment.report import render

    out = tmp_path / "exp"
    shutil.copytree(Path(__file__).parent / "golden" / "experiment_storage", out)
    html, md = render(out)
    text = md.read_text()
    cells = [ln.split(" | ")[12] for ln in text.splitlines() if re.match(r"\| [0-9a-f]{10} \|", ln)]
    assert sorted(cells) == ["glusterfs", "glusterfs:4", "local", "sshfs"], text
    sweeps = [ln for ln in text.split("## One-factor sweeps")[1].split("##")[0].splitlines()
              if ln.startswith("| ") and not ln.startswith("| factor |")]
    # before: every fixed factor (node_cpu, link_mbit, ...) was a "sweep" over 4 alike levels
    assert {ln.split(" | ")[0][2:] for ln in sweeps} == {"storage"}, sweeps
    assert "| storage | all cells | Q1 | local | " in text
    section = text.split("## Storage back-ends")[1]
    # recorded before the per-statement readings: split over the pass
    assert "| sshfs | Q1 | 4,832 ms | 3,868 ms | 980 ms | 206 ms | 2,472 ms | 210 ms | pass |" in section
    assert "| local | Q1 | 4,669 ms | - |" in section and section.count("| - | - | - | - | - | - |") == 3
    bounds = re.findall(r"^(\S+) \(cell [0-9a-f]+\): bound by \*\*(\w+)\*\* .* busiest block (disk of s\d)", section, re.M)
    assert sorted(bounds) == [("glusterfs", "disk", "disk of s2"), ("glusterfs:4", "disk", "disk of s2"),
                              ("sshfs", "disk", "disk of s1")], section
    page = html.read_text()
    assert "<h2" in page and ">Storage back-ends</h2>" in page
    assert re.search(r'<svg class="bar"[^>]*aria-label="Q1 sshfs: 4,832\.5 ms"><rect[^>]*fill="#59a14f"><title>link: ',
                     page)


def test_the_storage_bound_is_the_critical_path_when_bricks_work_at_once():
    """The cold scan of lineitem (Q1) of the readahead run (tests/golden/experiment_storage_ra: the three cells'
    manifests, see SOURCES.md). With FUSE's 128 KiB window the 4 bricks serve in turn and their disks' sum is
    the path; with 4 MiB two shards are in flight, and the sum (4,687 ms) is longer than the query's whole
    window between the counters' readings before and after it (3,860 ms): no serial path fits. The bound is
    the critical path: the sum over the shards in flight, never below the busiest brick."""
    import json

    got = {}
    for p in sorted((Path(__file__).parent / "golden" / "experiment_storage_ra").glob("*.manifest.json")):
        m = json.loads(p.read_text())
        rec, marks = m["storage"], m["storage_counters"]["marks"]
        bl = storage.blocks(m)
        kinds = storage.kind_busy(bl, set(rec["storage_nodes"]), storage.shards_in_flight(rec))
        disk = kinds["disk"]
        got[rec["backend"]] = (disk["in_flight"], disk["summed_ns"] // 10**6, disk["busy_ns"] // 10**6,
                               disk["busiest_ns"] // 10**6, (marks[1]["at_ns"] - marks[0]["at_ns"]) // 10**6)
        assert disk["busiest_ns"] <= disk["busy_ns"] <= marks[1]["at_ns"] - marks[0]["at_ns"], (rec["backend"], disk)
        if rec["backend"].endswith("4096"):
            text = "\n".join(storage.markdown({"queries": [], "backends": [
                {"cell": p.name[:10], "backend": rec["backend"], "kinds": kinds, "bound": "disk", "blocks": bl}]}))
    assert got == {"glusterfs:4,read_ahead_kb=4096": (2.0, 4686, 2343, 2110, 3860),
                   "glusterfs:4": (1.031, 4658, 4517, 1490, 5733),
                   "sshfs": (1.0, 4634, 4634, 4634, 5447)}
    assert "bound by **disk** (2,343 ms busy: 4,687 ms summed over 2 shards in flight; its busiest block disk of " \
           "s2, 2,110 ms)" in text, text


def test_the_split_linked_by_tcp_on_recorded_cells():
    """The cold Q1 of a recorded sshfs and a GlusterFS cell (tests/golden/experiment_storage_tcp: their manifests
    with the readings around Q1, its window and its attribution, see SOURCES.md): the snapshots link d1's client
    to sshd's session with sftp-server under it, and to both bricks and glusterd (the volfile connection), whose
    reads are the disks'; the split they give is the one recorded, the link what remains of the wait."""
    import json

    golden = Path(__file__).parent / "golden" / "experiment_storage_tcp"
    got = {}
    for p in sorted(golden.glob("*.manifest.json")):
        m = json.loads(p.read_text())
        cell = p.name.split(".")[0]
        (sid, st), = json.loads((golden / f"{cell}.storage.json").read_text())["statements"].items()
        window = json.loads((golden / f"{cell}.windows.json").read_text())[sid]
        marks = m["storage_counters"]["marks"]
        linked = storage.storage_link.work(marks[0]["connections"], marks[1]["connections"])
        served = linked["d1"]["storage_nodes"]
        got[m["storage"]["backend"]] = {s: ([x.split()[0] for x in w["serving"]], w["read_bytes"] >> 20)
                                        for s, w in sorted(served.items())}
        split, _ = storage.linked_split(m, linked, st["by_node"], window, storage.shards_in_flight(m["storage"]))
        assert st["split_by"] == "tcp" and split == st["split_ns"], (split, st)
        assert split["link"] == st["remote_ns"] - split["daemons"] - split["disk"] - split["client"]
    assert got == {"sshfs": {"s1": (["sftp-server", "sshd"], 88)},
                   "glusterfs": {"s1": (["glusterd", "glusterfsd"], 48), "s2": (["glusterfsd"], 40)}}, got
