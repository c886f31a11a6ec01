"""The attribution's state machine on hand-written event streams, one case per row of the table in
docs/attribution.md ("Which evidence decides each component"): no root, no tracefs, no server. Each
case is one statement on its own pid, 10 ms long; its kernel events are written as a real capture's
would be (the recorder's event names and columns), and the correlator runs on the capture directory."""

import pytest

from mwinv.capture.tables import ATTRIBUTION_COMPONENTS, Capture
from mwinv.correlator.pipeline import correlate
from mwinv.kernel_trace.syscalls import numbers

MS = 1_000_000
NODE = "n1"
EAGAIN = -11


def nr(name: str) -> int:
    return numbers(name)[0]


def switch_out(t, pid, state="S", cpu=0):
    return dict(ts_ns=t, cpu=cpu, pid=pid, event="sched_switch", prev_pid=pid, prev_state=state, next_pid=0)


def switch_in(t, pid, cpu=0):
    return dict(ts_ns=t, cpu=cpu, pid=0, event="sched_switch", prev_pid=0, prev_state="R", next_pid=pid)


def wakeup(t, pid, waker=0):
    return dict(ts_ns=t, cpu=0, pid=waker, event="sched_wakeup", target_pid=pid)


def enter(t, pid, call):
    return dict(ts_ns=t, cpu=0, pid=pid, event="sys_enter", syscall_nr=nr(call))


def leave(t, pid, call, ret=0):
    return dict(ts_ns=t, cpu=0, pid=pid, event="sys_exit", syscall_nr=nr(call), syscall_ret=ret)


def probe(t, pid, name):
    return dict(ts_ns=t, cpu=0, pid=pid, event=name)


def block(t_issue, t_done, pid, sector, nbytes=8192):
    return [dict(ts_ns=t_issue, cpu=0, pid=pid, event="block_rq_issue", dev="254:0", sector=sector, nr_bytes=nbytes,
                 rwbs="R"),
            dict(ts_ns=t_done, cpu=0, pid=0, event="block_rq_complete", dev="254:0", sector=sector, nr_bytes=nbytes,
                 rwbs="R")]


def sleep_in(pid, call, ret=0, before=()):
    """Running 0-2 ms, asleep in `call` 2-8 ms (woken at 8), running again 8-10 ms."""
    return [*before, enter(2 * MS, pid, call), switch_out(2 * MS + 1, pid), wakeup(8 * MS, pid),
            switch_in(8 * MS, pid), leave(8 * MS + 1, pid, call, ret)]


# name -> (events of pid p from its statement's start at 0, the component that holds 2-8 ms)
CASES = {
    "running": (lambda p: [enter(2 * MS, p, "getpid"), leave(8 * MS, p, "getpid")], "cpu_user"),
    "run_queue": (lambda p: [switch_out(2 * MS, p, "R"), switch_in(8 * MS, p)], "run_queue"),
    "lock_probe": (lambda p: [probe(2 * MS - 1, p, "pg_lock_wait_start_0"), *sleep_in(p, "epoll_wait"),
                              probe(8 * MS + 2, p, "pg_lock_wait_done_0")], "lock_wait"),
    "own_random_read": (lambda p: [*block(2 * MS, 8 * MS, p, 1000), *block(2 * MS, 8 * MS, p, 900_000),
                                   *sleep_in(p, "pread64")], "disk_random"),
    # D state in a file read without requests of its own (readahead or writeback issued them elsewhere)
    "file_read_in_d_state": (lambda p: [enter(2 * MS, p, "pread64"), switch_out(2 * MS + 1, p, "D"),
                                        wakeup(8 * MS, p), switch_in(8 * MS, p), leave(8 * MS + 1, p, "pread64")],
                             "disk_random"),
    # a request of its own in flight explains a sleep a completion can end, not a wait on sockets or a latch
    "futex_with_own_request": (lambda p: [*block(MS, 9 * MS, p, 1000), *sleep_in(p, "futex")], "disk_random"),
    "epoll_with_own_request": (lambda p: [*block(MS, 9 * MS, p, 1000), *sleep_in(p, "epoll_wait")], "other_wait"),
    "socket_with_own_request": (lambda p: [*block(MS, 9 * MS, p, 1000), *sleep_in(p, "recvfrom")], "network"),
    "socket_sleep": (lambda p: sleep_in(p, "recvfrom"), "network"),
    "epoll_after_send_eagain": (lambda p: sleep_in(p, "epoll_wait", before=[
        enter(MS, p, "sendto"), leave(MS + 1, p, "sendto", EAGAIN)]), "network"),
    "epoll_after_recv_eagain": (lambda p: sleep_in(p, "epoll_wait", before=[
        enter(MS, p, "recvfrom"), leave(MS + 1, p, "recvfrom", EAGAIN)]), "client_wait"),
    "futex": (lambda p: sleep_in(p, "futex"), "lock_wait"),
    "other_sleep": (lambda p: sleep_in(p, "epoll_wait"), "other_wait"),
    # no event of the task from before its statement to 8 ms: nothing tells what it did
    "no_evidence": (lambda p: [switch_in(8 * MS, p), enter(8 * MS + 1, p, "getpid")], "not_allocated"),
}


