"""Model, classification and advice on hand-computed cases (every expected number is worked out by hand
in the comments, not by calling the code under test)."""

import pyarrow as pa
import pytest

from mwinv.capture.tables import SCHEMAS
from mwinv.correlator.advice import advise
from mwinv.correlator.classify import classify
from mwinv.correlator.model import estimate, mean_abs_error, model_connection, predict
from mwinv.options import AdviceOptions

MS = 1_000_000
CAL = {"disk": {"disk_rate_bps": 100e6, "rand_access_s": 0.005},
       "links": {"lo": {"rate_bps": 10e6, "latency_s": 1e-4}}}


def stmt(sid, wall_ms, node="a", parent=None, pid=100, start_ms=0, qid=None, rows=1, write_bytes=0, qhash=None):
    return {"node": node, "dbms": "postgresql", "pid": pid, "statement_id": sid, "parent_statement_id": parent,
            "query_id": qid or sid * 10, "query_text_hash": qhash, "start_ns": start_ms * MS,
            "end_ns": (start_ms + wall_ms) * MS, "rows": rows, "write_bytes": write_bytes}


def attr(sid, node="a", **ms):
    return [{"node": node, "statement_id": sid, "query_id": sid * 10, "component": c, "ns": v * MS,
             "from_workers_ns": 0} for c, v in ms.items()]


def io(sid, node="a", **kw):
    return {"node": node, "statement_id": sid, **kw}


@pytest.fixture
def case():
    statements = [
        stmt(1, 1000),                      # CPU + disk, on one node
        stmt(2, 700, pid=101),              # coordinator of a two-node statement
        stmt(3, 650, node="b", parent=2),   # its remote part on node b
        stmt(4, 2000, pid=102, start_ms=5000),  # waits for a lock
        stmt(5, 1000, pid=103),             # 90 % not allocated: dbms-internal
        stmt(6, 5, pid=104),                # 5 ms: too thin to advise on
        stmt(7, 200, pid=101, parent=2, start_ms=100),  # nested in 2 on its own node: inside 2's time
    ]
    attribution = (attr(1, cpu_user=400, cpu_sys=100, disk_seq=300, disk_random=100, not_allocated=100)
                   + attr(2, cpu_user=200, network=450, other_wait=50)
                   + attr(3, node="b", cpu_user=300, disk_seq=100, network=250)
                   + attr(4, cpu_user=100, lock_wait=1800, not_allocated=100)
                   + attr(5, cpu_user=100, not_allocated=900)
                   + attr(6, cpu_user=5)
                   + attr(7, cpu_user=200))
    statement_io = [io(1, seq_bytes=30_000_000, random_reqs=20, random_bytes=20 * 8192),
                    io(2, net_rx_bytes=1_000_000, net_tx_bytes=0),
                    io(3, node="b", seq_bytes=10_000_000, net_rx_bytes=0, net_tx_bytes=2_000_000)]
    return (pa.Table.from_pylist(statements, schema=SCHEMAS["statement"]),
            pa.Table.from_pylist(attribution, schema=SCHEMAS["statement_attribution"]),
            pa.Table.from_pylist(statement_io, schema=SCHEMAS["statement_io"]))


