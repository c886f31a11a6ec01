"""Each advice rule on a hand-built Evidence record: the evidence that makes it fire, and the evidence
one step short of it, with no capture (no root, no PostgreSQL)."""

from dataclasses import replace
from types import SimpleNamespace

import pytest

from mwinv.engines.postgresql import rules as r
from mwinv.rules import what_ifs

SHARES = {"cpu": 0.0, "disk_seq": 0.0, "disk_random": 0.0, "network": 0.0, "lock": 0.0, "run_queue": 0.0,
          "remote": 0.0, "unexplained": 0.0}
GAINS = {w: 1_000_000 * (i + 1) for i, w in enumerate(what_ifs(4))}  # each what-if its own gain: 1, 2, ... ms


def evidence(shares=None, **kw) -> r.Evidence:
    """A statement of 1 s, one execution, 4 CPUs, a calibrated model, where no rule fires."""
    base = r.Evidence(
        statement_id=7, query_id=70, db_ns=1e9, executions=1, shares={**SHARES, **(shares or {})}, limit="mixed",
        explained=1.0, ns={}, from_workers_ns=0, seq_bytes=0, random_reqs=0, random_bytes=0, net_bytes=0,
        gains=GAINS, model_no_seq_ns=None, model_net_ns=None, disk_rate_bps=100 * 2**20, link_rate_bps=10 * 2**20,
        idle_cpus=None, blocker=None, is_select=True, pid=4242, rows=0, write_bytes=0, jit="on", cpus=4,
        kernel_functions=[], parts=None)
    return replace(base, **kw)


def test_no_rule_fires_on_a_statement_no_resource_holds():
    assert [a for rule in r.RULES if (a := rule(evidence()))] == []


def test_cpu_per_call():
    a = r.cpu_per_call(evidence({"cpu": 0.6}, executions=400))
    assert a.rule == "cpu.per_call" and "400 executions of 2.5 ms each" in a.advice
    assert a.evidence.startswith("over 400 executions: cpu 60% of 1,000.0 ms in the database")
    assert a.expected_gain_ns is None
    assert r.cpu_per_call(evidence({"cpu": 0.6})) is None  # a single execution: not about the calls


def test_cpu_parallel():
    a = r.cpu_parallel(evidence({"cpu": 0.6}))
    assert a.rule == "cpu.parallel" and "max_parallel_workers_per_gather (to 3 here, 4 CPUs)" in a.advice
    assert a.expected_gain_ns == GAINS[("cpu", 4.0)] and a.basis.startswith("model what-if CPU x4")
    assert r.cpu_parallel(evidence({"cpu": 0.6}, from_workers_ns=5)) is None  # already parallel
    assert r.cpu_parallel(evidence({"cpu": 0.2})) is None


def test_cpu_jit():
    a = r.cpu_jit(evidence({"cpu": 0.6}, jit="off"))
    assert a.rule == "cpu.jit" and a.expected_gain_ns == GAINS[("cpu", 1.3)]
    assert a.evidence.endswith("; jit is off in this capture")
    assert r.cpu_jit(evidence({"cpu": 0.6})) is None  # jit on
    assert r.cpu_jit(evidence({"cpu": 0.6}, jit="off", db_ns=400e6)) is None  # too short to compile for


def test_cpu_work_mem():
    a = r.cpu_work_mem(evidence({"cpu": 0.6}, write_bytes=8 * 2**20))
    assert a.rule == "cpu.work_mem" and "spill 8.0 MiB" in a.advice
    assert a.expected_gain_ns == round(2 * 8 / 100 * 1e9)  # written and read back at 100 MiB/s
    assert r.cpu_work_mem(evidence({"cpu": 0.6}, write_bytes=8 * 2**20, is_select=False)) is None  # an UPDATE
    assert r.cpu_work_mem(evidence({"cpu": 0.6}, write_bytes=r.SPILL_BYTES - 1)) is None


def test_cpu_faster():
    a = r.cpu_faster(evidence({"cpu": 0.9}, limit="cpu"))
    assert a.rule == "cpu.faster" and a.expected_gain_ns == GAINS[("cpu", 2.0)]
    assert r.cpu_faster(evidence({"cpu": 0.4})) is None  # CPU is not the limit


