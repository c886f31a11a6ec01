"""Transient bottlenecks: each replica in short windows (the sampler's interval, 100 ms by default) with
its CPU utilisation, run-queue wait and disk reads (its processes', /proc), the statements in flight (their
overlap with the window over its length) and those completed. A window is saturated on a replica at
SATURATED_UTIL or more of a resource's capacity: its CPUs, and with their caps its disk read rate or its
link (analyse.py's usage); saturated windows are single (one replica), concurrent (two or
more at once) or oscillating (one replica, another than in the saturated window just before): seed
004's multi-bottlenecks, which averages over the run do not show."""

from __future__ import annotations

from mwinv.correlator.load import literal
from mwinv.ntier.analyse import SATURATED_UTIL

EPISODES = 20          # saturated windows listed per level
OSCILLATION_GAP = 2    # windows: a saturated window this close after another counts as its successor


def saturation(con, record: dict) -> dict:
    """Per load level: windows, how many saturated and of which kind, each replica's mean CPU utilisation,
    and the first EPISODES saturated windows with the statements running in
    them. Needs the views levels, stmt, psample and usage (mwinv/ntier/analyse.py)."""
    iv = int(record["config"]["sample_interval_s"] * 1e9)
    util = {}   # (clients, window, replica) -> (busiest resource's utilisation, that resource, run queue,
    cpu = {}    # disk read MB/s); and its CPU utilisation
    for clients, node, w, busiest, resource, runq, read, cpus in con.execute(f"""
            SELECT l.clients, u.node, (u.ts_ns - l.lo - 1) // {iv} AS w, max(u.used / u.capacity),
                   arg_max(u.resource, u.used / u.capacity), any_value(p.runq), any_value(p.read),
                   max(u.used / u.capacity) FILTER (WHERE u.resource = 'cpu')
            FROM usage u JOIN levels l ON u.ts_ns > l.lo AND u.ts_ns <= l.hi
            LEFT JOIN (SELECT node, ts_ns, sum(runqueue_wait_ns) / any_value(interval_ns) AS runq,
                              sum(read_bytes) * 1e3 / any_value(interval_ns) AS read
                       FROM psample WHERE interval_ns > 0 GROUP BY ALL) p USING (node, ts_ns)
            WHERE u.node NOT IN ('primary', 'pgpool') GROUP BY ALL""").fetchall():
        util[(clients, w, node)] = (busiest, resource, runq or 0.0, read or 0.0)
        cpu[(clients, w, node)] = cpus or 0.0
    flight = {(c, w, n): (f, d) for c, n, w, f, d in con.execute(f"""
            SELECT s.clients, s.node, x.w,
                   sum(least(s.end_ns, l.lo + (x.w + 1) * {iv}) - greatest(s.start_ns, l.lo + x.w * {iv})) / {iv},
                   count(*) FILTER (WHERE s.end_ns <= l.lo + (x.w + 1) * {iv})
            FROM stmt s JOIN levels l USING (clients),
                 LATERAL (SELECT unnest(range((s.start_ns - l.lo) // {iv}, (s.end_ns - l.lo) // {iv} + 1)) AS w) x
            GROUP BY ALL""").fetchall()}
    out = {}
    for lv in record["levels"]:
        c = lv["clients"]
        windows = sorted({w for (cl, w, _) in util if cl == c})
        nodes = sorted({n for (cl, _, n) in util if cl == c})
        kinds = {"single": 0, "concurrent": 0, "oscillating": 0}
        episodes, last = [], None   # last: (window, the replicas saturated in it)
        for w in windows:
            hot = [n for n in nodes if util.get((c, w, n), (0,))[0] >= SATURATED_UTIL]
            if not hot:
                continue
            kind = "concurrent" if len(hot) > 1 else "oscillating" if (
                last and w - last[0] <= OSCILLATION_GAP and last[1] != hot) else "single"
            kinds[kind] += 1
            last = (w, hot)
            if len(episodes) < EPISODES:
                episodes.append({"t_s": round(w * iv / 1e9, 2), "kind": kind, "replicas": {
                    n: {"util": round(util[(c, w, n)][0], 2), "resource": util[(c, w, n)][1],
                        "runqueue": round(util[(c, w, n)][2], 2), "disk_read_mb_s": round(util[(c, w, n)][3], 2),
                        "in_flight": round(flight.get((c, w, n), (0, 0))[0], 2),
                        "completed": flight.get((c, w, n), (0, 0))[1],
                        "statements": _running(con, c, w, n, iv)} for n in hot}})
        out[str(c)] = {"window_ms": iv / 1e6, "windows": len(windows), "saturated": sum(kinds.values()), **kinds,
                       "mean_util": {n: round(sum(cpu.get((c, w, n), 0) for w in windows)
                                              / max(1, len(windows)), 3) for n in nodes},
                       "saturated_windows": {n: [w * iv / 1e9 for w in windows
                                                 if util.get((c, w, n), (0,))[0] >= SATURATED_UTIL]
                                             for n in nodes},
                       "episodes": episodes}
    return out


def _running(con, clients: int, w: int, node: str, iv: int) -> list[list]:
    """The query ids that ran longest in window w on node: [[query id, ms in the window]], three."""
    return [[str(q), round(ns / 1e6, 2)] for q, ns in con.execute(f"""
        SELECT s.key, sum(least(s.end_ns, l.lo + {(w + 1) * iv}) - greatest(s.start_ns, l.lo + {w * iv}))
        FROM stmt s JOIN levels l USING (clients)
        WHERE s.clients = {literal(clients)} AND s.node = {literal(node)}
          AND s.end_ns > l.lo + {w * iv} AND s.start_ns < l.lo + {(w + 1) * iv}
        GROUP BY 1 ORDER BY 2 DESC LIMIT 3""").fetchall()]
