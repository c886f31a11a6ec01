"""What-if predictions checked by running them (issue 7, item 4): a CPU-bound TPC-H query (Q1, warm), a
disk-bound one (Q6 as a cold full scan) and cold index scans of lineitem (the access-time what-if, under a
blkio.throttle.read_iops_device cap: see its test) are captured at SF 0.1, their time under "CPU x0.5" and "disk rate x k" is
predicted, then they are re-run alternately free and with the backend in a cgroup v1 with
cpu.cfs_quota_us = 50 % of a CPU or blkio.throttle.read_bps_device = 8 MiB/s. The disk factor k is the
ratio of the throttle's rate to the baseline's calibrated disk rate.

SF 0.1: at SF 0.01 Q1 takes ~50 ms, inside one 100 ms CFS period (a 50 % quota never bites), and its
lineitem (9 MB) ends up mostly in the 16 MB of shared buffers after a few scans, so "cold" runs read
next to nothing; at SF 0.1 lineitem is 94 MB.

The CPU factor is not assumed to be 0.5: a statement that is all CPU runs free and capped next to Q1,
and the slow-down it gets is the factor predicted with. The check compares slow-downs: predicted / captured time against capped / free time of runs made side by
side, each capped run with the free run just before it (the median of REPEATS such pairs). On a shared VM
a statement's time is inflated now and then, its CPU time too (the test VM's hypervisor took up to a third
of the time without reporting it as steal), so the free re-runs are compared with each other and with the
capture first: a machine too noisy to time is a skip, with the figures."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from model_capture import make_capture_from_run, statement_ids, veth_namespace  # noqa: E402

from mwinv.cgroup import Cgroup, block_device_of, drop_page_cache  # noqa: E402
from mwinv.correlator.model import model_connection, predict  # noqa: E402
from mwinv.workloads import tpch  # noqa: E402
from mwinv.workloads.setup import tpch_server  # noqa: E402

REPEATS = 5
MAX_ERROR = 0.30  # predicted vs measured slow-down, relative
MAX_NOISE = 0.30  # free re-runs vs the captured baseline: above this the machine is too busy to time
MAX_SPREAD = 1.5  # slowest / fastest free re-run: above this the machine is too busy to time
# ... of the all-CPU control's free runs (ALL_CPU), which measure the cap's effect: with 1.5 a run passed
# the guard at x1.38 and its prediction was +32.1 % off (the query's own capped/free median gave x1.86,
# the control's fastest runs x2.47)
MAX_CONTROL_SPREAD = 1.3
# 8 MiB/s: a 128 KiB read-ahead request waits ~16 ms, so the throttle's rounding to the 4 ms tick is small
THROTTLE_BPS = 8 * 2**20

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/sys/fs/cgroup/cpu/tasks").exists() or not Path("/sys/fs/cgroup/blkio/tasks").exists(),
                       reason="cgroup v1 cpu and blkio controllers are not mounted"),
]


def _server(name: str, shared_buffers: str):
    server = tpch_server(0.1, name=name, preload=["mwinv"],
                         gucs={"compute_query_id": "on", "shared_buffers": f"'{shared_buffers}'"})
    try:
        # the load's VACUUM leaves ~100 MB of dirty pages (hint bits, visibility map): written now, not by a
        # checkpoint in the middle of a capture (a fresh server's cold Q6 ranged 2.7-9.6 s and failed at +50 %)
        server.psql("CHECKPOINT")
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def tpch_pg_larger():
    """TPC-H at SF 0.1: SF 0.01's Q1 takes ~50 ms, within one 100 ms CFS period, so a 50 % quota never bites."""
    yield from _server("pytest-whatif", "16MB")


@pytest.fixture
def tpch_pg_warm():
    """SF 0.1 with shared buffers that keep lineitem (94 MB): a sequential scan of a table over a quarter of
    shared_buffers goes through a 256 KiB ring, so 512 MB. Warm Q1 then reads nothing from the OS; with 16 MB
    it re-read lineitem through the page cache, which the test VM keeps small, i.e. partly from disk. One test
    uses it: stopped right after, so that it does not run beside the disk test."""
    yield from _server("pytest-whatif-warm", "512MB")