def test_disk_seq_bandwidth():
    a = r.disk_seq_bandwidth(evidence({"disk_seq": 0.5}, seq_bytes=300 * 2**20))
    assert a.rule == "disk_seq.bandwidth" and a.evidence == "disk_seq 50% of 1,000.0 ms in the database; 300.0 MiB read sequentially"
    assert a.expected_gain_ns == GAINS[("disk_rate", 2.0)]
    assert r.disk_seq_bandwidth(evidence({"disk_seq": 0.2})) is None


def test_disk_seq_pruning():
    a = r.disk_seq_pruning(evidence({"disk_seq": 0.5}, seq_bytes=100 * 2**20, rows=100))
    assert a.rule == "disk_seq.pruning" and a.evidence.endswith("; 1024 KiB read per returned row")
    assert a.expected_gain_ns == GAINS[("disk_rate", 10.0)]
    assert r.disk_seq_pruning(evidence({"disk_seq": 0.5}, seq_bytes=100 * 2**20, rows=10**6)) is None  # 105 B/row


def test_disk_seq_memory():
    a = r.disk_seq_memory(evidence({"disk_seq": 0.5}, seq_bytes=200 * 2**20))
    assert a.rule == "disk_seq.memory" and "the 200 MiB working set" in a.advice
    assert a.expected_gain_ns == 2_000_000_000  # 200 MiB at 100 MiB/s
    assert r.disk_seq_memory(evidence({"disk_seq": 0.5}, seq_bytes=200 * 2**20, disk_rate_bps=None)) \
        .expected_gain_ns is None  # no calibration, no gain
    assert r.disk_seq_memory(evidence({"disk_seq": 0.5})) is None  # no bytes counted


def test_disk_random_index():
    a = r.disk_random_index(evidence({"disk_random": 0.5}, random_reqs=1200, random_bytes=1200 * 8192))
    assert a.rule == "disk_random.index" and a.evidence.endswith("; 1200 random requests (9.4 MiB)")
    assert a.expected_gain_ns == GAINS[("rand_access", 0.1)]
    assert r.disk_random_index(evidence({"disk_random": 0.2})) is None


def test_disk_random_io_concurrency():
    a = r.disk_random_io_concurrency(evidence({"disk_random": 0.5}))
    assert a.rule == "disk_random.io_concurrency" and a.expected_gain_ns == GAINS[("rand_access", 0.5)]
    assert r.disk_random_io_concurrency(evidence({"disk_random": 0.2})) is None


def test_disk_random_shared_buffers():
    a = r.disk_random_shared_buffers(evidence({"disk_random": 0.5}, random_bytes=64 * 2**20, model_no_seq_ns=4e8))
    assert a.rule == "disk_random.shared_buffers" and "the 64 MiB read at random" in a.advice
    assert a.expected_gain_ns == 400_000_000
    assert r.disk_random_shared_buffers(evidence({"disk_random": 0.5})) is None  # no bytes counted


def test_network():
    # the model sends the bytes in 10 ms, the statement waited 400 ms: round trips, not bandwidth
    slow = r.network(evidence({"network": 0.4}, ns={"network": 400_000_000}, model_net_ns=1e7))
    assert slow.rule == "network.latency" and "would take 10.0 ms" in slow.advice and "waited 400.0 ms" in slow.advice
    assert slow.expected_gain_ns == GAINS[("link_rate", 10.0)]
    busy = r.network(evidence({"network": 0.4}, ns={"network": 400_000_000}, model_net_ns=3.9e8))
    assert busy.rule == "network.bandwidth"
    assert r.network(evidence({"network": 0.1})) is None


def test_lock_wait():
    a = r.lock_wait(evidence({"lock": 0.3}, ns={"lock_wait": 300_000_000}, blocker="backend pid 9 released it"))
    assert a.rule == "lock.wait" and a.advice.startswith("lock waits: backend pid 9 released it. ")
    assert a.evidence == "lock_wait 300.0 ms (30% of 1,000.0 ms in the database)" and a.expected_gain_ns == 300_000_000
    assert r.lock_wait(evidence({"lock": 0.05})) is None


