"""The n-tier scenario end to end on real parts (docs/ntier.md): a primary, two streaming replicas and
pgpool-II, each in a network namespace of its own, the bulletin board's browse mix by pgbench over two
short load levels; the distributions, links, tiers, the rare heavy search found with its plan and the
advised index checked; the report in headless Chromium; a plan with link and disk caps and weights per
replica count; a pgpool that does not start, a replica killed mid-run, a run ended by SIGTERM and one
killed with -9."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from mwinv import serverdir
from mwinv.cluster.net import leftovers
from mwinv.errors import MwinvError
from mwinv.kernel_trace.tracefs import pid_alive
from mwinv.ntier.pgpool import PGPOOL, PgPool
from tests.browser import dump_dom, needs_chromium

MWINV = str(Path(sys.executable).parent / "mwinv")
pytestmark = pytest.mark.skipif(not os.path.exists(PGPOOL), reason="pgpool-II is not installed (make deps)")
SMALL = ["--users", "200", "--stories", "500", "--comments", "3000", "--ramp-up", "0", "--ramp-down", "0"]


def _records_of(pid: int) -> list[Path]:
    return [b for b, r in serverdir.server_records() if (r.get("owner") or {}).get("pid") == pid]


def _pgpool_pids() -> set[int]:
    return {int(p) for p in os.listdir("/proc") if p.isdigit() and _exe(p) == PGPOOL}


def _netns_and_links(tag: str) -> tuple[list[str], list[str]]:
    """What of a run's network is left: its namespaces and links, and its state file."""
    spaces, links = leftovers({tag})
    return spaces + links + [str(f) for f in serverdir.clusters_dir().glob(f"{tag}.json")], links


def _cgroups(tag: str) -> list[Path]:
    return list(Path("/sys/fs/cgroup").glob(f"*/mwinv/cl-{tag}-*"))


