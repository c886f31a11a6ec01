"""Replays a real 10046 trace's timeline in this process, so that a kernel capture of it is shaped like
the Oracle server process that wrote the trace (no Oracle server runs here): inside each top-level call
its c= as a busy loop from the call's start, each wait (any depth) as a sleep at its place, and what is
left of the call (Oracle's unaccounted-for) as a sleep too; between calls a sleep. Every step ends at
its absolute deadline, so the replay keeps the trace's clock. Prints its start (CLOCK_MONOTONIC ns) and
waits for a line on stdin before it begins.

    python tests/oracle_replay.py TRACE LEAD_S
"""

from __future__ import annotations

import sys
import time

from mwinv.engines.oracle.trace10046 import BETWEEN_CALL_EVENTS, parse


def schedule(path: str) -> tuple[int, list[tuple[int, int, str]]]:
    """(first µs, [(start µs, end µs, 'cpu' | 'sleep')]) relative to the first top-level call or wait."""
    tf = parse(path)
    calls = sorted((c for c in tf.calls if c.dep == 0), key=lambda c: c.start)
    waits = [w for w in tf.waits if w.name not in BETWEEN_CALL_EVENTS]
    t0 = min([c.start for c in calls] + [w.tim - w.ela for w in tf.waits])
    steps = []
    for c in calls:
        inside = sorted((w.tim - w.ela, w.tim) for w in waits if c.start <= w.tim <= c.tim)
        t, cpu = c.start, c.c
        for a, b in inside:
            a = max(a, t)
            if a > t:
                burn = min(cpu, a - t)
                if burn:
                    steps.append((t - t0, t + burn - t0, "cpu"))
                cpu -= burn
                if t + burn < a:
                    steps.append((t + burn - t0, a - t0, "sleep"))
            if b > a:
                steps.append((a - t0, b - t0, "sleep"))
            t = max(t, b)
        if c.tim > t:
            burn = min(cpu, c.tim - t)
            if burn:
                steps.append((t - t0, t + burn - t0, "cpu"))
            if t + burn < c.tim:
                steps.append((t + burn - t0, c.tim - t0, "sleep"))
    return t0, steps


def main() -> None:
    path, lead = sys.argv[1], float(sys.argv[2])
    first, steps = schedule(path)
    start = time.monotonic_ns() + int(lead * 1e9)
    print(start, first, flush=True)
    sys.stdin.readline()
    for a, b, kind in steps:
        begin, end = start + a * 1000, start + b * 1000
        if time.monotonic_ns() < begin:   # between calls: the client's time
            time.sleep((begin - time.monotonic_ns()) / 1e9)
        if kind == "cpu":
            while time.monotonic_ns() < end:
                pass
        else:
            left = end - time.monotonic_ns()
            if left > 0:
                time.sleep(left / 1e9)


if __name__ == "__main__":
    main()