def median(values, key=None):
    return sorted(values, key=key)[len(values) // 2]


def proc_read_bytes(pid: int) -> int:
    return int(next(line.split()[1] for line in open(f"/proc/{pid}/io") if line.startswith("read_bytes:")))


def check_what_if(server, tmp_path, query: tuple[str, str], what_if: str, cgroup: Cgroup, cold: bool,
                  factor=None, gucs: dict | None = None, absolute: bool = False, control_sql: str | None = None,
                  repeats: int = REPEATS) -> None:
    """absolute: compare the predicted time with the capped runs' time itself rather than slow-downs (for
    a statement whose capped time is mostly the cap's, which the machine's noise hardly moves).
    repeats: captured, free and capped runs of the query each.
    control_sql: a statement that is all CPU, run free and capped next to the query: the slow-down the cap
    really gives here is the what-if's factor (a quota is not a slower CPU on a VM whose hypervisor takes
    time unreported; the control measures what it is)."""
    def before(_label):
        if cold:
            drop_page_cache()  # (lineitem is read through a ring buffer: see the tpch_pg fixture)

    label, sql = query
    cap = make_capture_from_run(server, [(label, sql, gucs or {})] * repeats, tmp_path / "baseline",
                                before_each=before)
    st, at, io = cap.read("statement"), cap.read("statement_attribution"), cap.read("statement_io")
    wall = {r["statement_id"]: r["end_ns"] - r["start_ns"] for r in st.to_pylist()}
    sid = median(statement_ids(cap, sql), key=wall.get)
    free, capped, control = [], [], {False: [], True: []}
    try:
        with server.connect("tpch") as conn:
            for name, value in {"max_parallel_workers_per_gather": "0", **(gucs or {})}.items():
                conn.execute(f"SET {name} = {value}")
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            cgroup.create()
            for _ in range(repeats):  # side by side, so that a slow spell of the machine hits both
                for runs, cap_it in ((free, False), (capped, True)):
                    (cgroup.add_pid if cap_it else cgroup.release_pid)(pid)
                    before(label)
                    read0, t0 = proc_read_bytes(pid), time.monotonic_ns()
                    conn.execute(sql).fetchall()
                    runs.append((time.monotonic_ns() - t0, proc_read_bytes(pid) - read0))
                    if control_sql:
                        t0 = time.monotonic_ns()
                        conn.execute(control_sql).fetchall()
                        control[cap_it].append(time.monotonic_ns() - t0)
            cgroup.release_pid(pid)
    finally:
        cgroup.remove()
    if control_sql:
        # the fastest run of each: a slow spell of the shared machine only adds time, and the median of the
        # ratios took one (capped controls 308-384 ms against free 157-162) for the cap's effect (x2.30, not
        # the x1.96 of the fastest), which failed a CI run
        if max(control[False]) / min(control[False]) > MAX_CONTROL_SPREAD:
            pytest.skip("machine too busy to time: the control's free runs "
                        f"{sorted(v // 10**6 for v in control[False])} ms")
        achieved = min(control[True]) / min(control[False])
        if achieved < 1.3:
            pytest.skip(f"the cap hardly slows pure CPU work here (x{achieved:.2f})")
        k = 1 / achieved
    else:
        k = factor(cap) if factor else 0.5
    p = next(r for r in predict(model_connection(st, at, io), cap.manifest()["calibration"], factors={what_if: (k,)}).to_pylist()
             if r["statement_id"] == sid)
    io_bytes = {r["statement_id"]: r["seq_bytes"] + r["random_bytes"] for r in io.to_pylist()}.get(sid)
    predicted = p["predicted_ns"] / p["baseline_ns"]
    measured = median([c[0] / f[0] for f, c in zip(free, capped)])
    error = p["predicted_ns"] / median(capped)[0] - 1 if absolute else predicted / measured - 1
    noise = median(free)[0] / p["baseline_ns"] - 1
    spread = max(f[0] for f in free) / min(f[0] for f in free)
    print(f"{label} {what_if} x{k:.4g}: captured {sorted(round(wall[i] / 1e6) for i in statement_ids(cap, sql))} ms, "
          f"free {sorted(round(r[0] / 1e6) for r in free)} ms, capped {sorted(round(r[0] / 1e6) for r in capped)} ms; "
          f"slow-down predicted x{predicted:.2f} ({p['baseline_ns'] / 1e6:.0f} -> {p['predicted_ns'] / 1e6:.0f} ms), "
          f"measured x{measured:.2f}, error {error:+.1%}; bytes read: captured {io_bytes}, capped {median(capped)[1]}"
          + (f"; all-CPU control free {sorted(round(v / 1e6) for v in control[False])} ms, "
             f"capped {sorted(round(v / 1e6) for v in control[True])} ms" if control_sql else ""))
    if absolute:  # the same work must have been done: the capped runs read what the captured one did
        assert abs(median(capped)[1] - io_bytes) <= 0.1 * io_bytes
    elif abs(noise) > MAX_NOISE or spread > MAX_SPREAD:
        pytest.skip(f"machine too busy to time: the free re-runs' median is {noise:+.0%} off the captured one, "
                    f"the slowest x{spread:.2f} the fastest")
    assert median(capped)[0] > 1.3 * p["baseline_ns"], "the cap must really slow the statement down"
    assert abs(error) <= MAX_ERROR


# On a quiet machine the model predicted Q1's slow-down under a 52 % CPU cap as x1.92 and the capped
# runs measured x1.94 (error -0.9 %). Errors of -23.5 % and -28 % came from runs the noise check skipped (the VM took the vCPU away: run queue the model does not scale).
def test_cpu_what_if_checked_by_running(tpch_pg_warm, tmp_path):
    check_what_if(tpch_pg_warm, tmp_path, ("q1", tpch.query_sql(1)), "cpu",
                  Cgroup("mwinv-test-whatif-cpu", cpu_fraction=0.5), cold=False,
                  control_sql=ALL_CPU)


# The control: a set-returning function in the select list (ProjectSet) hands its rows on one by one; in
# FROM it stores them in a tuplestore, past work_mem a temp file written and read on every run (2 M rows:
# EXPLAIN BUFFERS temp written=3418 read=3418), whose free runs took 286-539 ms against 149-176 ms so. A
# CI run's temp file made its first free run the fastest by far (324 against 420-485 ms): the cap came
# out x2.73 where the medians gave x2.02, the prediction +38.9 % off. 8 M rows (~500 ms): a 50 % quota
# of 100 ms periods adds up to 50 ms to a run, by the period's phase (2 M, ~130 ms: capped x1.63-x2.4).
ALL_CPU = "SELECT sum(i * 2) FROM (SELECT generate_series(1, 8000000) AS i) s"


def test_disk_what_if_checked_by_running(tpch_pg_larger, tmp_path):
    server = tpch_pg_larger
    throttle = {block_device_of(server.data_dir): THROTTLE_BPS}

    def throttled_rate_factor(cap):
        # The capped platform's disk rate is the throttle's, known exactly. (Calibrating it inside the
        # cgroup, [Taufer]'s way, measured ~79 % of it: the calibration's synchronous 128 KiB reads each
        # wait one 4 ms tick more than the throttle's rate, PostgreSQL's read-ahead keeps requests queued.)
        return THROTTLE_BPS / cap.manifest()["calibration"]["disk"]["disk_rate_bps"]

    # Q6 as a full scan of lineitem (as without an index on l_shipdate): the TPC-H query with the least
    # CPU per byte read. The model adds CPU and disk time; read-ahead overlaps them, so a CPU-heavy scan
    # (Q1: ~3x Q6's CPU) would be over-predicted under a throttle by about its CPU time. Three runs each:
    # a capped run is ~11 s of the throttle's own pace, and five made this the suite's slowest test (57 s).
    check_what_if(server, tmp_path, ("cold-q6", tpch.query_sql(6)), "disk_rate",
                  Cgroup("mwinv-test-whatif-io", read_bps=throttle), cold=True, factor=throttled_rate_factor,
                  gucs={"enable_indexscan": "off", "enable_bitmapscan": "off"}, absolute=True, repeats=3)


# 500 requests/s: a request takes 2 ms, ~40x this disk's own access time, so the cap dominates
THROTTLE_IOPS = 500
SUPPLIERS = (7, 107, 207, 307, 407)


def test_access_time_what_if_checked_by_running(tpch_pg_larger, tmp_path):
    """A cold index scan fetches its heap pages one request at a time. Under blkio.throttle.read_iops_device
    each request takes 1/iops, so the access-time what-if's k = (1/iops) / the calibrated random access time.
    Each statement reads another supplier's rows (distinct pages), cold: the page cache is dropped before
    each, and the server restarts between the capture and the capped runs to empty its shared buffers.
    Predicted and capped times are compared in absolute time, supplier by supplier."""
    server = tpch_pg_larger
    server.psql("CREATE INDEX IF NOT EXISTS lineitem_suppkey ON lineitem (l_suppkey); CHECKPOINT", dbname="tpch")
    sql = "SELECT sum(l_quantity) FROM lineitem WHERE l_suppkey = {}"
    gucs = {"enable_seqscan": "off", "enable_bitmapscan": "off"}
    cap = make_capture_from_run(server, [(f"s{s}", sql.format(s), gucs) for s in SUPPLIERS], tmp_path / "baseline",
                                before_each=lambda _label: drop_page_cache())
    calibration = cap.manifest()["calibration"]
    k = (1 / THROTTLE_IOPS) / calibration["disk"]["rand_access_s"]
    predicted = {r["statement_id"]: r for r in predict(model_connection(cap.read("statement"), cap.read("statement_attribution"),
                                                                       cap.read("statement_io")), calibration,
                                                      factors={"rand_access": (k,)}).to_pylist()}
    io = {r["statement_id"]: r for r in cap.read("statement_io").to_pylist()}
    # one normalised text for all five (the extension keeps a query_id's first text): in execution order
    statement_of = dict(zip(SUPPLIERS, statement_ids(cap, sql.format(SUPPLIERS[0]))))
    assert len(statement_of) == len(SUPPLIERS)
    server.restart()
    cgroup = Cgroup("mwinv-test-whatif-iops", read_iops={block_device_of(server.data_dir): THROTTLE_IOPS})
    rows = []
    try:
        with server.connect("tpch") as conn:
            for name, value in {"max_parallel_workers_per_gather": "0", **gucs}.items():
                conn.execute(f"SET {name} = {value}")
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            conn.execute(sql.format(-1)).fetchall()  # the catalogs and the index's upper pages, read uncapped
            cgroup.create().add_pid(pid)
            for s, sid in statement_of.items():
                drop_page_cache()
                read0, t0 = proc_read_bytes(pid), time.monotonic_ns()
                conn.execute(sql.format(s)).fetchall()
                rows.append((s, predicted[sid], time.monotonic_ns() - t0, proc_read_bytes(pid) - read0, io[sid]))
            cgroup.release_pid(pid)
    finally:
        cgroup.remove()
    errors = [p["predicted_ns"] / capped - 1 for _, p, capped, _, _ in rows]
    for (s, p, capped, read, i), error in zip(rows, errors):
        print(f"supplier {s}: captured {p['baseline_ns'] / 1e6:.0f} ms ({i['seq_reqs']} short sequential + "
              f"{i['random_reqs']} random requests), predicted at x{k:.1f} access time {p['predicted_ns'] / 1e6:.0f} ms, "
              f"capped {capped / 1e6:.0f} ms, error {error:+.1%}; read {read} bytes capped, "
              f"{i['seq_bytes'] + i['random_bytes']} captured")
    for _, p, capped, read, i in rows:
        assert capped > 3 * p["baseline_ns"], "the cap must really slow the statement down"
    assert abs(median(errors)) <= MAX_ERROR


LINK_MBIT = 80
RESULT_ROWS = 10_000  # x 1,000 bytes: ~10 MB sent to the client, ~1 s at 80 Mbit/s


def _shape(ns: str, host_if: str, ns_if: str, mbit: int) -> None:
    """tbf at `mbit` on both ends of the veth (the calibration sends one way, the result flows the other)."""
    for where in (["dev", host_if], ["-n", ns, "dev", ns_if]):
        netns, dev = (where[:2], where[2:]) if where[0] == "-n" else ([], where)
        subprocess.run(["tc", *netns, "qdisc", "replace", *dev, "root", "tbf", "rate", f"{mbit}mbit", "burst", "64kb",
                        "latency", "200ms"], check=True, capture_output=True)


def test_link_rate_what_if_checked_by_running(tmp_path):
    """A statement whose time goes to sending its result over a shaped link (the server in a network
    namespace, the client outside, tbf at 80 Mbit/s on the veth) is captured and calibrated; the link-rate
    what-if x0.5 is then checked by re-running it with the shaper at 40 Mbit/s. The capture also checks
    the attribution: the backend waits in epoll_wait after a send that would block, which is network time."""
    from mwinv.calibrate import calibrate_cpu, calibrate_disk, calibrate_link
    from mwinv.correlator.classify import classify
    from mwinv.engines.postgresql.server import PgServer

    sql = f"SELECT repeat('x', 1000) FROM generate_series(1, {RESULT_ROWS})"
    with veth_namespace("10.213.79") as (ns, host_if, ns_if, _host_ip, ns_ip):
        # small send buffers in the server's namespace: a backend's send waits end when the client has the
        # data, not megabytes earlier (PostgreSQL's statement ends once its last row is in the socket)
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_wmem=4096 16384 65536"], check=True)
        _shape(ns, host_if, ns_if, LINK_MBIT)
        with PgServer(name="pytest-whatif-net", netns=ns, listen_addresses=ns_ip, shared_preload_libraries=["mwinv"],
                      gucs={"compute_query_id": "on"}) as server:
            calibration = {"disk": calibrate_disk(server.data_dir, file_mb=16, random_reads=100),
                           "cpu": calibrate_cpu(),
                           "links": {ns_ip: calibrate_link(f"{ns}:{ns_ip}", bulk_mb=4, pings=50)}}
            cap = make_capture_from_run(server, [("result", sql)] * REPEATS, tmp_path / "baseline", dbname="postgres",
                                        calibration=calibration)
            _shape(ns, host_if, ns_if, LINK_MBIT // 2)
            capped = []
            with server.connect("postgres") as conn:
                for _ in range(REPEATS):
                    t0 = time.monotonic_ns()
                    conn.execute(sql).fetchall()
                    capped.append(time.monotonic_ns() - t0)
    st, at, io = cap.read("statement"), cap.read("statement_attribution"), cap.read("statement_io")
    ids = statement_ids(cap, sql)
    wall = {r["statement_id"]: r["end_ns"] - r["start_ns"] for r in st.to_pylist()}
    sid = median(ids, key=wall.get)
    classes = {r["statement_id"]: r for r in classify(model_connection(st, at, io)).to_pylist()}
    assert classes[sid]["limit"] == "network", classes[sid]
    p = next(r for r in predict(model_connection(st, at, io), calibration, factors={"link_rate": (0.5,)}).to_pylist()
             if r["statement_id"] == sid)
    error = p["predicted_ns"] / median(capped) - 1
    print(f"link x0.5: link calibrated at {calibration['links'][ns_ip]['rate_bps'] / 1e6:.2f} MB/s; captured "
          f"{sorted(round(wall[i] / 1e6) for i in ids)} ms, predicted {p['predicted_ns'] / 1e6:.0f} ms, capped "
          f"{sorted(round(c / 1e6) for c in capped)} ms, error {error:+.1%}; network share "
          f"{classes[sid]['allocated_share']:.2f} allocated, class {classes[sid]['limit']}")
    assert median(capped) > 1.5 * wall[sid], "the slower link must really slow the statement down"
    assert abs(error) <= MAX_ERROR