def test_estimate_table1(case):
    est = {r["statement_id"]: r for r in estimate(model_connection(*case), CAL).to_pylist()}
    assert set(est) == {1, 2, 4, 5, 6}  # the remote part 3 and the nested 7 fold into their root 2
    e1 = est[1]
    # t_cpu = 0.5 s; t_seq = 30e6/100e6 = 0.3 s; t_no_seq = 20 * (0.005 + 8192/100e6) = 0.1016384 s
    assert e1["t_cpu_ns"] == 500 * MS
    assert e1["t_seq_ns"] == 300 * MS
    assert e1["t_no_seq_ns"] == 101_638_400
    assert e1["estimated_ns"] == 901_638_400
    assert e1["error"] == pytest.approx(-0.0983616)
    assert e1["allocated_share"] == pytest.approx(0.9)  # 0.4+0.1+0.3+0.1
    e2 = est[2]
    # max over nodes: cpu max(0.2, 0.3) = 0.3 (7's 0.2 s on node a is inside 2's time; added, a would be 0.4);
    # seq max(0, 0.1) = 0.1; net max(1e6, 2e6)/10e6 = 0.2
    assert (e2["t_cpu_ns"], e2["t_seq_ns"], e2["t_no_seq_ns"], e2["t_net_ns"]) == (300 * MS, 100 * MS, 0, 200 * MS)
    # and node a's cpu (0.2 s) stays below node b's, which is why b is the critical node
    assert e2["estimated_ns"] == 600 * MS and e2["critical_node"] == "b"
    assert e2["error"] == pytest.approx(-100 / 700)
    # accuracy over statements with >= 85 % allocated: only statement 1 (0.9); 2 has 650/700 = 0.93 too
    assert e2["allocated_share"] == pytest.approx(650 / 700)
    mae, n = mean_abs_error(estimate(model_connection(*case), CAL))
    assert n == 3  # 1, 2 and 6 (5 ms all cpu)
    # |-0.0983616| + |-1/7| + |0| over 3
    assert mae == pytest.approx((0.0983616 + 100 / 700 + 0.0) / 3)


def test_estimate_without_calibration_is_one_line_error(case):
    from mwinv.errors import MwinvError
    with pytest.raises(MwinvError, match="no calibration"):
        estimate(model_connection(*case), None)


def test_predictions(case):
    pred = {(r["statement_id"], r["what_if"], r["factor"]): r
            for r in predict(model_connection(*case), CAL, factors={"cpu": (2.0,), "disk_rate": (2.0,), "rand_access": (0.5,),
                                                  "link_rate": (10.0,)}).to_pylist()}
    # CPU x2: 1.0 s - 0.25 s
    assert pred[(1, "cpu", 2.0)]["predicted_ns"] == 750 * MS
    # disk x2: t_seq 0.3 -> 0.15; t_no_seq 20*(0.005+8192/2e8) = 0.1008192 -> delta -0.1508192 s
    assert pred[(1, "disk_rate", 2.0)]["predicted_ns"] == 849_180_800
    # random access x0.5: 20*(0.0025+0.00008192) = 0.0516384 -> delta -0.05 s
    assert pred[(1, "rand_access", 0.5)]["predicted_ns"] == 950 * MS
    # link x10 on statement 2: t_net max(0.1, 0.2) -> 0.02 s: 0.7 - 0.18 = 0.52 s
    assert pred[(2, "link_rate", 10.0)]["predicted_ns"] == 520 * MS
    assert pred[(2, "link_rate", 10.0)]["baseline_ns"] == 700 * MS
    assert pred[(2, "link_rate", 10.0)]["measured_ns"] is None


def test_classify(case):
    cls = {r["statement_id"]: r for r in classify(model_connection(case[0], case[1], None)).to_pylist()}
    assert cls[1]["limit"] == "cpu"
    assert cls[1]["allocated_share"] == pytest.approx(0.9)
    assert cls[1]["confidence"] == pytest.approx(0.5 / 0.9)
    assert cls[2]["limit"] == "network"  # 450 of 700 on the coordinator's own rows
    assert cls[4]["limit"] == "lock" and cls[4]["allocated_share"] == pytest.approx(0.95)
    assert cls[5]["limit"] == "dbms-internal" and cls[5]["allocated_share"] == pytest.approx(0.1)
    assert "not_allocated 900.0 ms" in cls[5]["evidence"]