def _part(node, critical, **kw):
    return SimpleNamespace(**{"node": node, "critical": critical, "fetches": 10, "rows": 1000, "sent_bytes": 0,
                              "execution_ns": 0, "idle_ns": 0, "last_end_ns": 0, "components": {}, **kw})


def test_remote():
    waited = {"remote_wait": 800_000_000}
    link = r.remote(evidence({"remote": 0.8}, ns=waited, parts=[_part("n1", True, sent_bytes=8 * 2**20)]))
    assert link.rule == "remote.link" and link.expected_gain_ns == round(0.9 * 8e8)  # 8 MiB at 10 MiB/s
    work = r.remote(evidence({"remote": 0.8}, ns=waited, parts=[
        _part("n1", True, execution_ns=700_000_000, components={"cpu_user": 3, "disk_seq": 1})]))
    assert work.rule == "remote.node_work" and "(cpu_user 75%, disk_seq 25%)" in work.advice
    trips = r.remote(evidence({"remote": 0.8}, ns=waited, parts=[
        _part("n1", True, execution_ns=100, idle_ns=100, last_end_ns=1000), _part("n2", False, last_end_ns=2000)]))
    assert trips.rule == "remote.round_trips" and "20 fetch round trips" in trips.advice
    assert "one after the other" in trips.advice  # n2 ended long after n1
    assert r.remote(evidence({"remote": 0.8}, ns=waited)) is None  # no parts on the data nodes


def test_run_queue():
    ns = {"run_queue": 200_000_000}
    held = r.run_queue(evidence({"run_queue": 0.2}, ns=ns, idle_cpus=2.5))
    assert held.rule == "run_queue.throttled" and "/proc/4242/cgroup" in held.advice
    assert held.evidence.endswith("2.5 of 4 CPUs idle on average meanwhile (node samples)")
    assert held.expected_gain_ns == 200_000_000
    short = r.run_queue(evidence({"run_queue": 0.2}, ns=ns, idle_cpus=0.1))
    assert short.rule == "run_queue.oversubscription" and "than the 4 CPUs" in short.advice
    assert r.run_queue(evidence({"run_queue": 0.05}, ns=ns)) is None


def test_not_allocated():
    a = r.not_allocated(evidence({"unexplained": 0.7, "cpu": 0.3}, explained=0.3))
    assert a.rule == "not_allocated" and a.evidence == "explained 30% of 1,000.0 ms in the database; cpu 30%, disk_seq 0%, disk_random 0%, network 0%"
    assert a.expected_gain_ns is None
    assert r.not_allocated(evidence({"unexplained": 0.3})) is None


def test_registry_order_is_the_listing_order():
    """Advice is listed cpu, disk, network, locks, remote, run queue, kernel, then the unexplained rest."""
    names = [rule.__name__ for rule in r.RULES]
    assert names[:5] == ["cpu_per_call", "cpu_parallel", "cpu_jit", "cpu_work_mem", "cpu_faster"]
    assert names[-1] == "not_allocated" and names.index("lock_wait") < names.index("run_queue")


def test_advice_options_from_the_manifest():
    from mwinv.errors import MwinvError
    from mwinv.options import AdviceOptions

    assert AdviceOptions.from_manifest({}) == AdviceOptions(None, 2, {})   # no CPU count recorded: 2
    o = AdviceOptions.from_manifest({"cpus": 8, "settings": {"jit": "off"}, "calibration": {"disk": {}}})
    assert (o.cpus, o.settings, o.calibration) == (8, {"jit": "off"}, {"disk": {}})
    with pytest.raises(MwinvError, match="cpus -3: a whole number of 1 or more"):
        AdviceOptions.from_manifest({"cpus": -3})


def test_a_share_says_its_base():
    """One meaning of wall time (docs/attribution.md): the window with its client waits; the shares are of
    the time in the database, the wall time less them, and say so with the client waits left out (the top
    table's total holds them, so a bare "of 1,000.0 ms" read as a share of a time shown nowhere)."""
    a = r.disk_seq_bandwidth(evidence({"disk_seq": 0.5}, seq_bytes=300 * 2**20, ns={"client_wait": 250_000_000}))
    assert a.evidence.startswith("disk_seq 50% of 1,000.0 ms in the database (client waits, 250.0 ms, excluded); ")
