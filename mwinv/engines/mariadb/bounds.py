"""Statement windows bounded by their thread's own socket calls. performance_schema's timers are mapped
to CLOCK_MONOTONIC through a marker statement, good to some µs only: of 300 point selects (35 µs each)
the mapped windows missed the thread's own command cycle by a median of several µs, one way or the
other. With a thread per connection the kernel trace holds each command's cycle: the read that brought
the command (the last successful recvfrom before the reply), the reply (sendto), and the wait for the
next command (the first recvfrom after the reply). Where a thread answered as many commands as it ran
statements, the two sequences are paired in order; otherwise (commands without a statement, LOAD DATA
LOCAL's several reads) each statement is matched to the cycle nearest to it in time. Each window is then
clamped into its cycle. By time alone, a loaded host's windows (some 50-100 µs long, their cycles 34 µs
apart) reached the middle of the next command's cycle, and 32 of 300 were left unbounded once."""

from __future__ import annotations

import bisect

import pyarrow.compute as pc
import pyarrow.parquet as pq

from mwinv.capture.tables import Capture

EVENTS = ("sys_exit_recvfrom", "sys_enter_recvfrom", "sys_exit_sendto")
NEAR_NS = 100_000   # a cycle whose middle is further than this from the window's is not its


def _socket_calls(capture: Capture, node: str, pids: set[int]) -> dict[int, list[tuple[int, str]]]:
    """pid -> its (time, event) in order: recvfrom exits that read bytes, recvfrom entries, sendto exits."""
    out: dict[int, list[tuple[int, str]]] = {}
    for part in capture.parts("kernel_event"):
        t = pq.read_table(part, columns=["node", "ts_ns", "pid", "event", "syscall_ret"],
                          filters=[("node", "=", node), ("event", "in", EVENTS), ("pid", "in", sorted(pids))])
        t = t.filter(pc.or_kleene(pc.not_equal(t["event"], "sys_exit_recvfrom"),
                                  pc.greater(t["syscall_ret"], 0)))
        for ts, pid, event in zip(*(t[c].to_pylist() for c in ("ts_ns", "pid", "event"))):
            out.setdefault(pid, []).append((ts, event))
    for calls in out.values():
        calls.sort()
    return out


def command_cycles(calls: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """(command read, next wait) of each command the thread answered: the last read before a reply, and
    the first recvfrom entered after it."""
    cycles, read, replied = [], None, False
    for ts, event in calls:
        if event == "sys_exit_recvfrom" and not replied:
            read = ts
        elif event == "sys_exit_sendto" and read is not None:
            replied = True
        elif event == "sys_enter_recvfrom" and replied:
            cycles.append((read, ts))
            read, replied = None, False
    return cycles


def _in_order(spans: list[tuple[int, int, int]], cycles: list[tuple[int, int]], near_ns: int) -> list | None:
    """spans (key, start, end) of one thread in time order paired with its cycles in order, where there
    are as many and 90 % of the pairs lie within near_ns of the pairs' median offset (one window
    of 300 point selects, mapped, took 2.7 ms once); else None."""
    if len(spans) != len(cycles):
        return None
    offsets = [(r + w - s - e) // 2 for (_, s, e), (r, w) in zip(spans, cycles)]
    median = sorted(offsets)[len(offsets) // 2]
    near = sum(abs(d - median) <= near_ns for d in offsets)
    return list(zip(spans, cycles)) if near >= 0.9 * len(offsets) else None


def socket_bounds(capture: Capture, node: str, windows: dict, slack_ns: int = 0) -> tuple[dict, dict]:
    """windows: key -> (pid, start_ns, end_ns) of top-level statements on a thread per connection;
    returns (key -> (start_ns, end_ns) clamped into each statement's command cycle (paired in order, or
    the cycle nearest by middles within NEAR_NS plus slack_ns, the clock mapping's own error), for the
    statements the trace covers, the others keeping their windows; and why the others were not bounded,
    counted)."""
    calls = _socket_calls(capture, node, {pid for pid, _, _ in windows.values() if pid})
    cycles = {pid: command_cycles(c) for pid, c in calls.items()}
    spans: dict[int, list] = {}
    for key, (pid, start, end) in windows.items():
        spans.setdefault(pid, []).append((key, start, end))
    out, why = {}, {"no_socket_calls": 0, "no_cycle_near": 0, "several_cycles": 0}
    for pid, mine in spans.items():
        cs = cycles.get(pid)
        if not cs:
            why["no_socket_calls"] += len(mine)
            continue
        mine.sort(key=lambda x: x[1])
        pairs = _in_order(mine, cs, NEAR_NS + slack_ns)
        if pairs is None:
            pairs = _nearest(mine, cs, NEAR_NS + slack_ns, why)
        for (key, start, end), (read, wait) in pairs:
            new_start, new_end = min(max(start, read), wait), max(min(end, wait), read)
            out[key] = (new_start, new_end) if new_start < new_end else (read, wait)
    return out, why


def _nearest(spans: list, cycles: list[tuple[int, int]], near_ns: int, why: dict) -> list:
    """Each span paired with the cycle whose middle is nearest to its own, within near_ns and with no
    other cycle's middle inside the span; the others counted in why."""
    middles = [(r + w) // 2 for r, w in cycles]
    pairs = []
    for key, start, end in spans:
        mid = (start + end) // 2
        k = bisect.bisect_left(middles, mid)
        k = min((j for j in (k - 1, k) if 0 <= j < len(cycles)), key=lambda j: abs(middles[j] - mid))
        if abs(middles[k] - mid) > near_ns:
            why["no_cycle_near"] += 1
        elif bisect.bisect_right(middles, end) - bisect.bisect_left(middles, start) > 1:
            why["several_cycles"] += 1   # LOAD DATA LOCAL reads its file from the client
        else:
            pairs.append(((key, start, end), cycles[k]))
    return pairs
