"""The cluster harness on real servers, namespaces, cgroups and qdiscs: TPC-H answers through the
coordinator equal the official ones, the nodes are capped and linked as asked, and nothing survives
the harness: not its exit, not SIGTERM, not kill -9 followed by `clean`."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mwinv.cluster import harness
from mwinv.cluster.harness import Cluster, NodeCaps
from mwinv.cluster.net import leftovers
from mwinv.workloads import tpch

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces, cgroups)")


def _traces_of(tag: str) -> dict:
    """Everything of cluster `tag` that exists on this host."""
    spaces, links = leftovers({tag})
    cgroups = [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/mwinv/cl-{tag}-*")]
    dirs = [str(p) for p in Path("/tmp").glob(f"mwinv-pg-cl-{tag}-*")]
    procs = subprocess.run(["pgrep", "-f", f"mwinv-pg-cl-{tag}-"], capture_output=True, text=True).stdout.split()
    return {k: v for k, v in dict(netns=spaces, links=links, cgroups=cgroups, dirs=dirs, procs=procs).items() if v}


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=2, scale=0.01, node_caps=NodeCaps(cpu=0.5, memory_mb=384, link_mbit=200)) as cl:
        yield cl
    assert _traces_of(cl.tag) == {}


def test_answers_equal_the_official_ones(cluster):
    runs = cluster.run_queries(list(tpch.QUERY_NUMBERS), keep_results=True)
    assert [r.error for r in runs if r.error] == []
    problems = [p for r in runs for p in tpch.compare_result(r.query, 0.01, r.result)]
    assert problems == []


def test_fact_tables_are_spread_and_dimensions_replicated(cluster):
    counts = cluster.row_counts
    for t in ("lineitem", "orders"):
        parts = [counts[t][n] for n in cluster.data_nodes]
        assert sum(parts) == counts[t]["coordinator"] and min(parts) > 0.4 * max(parts), (t, counts[t])
    for t in ("customer", "part", "nation"):
        assert len(set(counts[t].values())) == 1, (t, counts[t])
    with cluster.coordinator.connect("tpch") as conn:
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN (VERBOSE) SELECT o_orderpriority, count(*) FROM orders JOIN lineitem ON l_orderkey = o_orderkey "
            "GROUP BY o_orderpriority").fetchall())
    # partitionwise join pushed down: each node joins its own partitions of orders and lineitem
    for node in cluster.data_nodes:
        assert f"Relations: (public.orders_{node} " in plan and f"INNER JOIN (public.lineitem_{node} " in plan, plan


def test_nodes_are_capped_and_linked(cluster):
    for node in cluster.data_nodes:
        pid = cluster.servers[node].postmaster_pid()
        cpu_path = next(path for _, ctrls, path in (line.split(":", 2) for line in
                        Path(f"/proc/{pid}/cgroup").read_text().splitlines()) if "cpu" in ctrls.split(","))
        quota = int(Path(f"/sys/fs/cgroup/cpu{cpu_path}/cpu.cfs_quota_us").read_text())
        assert quota == 50_000, cpu_path
        link = cluster.net.links[node]
        qdisc = subprocess.run(["tc", "qdisc", "show", "dev", link.host_if], capture_output=True, text=True).stdout
        assert "tbf" in qdisc and "200Mbit" in qdisc, qdisc
        assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")   # the node's server lives in its own namespace


def _start_up_process(*extra: str) -> tuple[subprocess.Popen, str]:
    """`mwinv cluster up` in a child process; returns it and the cluster's tag once its load began."""
    before = {f.stem for f in harness.STATE_DIR.glob("*.json")} if harness.STATE_DIR.exists() else set()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "mwinv"), "cluster", "up", "--nodes", "2", "--scale", "0.1",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    for line in proc.stdout:
        if "load lineitem" in line or time.monotonic() > deadline:
            break
    tags = {f.stem for f in harness.STATE_DIR.glob("*.json")} - before
    assert len(tags) == 1, tags
    return proc, tags.pop()


def test_sigterm_during_load_removes_everything():
    proc, tag = _start_up_process()
    assert _traces_of(tag), "the cluster was not up to its load"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "Traceback" not in out, out
    assert _traces_of(tag) == {}
    assert not (harness.STATE_DIR / f"{tag}.json").exists()


def test_kill_9_then_clean_removes_everything():
    proc, tag = _start_up_process()
    state = json.loads((harness.STATE_DIR / f"{tag}.json").read_text())
    assert len(state["servers"]) == 3
    proc.kill()
    proc.wait()
    assert _traces_of(tag)   # servers, namespaces, links and cgroups outlive a kill -9
    removed = harness.clean()
    assert any(tag in r for r in removed), removed
    for _ in range(20):   # the postmasters' children exit after their parent
        if not _traces_of(tag):
            break
        time.sleep(0.5)
    assert _traces_of(tag) == {}