def test_advice(case):
    statements, attribution, statement_io = case
    adv = advise(statements, attribution, statement_io, options=AdviceOptions(CAL, cpus=2, settings={"jit": "off"}))
    by = {}
    for a in adv:
        by.setdefault(a.statement_id, {})[a.rule] = a
    # statement 1: CPU 50 % -> parallel (CPU x2 gain = 0.25 s), disk_seq 30 % -> bandwidth (x2: 0.1508192 s)
    assert by[1]["cpu.parallel"].expected_gain_ns == 250 * MS
    assert by[1]["disk_seq.bandwidth"].expected_gain_ns == 150_819_200
    assert by[1]["disk_seq.memory"].expected_gain_ns == 300 * MS
    # jit is off, CPU holds 50 % of 1 s (the rule needs >= 50 % and >= 0.5 s): CPU x1.3 saves 0.5 - 0.5/1.3 s
    assert by[1]["cpu.jit"].expected_gain_ns == round((0.5 - 0.5 / 1.3) * 1e9)
    assert "cpu.jit" not in by[2]  # 200 ms of 700 on the coordinator: below 50 %
    assert "lock.wait" in by[4]
    assert "statement 1" in by[4]["lock.wait"].advice or "pid" in by[4]["lock.wait"].advice
    assert set(by[5]) == {"not_allocated"}
    assert set(by[6]) == {"too-thin"}
    assert all(a.evidence for a in adv)


def test_kernel_hot_spot_advice():
    statements = pa.Table.from_pylist([stmt(1, 1000), stmt(2, 1000, pid=101)], schema=SCHEMAS["statement"])
    attribution = pa.Table.from_pylist(attr(1, cpu_user=300, cpu_sys=600, not_allocated=100)
                                       + attr(2, cpu_user=300, cpu_sys=600, not_allocated=100),
                                       schema=SCHEMAS["statement_attribution"])

    def kf(sid, function, share, samples, source="perf-cpu-clock", ns=None, stack=None):
        return {"node": "a", "statement_id": sid, "query_id": sid * 10, "function": function, "share": share,
                "samples": samples, "source": source, "ns": ns, "stack": stack}
    kfs = pa.Table.from_pylist([
        # statement 1: 100 perf samples; the migration functions 30 %, NUMA 5 %, page clearing 20 %
        kf(1, "find_busiest_group", 0.3, 30), kf(1, "task_numa_work", 0.05, 5), kf(1, "clear_page_erms", 0.2, 20),
        kf(1, "copy_user_generic", 0.45, 45),
        # and 40 sleeping stretches, all in one place, 300 ms: off-CPU time, added to the on-CPU part
        kf(1, "do_huge_pmd_anonymous_page", 1.0, 40, "sched-stack", 300 * MS),
        # statement 2: the same shares from 10 samples only: too few to rank
        kf(2, "find_busiest_group", 0.3, 3), kf(2, "copy_user_generic", 0.7, 7),
        # and 4 sleeps, 200 ms measured, waiting for readahead's pages: measured, not sampled, so ranked
        kf(2, "folio_wait_bit_common", 1.0, 4, "sched-stack", 200 * MS,
           "folio_wait_bit_common <- filemap_get_pages <- filemap_read <- vfs_read <- __x64_sys_pread64"),
    ], schema=SCHEMAS["statement_kernel_function"])
    rules = {(a.statement_id, a.rule): a for a in advise(statements, attribution, kernel_functions=kfs, options=AdviceOptions(CAL))}
    # 30 % of 600 ms sys = 180 ms; NUMA at 5 % of sys is 3 % of the wall time, below the 5 % bar
    assert rules[(1, "kernel.sched_migration_cost")].expected_gain_ns == 180 * MS
    assert "sched_migration_cost_ns" in rules[(1, "kernel.sched_migration_cost")].advice
    assert "(180.0 ms in 30 samples from perf cpu-clock" in rules[(1, "kernel.sched_migration_cost")].evidence
    assert (1, "kernel.numa_balancing") not in rules
    # the THP fault's 300 ms asleep is the bound; the page clearing on CPU (20 % of 600 ms) is a plain fault
    assert rules[(1, "kernel.transparent_hugepage")].expected_gain_ns == 300 * MS
    assert rules[(1, "kernel.page_faults")].expected_gain_ns == 120 * MS
    assert [r for (sid, r) in rules if sid == 2 and r.startswith("kernel.")] == ["kernel.readahead"]
    assert rules[(2, "kernel.readahead")].expected_gain_ns == 200 * MS
    classes = {r["statement_id"]: r["evidence"] for r in classify(model_connection(statements, attribution, None), kfs).to_pylist()}
    # the top three by share, each named with its source
    assert "kernel: do_huge_pmd_anonymous_page 100% of sched-stack, copy_user_generic 45% of perf-cpu-clock, " \
           "find_busiest_group 30% of perf-cpu-clock" in classes[1]
    assert "kernel: folio_wait_bit_common 100% of sched-stack" in classes[2]