def _exe(pid: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ntier") / "out"
    before = _pgpool_pids()
    proc = subprocess.Popen([MWINV, "ntier", "run", "--replicas", "2", "--clients", "2,4", "--ramp-up", "1", "--run",
                             "3", "--ramp-down", "1", "--check-advice", "--trace", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    return out, stdout, stderr, proc.pid, before


def test_scale_out_end_to_end(run):
    out, stdout, stderr, pid, before = run
    assert not _records_of(pid) and _pgpool_pids() <= before, "servers or pgpool left behind"
    record = json.loads((out / "ntier.json").read_text())
    assert not _netns_and_links(record["tag"])[0], "namespaces, links or the state file left behind"
    # each tier in a namespace of its own on the bridge: its own address, its veth's end
    links = record["links"]
    assert set(links) == {"primary", "r1", "r2", "pgpool"} and len({v["address"] for v in links.values()}) == 4
    d = json.loads((out / "distributions.json").read_text())
    assert [lv["clients"] for lv in d["levels"]] == [2, 4]
    for page, levels in d["pages"].items():
        for s in levels.values():
            assert s["n"] > 0 and s["p50_ns"] <= s["p90_ns"] <= s["p99_ns"] <= s["max_ns"], (page, s)
            assert sum(b[2] for b in s["histogram"]) == s["n"]
    for lv in d["levels"]:
        # the reads went to the replicas, none to the primary (weight 0); every client's session linked
        # through its pgpool child to the one replica whose backend ran its statements (which replicas
        # the sessions land on is pgpool's random draw: 2 sessions were both on r1 in one run)
        assert lv["db_busy_by_node"] and set(lv["db_busy_by_node"]) <= {"r1", "r2"}, lv
        assert lv["pgpool_select_cnt"]["node 0 (primary)"] == 0, lv
        assert sum(lv["sessions_by_node"].values()) == lv["clients"], lv
        assert set(lv["sessions_by_node"]) == set(lv["db_busy_by_node"]), lv
    story = [q for q, t in d["texts"].items() if t.startswith("SELECT s.title, s.body")]
    assert story and set(d["statements"][story[0]]["all"]["nodes"]) <= {"r1", "r2"}
    assert d["round_trip"]["all"]["n"] > 0 and 0 < d["round_trip"]["all"]["p50_ns"] < 5e6
    # the time in pgpool from its kernel trace: every execution on a replica found from pgpool's side by its
    # backend connection, inside the forward and the reply; pgpool's own time bounded by its CPU (schedstat)
    b = d["balancer"]
    assert b["statements"] > 100 and b["inside"] >= 0.99 * b["statements"], b   # a level's edges may cut a few
    executed = sum(v["all"]["n"] for v in d["statements"].values())
    assert 0.99 * executed <= sum(v["all"]["n"] for v in b["own"].values()) <= executed
    assert story[0] in b["own"] and all(0 < v["all"]["p50_ns"] < 5e6 for v in b["own"].values())
    for k in b["check"].values():
        assert 0.3 <= k["own_of_run"] and k["own_ns"] <= k["run_ns"] + k["runqueue_ns"], b["check"]
    assert "## Time in pgpool, per statement" in stdout
    assert set(d["tiers"]) == {"primary", "r1", "r2", "pgpool"}
    for lv in d["levels"]:   # links (their veths): pgpool and the replicas that served the level moved the answers
        for node in [*lv["db_busy_by_node"], "pgpool"]:
            u = d["tiers"][node]["levels"][str(lv["clients"])]
            assert u["net_mb_s"] > 0 and u["disk_read_mb_s"] >= 0 and u["disk_write_mb_s"] >= 0, (node, u)
    heavy = d["rare_heavy"]
    assert len(heavy) == 1 and "LIKE 'subject" in heavy[0]["text"] and heavy[0]["ratio"] >= 10, heavy
    assert heavy[0]["frequency"] <= 0.05 and heavy[0]["db_share"] >= 0.1
    ev = " ".join(heavy[0]["evidence"])
    assert "Seq Scan on comments" in ev and re.search(r"checked: with the advised index, on r\d: .*Index", ev), ev
    assert any("text_pattern_ops" in a and "comments" in a for a in heavy[0]["advice"])
    assert any("keyset pagination instead of OFFSET 40" in a for a in heavy[0]["advice"])
    csv = (out / "distributions.csv").read_text().splitlines()
    assert csv[0].startswith("source,clients,key") and any(r.startswith("page,4,story,") for r in csv)
    assert "## Rare heavy statements" in stdout and "orders of magnitude" in stdout


@needs_chromium
def test_report_charts_render_in_chromium(run):
    dom = dump_dom(run[0] / "report.html")
    assert dom.count('class="chart histogram"') >= 4 and dom.count('class="bin"') >= 8 and "<polyline" in dom


def test_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('kind = "ntier"\n[factors]\nreplicas = [1, 4]\n')
    unweighted = tmp_path / "unweighted.toml"
    unweighted.write_text('kind = "ntier"\n[factors]\nreplicas = [1, 3]\nweights = [{1 = [1], 2 = [1, 3]}]\n')
    for argv, said in ((["run", "--clients", "0"], "--clients 0: load levels of 1 to 64 clients"),
                       (["run", "--weights", "1"], "weights 1: one per replica (2)"),
                       (["run", "--replicas", "4"], "--replicas 4: 1 to 3"),
                       (["run", "--replicas", "1,3", "--weights", "2,1"], "weights 2,1: one per replica (3)"),
                       (["run", "--link-mbit", "0"], "--link-mbit 0: 0.1 to 100000 Mbit/s"),
                       (["report", str(tmp_path)], "no ntier.json"),
                       (["plan", str(bad), "--out", str(tmp_path / "o")],
                        "bad.toml: cell replicas=4: --replicas 4: 1 to 3"),
                       (["plan", str(unweighted), "--out", str(tmp_path / "o")],
                        "cell replicas=3 weights=1:1;2:1,3: weights {1 = ..., 2 = ...}: no list for 3 replicas")):
        r = subprocess.run([MWINV, "ntier", *argv], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and said in r.stderr, r.stderr


def test_a_plan_of_replicas_through_experiment_run(tmp_path):
    """Replicas as a factor of an `mwinv experiment` plan (kind = "ntier") with weights per replica count
    and every tier's link capped: a run per cell, the results table per cell and load level, the
    bottleneck map naming pgpool's link (its veth carries both hops) saturated against its capacity and
    the replicas' disk read cap in their cgroups; run again, the cells done are analysed, not run."""
    plan, out = tmp_path / "plan.toml", tmp_path / "out"
    size = dict(zip(SMALL[::2], SMALL[1::2]))
    plan.write_text('kind = "ntier"\nname = "two"\nclients = [2]\n[scenario]\nrun_s = 2\nramp_up_s = 0\n'
                    f'ramp_down_s = 0\nusers = {size["--users"]}\nstories = {size["--stories"]}\n'
                    f'comments = {size["--comments"]}\nlink_mbit = 1\nreplica_read_mbps = 50\n'
                    '[factors]\nreplicas = [1, 2]\nweights = [{1 = [1], 2 = [1, 3]}]\n')
    r = subprocess.run([MWINV, "experiment", "run", str(plan), "-o", str(out)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    cells = json.loads((out / "results.json").read_text())["cells"]
    labels = {"replicas=1 weights=1:1;2:1,3", "replicas=2 weights=1:1;2:1,3"}
    assert set(cells) == labels and not any(c["error"] for c in cells.values()), cells
    for c in cells.values():
        b = c["2"]["bottleneck"]
        assert c["2"]["pages_per_s"] > 0 and b["saturated"] and "link" in b["resources"]["pgpool"], b
    runs = {json.loads(d.joinpath("ntier.json").read_text())["config"]["replicas"]:
            (json.loads(d.joinpath("ntier.json").read_text()), json.loads(d.joinpath("distributions.json").read_text()))
            for d in out.glob("cell-*")}
    assert {r: set(d["tiers"]) for r, (_, d) in runs.items()} == {1: {"primary", "r1", "pgpool"},
                                                                  2: {"primary", "r1", "r2", "pgpool"}}
    # each count its own weights, as pgpool held them (SHOW pool_nodes: the primary 0, then 1:3)
    assert [rec["config"]["weights"] for rec, _ in (runs[1], runs[2])] == [[1], [1, 3]]
    assert [float(n["lb_weight"]) for n in runs[2][0]["levels"][0]["pgpool_nodes"]] == [0, 0.25, 0.75]
    for rec, d in runs.values():
        pgpool = d["tiers"]["pgpool"]
        assert pgpool["capacity_mb_s"]["link"] == 0.125 and pgpool["levels"]["2"]["link"]["saturated"], pgpool
        assert 0 < pgpool["levels"]["2"]["net_mb_s"] <= 2 * 0.125 * 1.2, pgpool   # both ways under the cap
        assert all(v["read_bps"] == {k: 50_000_000 for k in v["read_bps"]} and v["read_bps"]
                   for n, v in rec["caps"].items() if n.startswith("r")) and "r1" in rec["caps"], rec["caps"]
        assert d["tiers"]["r1"]["capacity_mb_s"]["disk"] == 50 and d["tiers"]["r1"]["levels"]["2"]["disk"]["samples"]
    again = subprocess.run([MWINV, "experiment", "run", str(plan), "-o", str(out)], capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0 and again.stderr.count("done before, analysed again") == 2, again.stderr[-2000:]
    assert json.loads((out / "results.json").read_text())["cells"] == cells


def test_a_pgpool_that_does_not_start_is_one_line(pg):
    pool = PgPool(primary=pg, replicas=[], max_clients=0)   # pgpool refuses num_init_children = 0
    with pytest.raises(MwinvError, match=r"pgpool did not start \(exit \d+\): .*num_init_children") as exc:
        pool.start()
    assert "\n" not in str(exc.value) and not pool.base_dir.exists()


def _mid_run(out: Path, options: list[str], act) -> tuple[subprocess.Popen, list[str]]:
    """`mwinv ntier run` of 2 replicas at 2 clients, act(proc) once the level started; its exit and the
    lines it said after."""
    proc = subprocess.Popen([MWINV, "ntier", "run", "--replicas", "2", "--clients", "2", "--run", "20", *SMALL,
                             *options, "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if "2 clients: ramp-up" in line:
                break
        act(proc)
        rest = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2 and "Traceback" not in rest, rest[-3000:]
    return proc, [ln for ln in rest.splitlines() if ln.strip()]


def _servers(proc) -> dict[str, Path]:
    """A run's servers by node (server directories pg-cl-<tag>-<node>-<id>)."""
    return {b.name.split("-")[3]: b for b in _records_of(proc.pid) if b.name.startswith("pg-cl-")}


def test_a_replica_that_dies_mid_run(tmp_path):
    def kill_r2(proc):
        time.sleep(1)
        base = _servers(proc)["r2"]
        fd = serverdir.server_pidfd(base / "data" / "postmaster.pid", base / "data", serverdir.PG_EXES)
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        os.close(fd)

    out = tmp_path / "out"
    proc, lines = _mid_run(out, ["--replica-cpu", "1"], kill_r2)
    assert re.fullmatch(r"mwinv: error: replica r2 \(postmaster \d+\) died [\d.]+ s into the 2-client level "
                        rf"\(what was measured is kept in {re.escape(str(out))}\)", lines[-1]), lines[-1]
    record = json.loads((out / "ntier.json").read_text())
    assert record["error"].startswith("replica r2") and (out / "capture" / "manifest.json").exists()
    assert not _records_of(proc.pid) and not _netns_and_links(record["tag"])[0] and not _cgroups(record["tag"])


def _connect(base: Path):
    """A throw-away server of a running mwinv, through its socket (port: postmaster.pid's 4th line)."""
    port = (base / "data" / "postmaster.pid").read_text().splitlines()[3]
    return psycopg.connect(host=str(base / "sock"), port=port, user="postgres", dbname="postgres", autocommit=True)


def test_a_replica_that_falls_behind(tmp_path):
    """r2's replay paused while the primary writes: its lag grows until the run stops at --max-lag."""
    def pause_r2_and_write(proc):
        servers = _servers(proc)
        with _connect(servers["r2"]) as r2, _connect(servers["primary"]) as primary:
            r2.execute("SELECT pg_wal_replay_pause()")
            primary.execute("CREATE TABLE written (n int)")
            while proc.poll() is None:
                try:
                    primary.execute("INSERT INTO written SELECT generate_series(1, 1000)")
                except psycopg.OperationalError:   # the run stopped and removed its servers
                    break
                time.sleep(0.05)

    out = tmp_path / "out"
    proc, lines = _mid_run(out, ["--max-lag", "1"], pause_r2_and_write)
    said = re.fullmatch(r"mwinv: error: replica r2 fell ([\d.]+) s behind the primary \([\d.]+ MB of WAL not "
                        rf"replayed\) [\d.]+ s into the 2-client level \(what was measured is kept in "
                        rf"{re.escape(str(out))}\)", lines[-1])
    assert said and 1 < float(said.group(1)) < 3, lines[-1]   # checked every 0.5 s
    assert (out / "capture" / "manifest.json").exists() and not _records_of(proc.pid)


def _tag_of(pid: int) -> str:
    """The tag of the network a running `mwinv ntier run` made (its cluster state file names its pid)."""
    return next(json.loads(f.read_text())["tag"] for f in serverdir.clusters_dir().glob("*.json")
                if json.loads(f.read_text()).get("pid") == pid)


def _started(options: list[str]) -> tuple[subprocess.Popen, str]:
    """`mwinv ntier run` of 1 replica, capped, at 1 client, once its level started: it and its tag."""
    proc = subprocess.Popen([MWINV, "ntier", "run", "--replicas", "1", "--clients", "1", "--run", "30", *SMALL,
                             "--replica-cpu", "0.5", "--link-mbit", "100", *options], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if "1 clients: ramp-up" in line:
                break
        tag = _tag_of(proc.pid)
        assert _netns_and_links(tag)[1] and _cgroups(tag), "no links or cgroups while running"
        listed = subprocess.run([MWINV, "cluster", "list"], capture_output=True, text=True, timeout=60,
                                env={**os.environ, "COLUMNS": "200"}).stdout
        assert any(tag in ln and "ntier" in ln and "primary, r1" in ln for ln in listed.splitlines()), listed
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, tag


def test_sigterm_removes_namespaces_links_and_servers(tmp_path):
    """SIGTERM mid-run: the servers, pgpool, cgroups, namespaces, links, bridge and state file all go, and
    what was measured is kept."""
    before = _pgpool_pids()
    proc, tag = _started(["--out", str(tmp_path / "out")])
    proc.terminate()
    rest = proc.stderr.read()
    proc.wait(timeout=60)
    assert proc.returncode != 0 and "Traceback" not in rest, rest[-3000:]
    assert not _netns_and_links(tag)[0] and not _cgroups(tag) and not _records_of(proc.pid)
    assert _pgpool_pids() <= before and (tmp_path / "out" / "capture" / "manifest.json").exists()


def test_a_run_killed_with_9_is_cleaned(tmp_path):
    """pgpool outlives a SIGKILLed mwinv; `mwinv clean` finds it by its pid file (which ends in a NUL), and
    the run's namespaces, links and cgroups by its tag. pgpool's cgroup is said removed only after pgpool,
    the process that holds it, and nothing is said left."""
    proc, tag = _started(["--out", str(tmp_path / "out"), "--pool-cpu", "0.5"])
    try:
        pool = next(b for b in _records_of(proc.pid) if b.name.startswith("pool-"))
        pid = int((pool / "run" / "pgpool.pid").read_bytes().rstrip(b"\0"))
    finally:
        proc.kill()
        proc.wait()
    assert pid_alive(pid)
    r = subprocess.run([MWINV, "clean"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and f"server {pool}" in r.stdout and f"cluster {tag}" in r.stdout, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    pool_group = [i for i, ln in enumerate(lines)
                  if re.fullmatch(rf"cgroup /sys/fs/cgroup/cpu/mwinv/cl-{tag}-pgpool-\w+", ln)]
    assert len(pool_group) == 1 and pool_group[0] > lines.index(f"server {pool}"), r.stdout
    assert not [ln for ln in lines if " is left: " in ln], r.stdout
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(pid) and not pool.exists() and not _records_of(proc.pid)
    assert not _netns_and_links(tag)[0] and not _cgroups(tag)