@pytest.fixture(scope="module")
def attributed(tmp_path_factory):
    cap = Capture(tmp_path_factory.mktemp("cases") / "capture").create(node=NODE)
    statements, events = [], []
    base = 1_000 * MS
    for i, (name, (make, _)) in enumerate(CASES.items()):
        pid, t0 = 1000 + i, base + i * 20 * MS
        statements.append(dict(node=NODE, dbms="postgresql", pid=pid, statement_id=i + 1, query_id=i + 1,
                               query_text_hash=i + 1, start_ns=t0, end_ns=t0 + 10 * MS, nesting_level=0,
                               errored=False))
        if name != "no_evidence":   # the task was switched in before its statement began: it runs from the start
            events.append(dict(node=NODE, **switch_in(t0 - MS, pid)))
        events += [dict(ev, node=NODE, ts_ns=t0 + ev["ts_ns"]) for ev in make(pid)]
    # one statement outside the trace: the extension's rusage and its client_wait_ns are all there is
    statements.append(dict(node=NODE, dbms="postgresql", pid=999, statement_id=100, query_id=100,
                           query_text_hash=100, start_ns=base + 10_000 * MS, end_ns=base + 10_010 * MS,
                           cpu_user_ns=3 * MS, cpu_sys_ns=MS, client_wait_ns=5 * MS, nesting_level=0,
                           errored=False))
    # two statements on a CPU throughout with the extension's rusage: one longer than RUSAGE_MIN_WALL_NS,
    # whose CPU total is its rusage, one shorter, whose CPU total is its running time
    for sid, t0, wall, user, sys in ((101, base + 400 * MS, 60 * MS, 30 * MS, 10 * MS),
                                     (102, base + 500 * MS, 10 * MS, 3 * MS, MS)):
        statements.append(dict(node=NODE, dbms="postgresql", pid=sid, statement_id=sid, query_id=sid,
                               query_text_hash=sid, start_ns=t0, end_ns=t0 + wall, cpu_user_ns=user,
                               cpu_sys_ns=sys, client_wait_ns=0, nesting_level=0, errored=False))
        events += [dict(node=NODE, **ev) for ev in (switch_in(t0 - MS, sid), enter(t0 + MS, sid, "getpid"),
                                                   leave(t0 + 2 * MS, sid, "getpid"), switch_out(t0 + wall + MS, sid))]
    events.append(dict(node=NODE, **switch_in(base + 600 * MS, 999)))   # the trace's end
    cap.write_part("statement", statements, node=NODE)
    cap.write_part("statement_text", [dict(query_text_hash=s["statement_id"], query_id=s["query_id"],
                                           text=f"case {s['statement_id']}") for s in statements], node=NODE)
    cap.write_part("kernel_event", sorted(events, key=lambda e: e["ts_ns"]), node=NODE)
    db = correlate(cap.path, write=False)
    return {sid: dict(db.sql(f"SELECT component, ns FROM statement_attribution WHERE statement_id = {sid}").fetchall())
            for sid in [*range(1, len(CASES) + 1), 100, 101, 102]}


@pytest.mark.parametrize("case", list(CASES))
def test_case_component(attributed, case):
    i = list(CASES).index(case) + 1
    comp = attributed[i]
    assert set(comp) <= set(ATTRIBUTION_COMPONENTS) and 0 not in comp.values()   # a component of 0 has no row
    comp = {c: comp.get(c, 0) for c in ATTRIBUTION_COMPONENTS}
    assert sum(comp.values()) == 10 * MS
    expected = CASES[case][1]
    # the 6 ms between the sleep's start and its end (give or take the probes' nanoseconds)
    assert comp[expected] >= 6 * MS - 10, (case, comp)
    others = {c: v for c, v in comp.items() if c not in (expected, "cpu_user", "cpu_sys")}
    assert sum(others.values()) <= 10, (case, comp)


def test_outside_the_trace_takes_the_extensions_figures(attributed):
    comp = attributed[100]
    assert comp["cpu_user"] == 3 * MS and comp["cpu_sys"] == MS
    assert comp["client_wait"] == 5 * MS
    assert comp["not_allocated"] == MS


def test_a_statement_on_a_cpu_throughout_splits_its_cpu_by_its_rusage(attributed):
    # 60 ms running, its rusage 30 + 10 ms: that is its CPU, the rest waited for one (sql/summed_statement.sql)
    assert attributed[101] == {"cpu_user": 30 * MS, "cpu_sys": 10 * MS, "run_queue": 20 * MS}
    # 10 ms, too short for its rusage's total: all of it CPU, split 3:1 as its rusage
    assert attributed[102] == {"cpu_user": 7_500_000, "cpu_sys": 2_500_000}