def test_lock_advice_names_the_waker():
    # statement 1 (pid 102) waits 1.8 s for a lock; pid 200 ran statement 2 (its UPDATE) earlier and woke
    # pid 102 at +1.8 s when its transaction ended; pid 300's statement 3 overlaps but woke nobody
    statements = pa.Table.from_pylist([stmt(1, 2000, pid=102, start_ms=5000), stmt(2, 50, pid=200, start_ms=4900),
                                       stmt(3, 3000, pid=300, start_ms=4000)], schema=SCHEMAS["statement"])
    attribution = pa.Table.from_pylist(attr(1, cpu_user=100, lock_wait=1800, not_allocated=100)
                                       + attr(2, cpu_user=50) + attr(3, cpu_user=3000),
                                       schema=SCHEMAS["statement_attribution"])
    # pid 200 wakes it (sched_waking, in pid 200's context); the sched_wakeup that follows runs on the
    # waiter's CPU in an interrupt (pid 0), as does a later wake-up by a timer: neither is a release
    wake = pa.Table.from_pylist([{"node": "a", "ts_ns": 6800 * MS, "pid": 200, "event": "sched_waking",
                                  "target_pid": 102},
                                 {"node": "a", "ts_ns": 6800 * MS + 5000, "pid": 0, "event": "sched_wakeup",
                                  "target_pid": 102},
                                 {"node": "a", "ts_ns": 6900 * MS, "pid": 0, "event": "sched_wakeup",
                                  "target_pid": 102}], schema=SCHEMAS["kernel_event"])
    rules = {(a.statement_id, a.rule): a for a in advise(statements, attribution, kernel_events=wake)}
    lock = rules[(1, "lock.wait")]
    assert "backend pid 200 released it (woke it at +1800 ms)" in lock.advice and "statement 2 " in lock.advice
    assert lock.expected_gain_ns == 1800 * MS
    # without kernel events the overlap heuristic picks the overlapping statement that ended last: 3
    rules = {(a.statement_id, a.rule): a for a in advise(statements, attribution)}
    assert "most likely statement 3 " in rules[(1, "lock.wait")].advice


def test_disk_wait_check():
    from mwinv.correlator.model import DiskWaitCheck, disk_wait_check
    cal = {"disk": {"disk_rate_bps": 100e6, "rand_access_s": 0.005, "seq_access_s": 0.001}}
    statements = pa.Table.from_pylist([stmt(1, 1000), stmt(2, 1000, pid=101), stmt(3, 1000, pid=102)],
                                      schema=SCHEMAS["statement"])
    attribution = pa.Table.from_pylist(attr(1, cpu_user=100, disk_seq=200, disk_random=700)
                                       + attr(2, cpu_user=500, disk_seq=500) + attr(3, cpu_user=1000),
                                       schema=SCHEMAS["statement_attribution"])
    statement_io = pa.Table.from_pylist([
        # 100 short sequential requests of 16 KiB (1.6384 MB) and 100 random of 8 KiB (0.8192 MB)
        io(1, seq_bytes=1_638_400, seq_reqs=100, random_reqs=100, random_bytes=819_200),
        # a streamed scan: 50 requests of 1 MiB, its waits hidden behind CPU, left out
        io(2, seq_bytes=50 * 2**20, seq_reqs=50), io(3)], schema=SCHEMAS["statement_io"])
    check = disk_wait_check(model_connection(statements, attribution, statement_io), cal)
    assert check.requests == 200
    # waited 0.9 s, of which (1,638,400 + 819,200) / 100e6 = 0.024576 s transfer: (0.9 - 0.024576) / 200
    assert check.observed_s == pytest.approx(0.004377120)
    # calibrated: (100 x 0.001 + 100 x 0.005) / 200 = 0.003
    assert check.calibrated_s == pytest.approx(0.003)
    # 0.00437712 / 0.003 = 1.459: under 1.5x, the disk behaved as calibrated; 1.53x or a third did not
    assert check.ratio == pytest.approx(1.45904) and not check.drifted
    assert DiskWaitCheck(200, 0.0046, 0.003).drifted and DiskWaitCheck(200, 0.001, 0.003).drifted
    # below 100 requests the check says nothing
    assert disk_wait_check(model_connection(statements, attribution, statement_io.slice(1)), cal) is None


