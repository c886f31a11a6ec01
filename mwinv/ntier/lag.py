"""Replication lag during a run: a replica that falls behind serves reads of an older state and no longer
runs the load the primary's does, so a run with one is not the scale-out it claims to measure. Every
CHECK_S the primary's WAL flush position and each replica's replay position are read; a replica's lag is
the WAL it has not replayed (bytes) and how long ago the primary was first past its replay position (s,
to CHECK_S; the least it can be behind). Each level keeps each replica's largest; one over max_lag_s
ends the run with one line (scenario.py), like a replica that died.

    watch = LagWatch(primary, {"r1": r1, "r2": r2}, max_lag_s=5)
    watch.check(now_ns)    # {"r2": (bytes, seconds)}; raises LagError over max_lag_s
    watch.close()"""

from __future__ import annotations

import bisect
import time

import psycopg

from mwinv.errors import MwinvError

CHECK_S = 0.5
POSITION = "SELECT {}() - '0/0'::pg_lsn"   # an LSN as a number of bytes


class LagError(MwinvError):
    pass


class LagWatch:
    def __init__(self, primary, replicas: dict, max_lag_s: float):
        self.max_lag_s = max_lag_s
        self.times: list[int] = []       # when the primary's position was read (monotonic ns)
        self.positions: list[int] = []   # its flush position then: non-decreasing
        self.last_ns = 0
        self.conns: dict[str, psycopg.Connection] = {}
        try:
            # not recorded by the extension: the captures keep the workload's statements only
            for name, server in {"primary": primary, **replicas}.items():
                self.conns[name] = psycopg.connect(server.conninfo(), autocommit=True, connect_timeout=10,
                                                   options="-c mwinv.track=none")
        except psycopg.Error as exc:
            self.close()
            raise MwinvError(f"replication lag: cannot connect to {name} ({str(exc).strip().splitlines()[0]})") \
                from None

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns = {}

    def _position(self, name: str, function: str) -> int | None:
        try:
            value = self.conns[name].execute(POSITION.format(function)).fetchone()[0]
        except psycopg.Error:   # a server that died: its watcher says so
            return None
        return None if value is None else int(value)

    def check(self, now_ns: int | None = None) -> dict[str, tuple[int, float]] | None:
        """Each replica's (bytes, seconds) behind now, at most every CHECK_S (None between); LagError when
        one is more than max_lag_s behind."""
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        if now_ns - self.last_ns < CHECK_S * 1e9:
            return None
        self.last_ns = now_ns
        primary = self._position("primary", "pg_current_wal_flush_lsn")
        if primary is None:
            return None
        if not self.positions or primary > self.positions[-1]:
            self.times.append(now_ns)
            self.positions.append(primary)
        out = {}
        for name in list(self.conns)[1:]:
            replayed = self._position(name, "pg_last_wal_replay_lsn")
            if replayed is None:
                continue
            # the first time the primary was past what the replica replayed
            i = bisect.bisect_right(self.positions, replayed)
            seconds = (now_ns - self.times[i]) / 1e9 if i < len(self.times) else 0.0
            out[name] = (max(0, primary - replayed), seconds)
            if seconds > self.max_lag_s:
                raise LagError(f"replica {name} fell {seconds:.1f} s behind the primary "
                               f"({out[name][0] / 1e6:.1f} MB of WAL not replayed)")
        return out
