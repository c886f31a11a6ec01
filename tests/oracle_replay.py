"""Replays a real 10046 trace's timeline in this process, so that a kernel capture of it is shaped like
the Oracle server process that wrote the trace (no Oracle server runs here): inside each top-level call
its c= as a busy loop from the call's start, each wait (any depth) as a sleep at its place, and what is
left of the call (Oracle's unaccounted-for) as a sleep too; between calls a sleep. Every step ends at
its absolute deadline, so the replay keeps the trace's clock. Prints its start (CLOCK_MONOTONIC ns) and
waits for a line on stdin before it begins.

With --client, the time between calls is a client's, over TCP as a dedicated server's: the replay
listens on a loopback port (printed after its start), and a client process (`--client PORT`) echoes 5
pings (the least echo time it measured is its first line of output), then for each gap of the replay
gets the gap's end, thinks until then and calls again; the replay waits in recv meanwhile. Once
done, the replay prints "done" and keeps its connection until a second line on stdin.

    python tests/oracle_replay.py TRACE LEAD_S [--client]
    python tests/oracle_replay.py --client PORT
"""

from __future__ import annotations

import socket
import struct
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


GAP = struct.Struct("=q")   # a gap's end (CLOCK_MONOTONIC ns; 0: no more)


def client(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        echo = []
        for _ in range(5):
            t = time.monotonic_ns()
            c.sendall(b"p")
            c.recv(1)
            echo.append(time.monotonic_ns() - t)
        print(min(echo), flush=True)
        while True:
            end = GAP.unpack(c.recv(GAP.size, socket.MSG_WAITALL))[0]
            if not end:
                return
            time.sleep(max(0, end - time.monotonic_ns()) / 1e9)
            c.sendall(b"c")


def main() -> None:
    if sys.argv[1] == "--client":
        return client(int(sys.argv[2]))
    path, lead = sys.argv[1], float(sys.argv[2])
    conn = None
    if "--client" in sys.argv[3:]:
        listener = socket.create_server(("127.0.0.1", 0))
        print(listener.getsockname()[1], flush=True)
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(5):
            conn.sendall(conn.recv(1))
    first, steps = schedule(path)
    start = time.monotonic_ns() + int(lead * 1e9)
    print(start, first, flush=True)
    sys.stdin.readline()
    for a, b, kind in steps:
        begin, end = start + a * 1000, start + b * 1000
        if conn is not None and begin - time.monotonic_ns() > 1_000_000:   # the client's turn
            conn.sendall(GAP.pack(begin))
            conn.recv(1)
        elif time.monotonic_ns() < begin:   # between calls: the client's time
            time.sleep((begin - time.monotonic_ns()) / 1e9)
        if kind == "cpu":
            while time.monotonic_ns() < end:
                pass
        else:
            left = end - time.monotonic_ns()
            if left > 0:
                time.sleep(left / 1e9)
    if conn is not None:
        conn.sendall(GAP.pack(0))
        print("done", flush=True)
        sys.stdin.readline()
        conn.close()


if __name__ == "__main__":
    main()