def test_run_queue_advice_tells_a_capped_process_from_busy_cpus():
    # statements 1 and 2 each wait 300 ms of 1 s runnable; while 1 ran the node's 2 CPUs were idle 1.0 CPU
    # on average, while 2 ran none was: 1 is held back (a quota), 2 competes for CPUs
    statements = pa.Table.from_pylist([stmt(1, 1000, pid=500), stmt(2, 1000, pid=501, start_ms=2000)],
                                      schema=SCHEMAS["statement"])
    attribution = pa.Table.from_pylist(attr(1, cpu_user=700, run_queue=300) + attr(2, cpu_user=700, run_queue=300),
                                       schema=SCHEMAS["statement_attribution"])

    def sample(end_ms, idle_ms):
        return {"node": "a", "ts_ns": end_ms * MS, "interval_ns": 500 * MS, "cpu_user_ns": (1000 - idle_ms) * MS,
                "cpu_sys_ns": 0, "cpu_iowait_ns": 0, "cpu_idle_ns": idle_ms * MS}
    # 1: samples ending at 500 and 1000 ms, idle 800 and 200 ms of 1000 CPU-ms: (1.6 + 0.4) / 2 = 1.0 CPU;
    # 2: samples ending at 2500 and 3000 ms, nothing idle
    # each interval also has a disk row, without CPU figures, which must not dilute the mean
    disk_rows = [{"node": "a", "ts_ns": t * MS, "interval_ns": 500 * MS, "disk": "vda", "read_bytes": 0}
                 for t in (500, 1000)]
    samples = pa.Table.from_pylist([sample(500, 800), sample(1000, 200), sample(2500, 0), sample(3000, 0)]
                                   + disk_rows, schema=SCHEMAS["node_sample"])
    rules = {(a.statement_id, a.rule): a for a in advise(statements, attribution, options=AdviceOptions(cpus=2), node_samples=samples)}
    capped = rules[(1, "run_queue.throttled")]
    assert "1.0 of 2 CPUs idle" in capped.evidence and "/proc/500/cgroup" in capped.advice
    assert capped.expected_gain_ns == 300 * MS
    assert (1, "run_queue.oversubscription") not in rules
    assert "0.0 of 2 CPUs idle" in rules[(2, "run_queue.oversubscription")].evidence
    assert (2, "run_queue.throttled") not in rules
    # without samples a run-queue wait is taken for oversubscription, and the evidence says nothing of idle CPUs
    rules = {(a.statement_id, a.rule): a for a in advise(statements, attribution, options=AdviceOptions(cpus=2))}
    assert "idle" not in rules[(1, "run_queue.oversubscription")].evidence


def test_parallel_workers_in_the_model():
    # leader statement 1 (pid 200) ran 100 ms on CPU itself; its two workers (201, 202) 300 ms between them,
    # rolled up into the leader's attribution as from_workers_ns; worker 201 read 20 random pages
    def stmt_w(sid, pid):
        return {**stmt(sid, 300, pid=pid, parent=1), "leader_pid": 200}
    statements = pa.Table.from_pylist([{**stmt(1, 300, pid=200), "leader_pid": 200}, stmt_w(2, 201), stmt_w(3, 202)],
                                      schema=SCHEMAS["statement"])
    attribution = pa.Table.from_pylist(
        [{**r, "from_workers_ns": 300 * MS if r["component"] == "cpu_user" else 0}
         for r in attr(1, cpu_user=100, run_queue=150, disk_random=50)], schema=SCHEMAS["statement_attribution"])
    statement_io = pa.Table.from_pylist([io(1), io(2, random_reqs=20, random_bytes=20 * 8192), io(3)],
                                        schema=SCHEMAS["statement_io"])
    on = {cpus: estimate(model_connection(statements, attribution, statement_io),
                         {**CAL, "cpu": {"cpu_speed_factor": 1.0, "cpus": cpus}}).to_pylist() for cpus in (2, 4)}
    assert [r["statement_id"] for r in on[2]] == [1]  # the workers fold into their leader
    # 2 CPUs: 3 processes, 2 at a time: max(100, 300 / 2 per worker, 400 / 2) = 200 ms
    assert on[2][0]["t_cpu_ns"] == 200 * MS
    # 4 CPUs: all 3 at once: max(100, 150, 400 / 3) = 150 ms
    assert on[4][0]["t_cpu_ns"] == 150 * MS
    # the worker's reads count: 20 x (0.005 + 8192 / 100e6) s = 101.6384 ms
    assert on[2][0]["t_no_seq_ns"] == 101_638_400
    # CPU twice as fast halves the critical path: 100 ms less
    pred = predict(model_connection(statements, attribution, statement_io), {**CAL, "cpu": {"cpus": 2}}, factors={"cpu": (2.0,)})
    assert pred.to_pylist()[0]["predicted_ns"] == 200 * MS


def test_access_time_what_if_scales_both_kinds_of_request():
    cal = {"disk": {"disk_rate_bps": 100e6, "rand_access_s": 0.005, "seq_access_s": 0.001}}
    statements = pa.Table.from_pylist([stmt(1, 2000)], schema=SCHEMAS["statement"])
    attribution = pa.Table.from_pylist(attr(1, cpu_user=500, disk_seq=500, disk_random=1000),
                                       schema=SCHEMAS["statement_attribution"])
    # 100 short sequential requests (16 KiB) and 100 random ones (8 KiB)
    statement_io = pa.Table.from_pylist([io(1, seq_bytes=1_638_400, seq_reqs=100, random_reqs=100,
                                            random_bytes=819_200)], schema=SCHEMAS["statement_io"])
    (p,) = predict(model_connection(statements, attribution, statement_io), cal, factors={"rand_access": (3.0,)}).to_pylist()
    # each request waits 3x its access time: + 2 x (100 x 0.001 + 100 x 0.005) = + 1.2 s
    assert p["predicted_ns"] == 3200 * MS


def test_parallel_workers_with_their_own_rows():
    # attribution from the extension's rusage alone (no kernel side): each worker has rows of its own and
    # the leader none from workers; the model must see the same 100 ms + 300 ms split as when rolled up
    statements = pa.Table.from_pylist([{**stmt(1, 300, pid=200), "leader_pid": 200},
                                       {**stmt(2, 300, pid=201, parent=1), "leader_pid": 200},
                                       {**stmt(3, 300, pid=202, parent=1), "leader_pid": 200}],
                                      schema=SCHEMAS["statement"])
    attribution = pa.Table.from_pylist(attr(1, cpu_user=100, not_allocated=200) + attr(2, cpu_user=150)
                                       + attr(3, cpu_user=150), schema=SCHEMAS["statement_attribution"])
    (e,) = [r for r in estimate(model_connection(statements, attribution, None), {**CAL, "cpu": {"cpus": 2}}).to_pylist()
            if r["statement_id"] == 1]
    assert e["t_cpu_ns"] == 200 * MS  # max(100, 300 / 2, 400 / 2)


def test_lock_advice_over_many_executions_names_no_single_blocker():
    # a row standing for 40 executions of a short statement (advise_capture's aggregate): their lock waits
    # are summed, and no one blocker is named for them
    statements = pa.Table.from_pylist([stmt(1, 400, pid=102), stmt(2, 50, pid=200)], schema=SCHEMAS["statement"])
    statements = statements.append_column("executions", pa.array([40, 1], pa.int64()))
    attribution = pa.Table.from_pylist(attr(1, cpu_user=100, lock_wait=300) + attr(2, cpu_user=50),
                                       schema=SCHEMAS["statement_attribution"])
    (lock,) = [a for a in advise(statements, attribution) if a.rule == "lock.wait"]
    assert "summed over its 40 executions" in lock.advice and "statement 2" not in lock.advice
    assert lock.evidence.startswith("over 40 executions: ")
