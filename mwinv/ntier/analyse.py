"""Distributions, not averages, of an n-tier run (mwinv/ntier/scenario.py): per statement (query id)
from every execution the replicas' and the primary's captures hold, and per page from pgbench's log of
every transaction (its latency less the think time), over the measured period of each load level and
over all of them: count, p50, p90, p99, max and a histogram in quarter-decade bins. Per tier (each
server, pgpool) and resource with a capacity (CPU; with their caps, a replica's disk reads and each
tier's link) the density of its utilisation samples per level, saturated when most of them sit near
that capacity. Then the rare heavy statements: orders of magnitude above their peers, rare, and a
large share of the time in the database.

    result = analyse("out/ntier")       # also out/ntier/distributions.json and .csv"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from pathlib import Path

import duckdb
import pyarrow as pa

from mwinv import privfile
from mwinv.capture.tables import Capture
from mwinv.correlator.load import literal
from mwinv.errors import MwinvError
from mwinv.ntier import bboard
from mwinv.ntier.balancer import balancer_time

BINS_PER_DECADE = 4
SATURATED_UTIL = 0.9      # a sample at or above 90 % of the tier's capacity counts as saturated
SATURATED_SHARE = 0.5     # a tier is saturated at a level when most of its samples are
HEAVY_RATIO = 10.0        # p50 at least this many times its peers' median p50
HEAVY_MAX_FREQ = 0.05     # at most this share of the executions
HEAVY_MIN_SHARE = 0.10    # at least this share of the time in the database
PERCENTILES = ("p50", "p90", "p99")
EVIDENCE = "evidence.json"
RESOURCE_NAMES = {"cpu": "CPU", "disk": "disk", "link": "link"}


def _summaries(con, rel: str) -> dict:
    """Per (clients, key) and per key over all levels (clients NULL): count, percentiles, max, mean,
    total (ns), and the histogram [(bin lower ns, upper ns, count)] of rel(clients, key, d, cpu, rb)."""
    out: dict = {}
    for clients, key, n, p50, p90, p99, mx, mean, total, cpu, rb in con.execute(f"""
            SELECT clients, key, count(*), quantile_disc(d, 0.5), quantile_disc(d, 0.9), quantile_disc(d, 0.99),
                   max(d), avg(d), sum(d), sum(cpu), sum(rb)
            FROM {rel} GROUP BY GROUPING SETS ((clients, key), (key))""").fetchall():
        out[(clients, key)] = {"n": n, "p50_ns": p50, "p90_ns": p90, "p99_ns": p99, "max_ns": mx,
                               "mean_ns": round(mean), "total_ns": int(total), "cpu_ns": cpu, "read_bytes": rb,
                               "histogram": []}
    for clients, key, b, n in con.execute(f"""
            SELECT clients, key, floor(log10(greatest(d, 1)) * {BINS_PER_DECADE})::int AS b, count(*)
            FROM {rel} GROUP BY GROUPING SETS ((clients, key, b), (key, b)) ORDER BY b""").fetchall():
        out[(clients, key)]["histogram"].append([round(10 ** (b / BINS_PER_DECADE)),
                                                 round(10 ** ((b + 1) / BINS_PER_DECADE)), n])
    return out


def _page_rows(record: dict) -> pa.Table:
    """Every pgbench transaction of a level's measured period: (clients, page, latency less think, ns).
    A log line: client, transaction, latency µs, script, end epoch s, end µs."""
    pages = list(bboard.PAGES)
    think_ns = int(record["config"]["think_ms"] * 1e6)
    cols: dict[str, list] = {"clients": [], "key": [], "d": []}
    for level in record["levels"]:
        lo, hi = level["run_wall_ns"]
        for log in level["pgbench_logs"]:
            with open(log) as f:
                for lineno, line in enumerate(f, 1):
                    try:
                        _, _, lat_us, script, sec, usec = line.split()[:6]
                        lat, end = int(lat_us) * 1000, int(sec) * 10**9 + int(usec) * 1000
                        page = pages[int(script)]
                    except (ValueError, IndexError):
                        raise MwinvError(f"{log}: line {lineno}: not a pgbench transaction log line") from None
                    if end - lat >= lo and end <= hi:
                        cols["clients"].append(level["clients"])
                        cols["key"].append(page)
                        cols["d"].append(max(0, lat - think_ns))
    n = len(cols["d"])
    return pa.table({**cols, "cpu": pa.nulls(n, pa.int64()), "rb": pa.nulls(n, pa.int64())})


def _levels_table(record: dict) -> pa.Table:
    lv = record["levels"]
    return pa.table({"clients": [x["clients"] for x in lv], "lo": [x["run_mono_ns"][0] for x in lv],
                     "hi": [x["run_mono_ns"][1] for x in lv]})


def _capacity(record: dict, node: str) -> float:
    cfg = record["config"]
    cap = cfg["pool_cpu"] if node == "pgpool" else cfg["replica_cpu"] if node.startswith("r") else None
    return float(cap or os.cpu_count())


def capacities(record: dict, node: str) -> dict[str, float]:
    """A tier's resources with a capacity: CPU (CPUs; a node uncapped has the host's), with their caps a
    replica's disk reads and every tier's link, each way (bytes/s)."""
    cfg = record["config"]
    out = {"cpu": _capacity(record, node)}
    if cfg.get("replica_read_mbps") and node.startswith("r"):
        out["disk"] = cfg["replica_read_mbps"] * 1e6
    if cfg.get("link_mbit") and node in record.get("links", {}):
        out["link"] = cfg["link_mbit"] * 1e6 / 8
    return out


def _usage(con, record: dict, cap: Capture) -> None:
    """usage(node, resource, ts_ns, interval_ns, used, capacity): per sample each tier's CPUs on a CPU,
    bytes/s its processes read from the disk, and bytes/s its link moved the busier way (its veth's
    counters in its namespace, node_sample; tbf caps each way alone), beside the capacity."""
    caps = [(n, r, c) for n in {*record["servers"], "pgpool"} for r, c in capacities(record, n).items()]
    con.register("caps", pa.table({"node": [c[0] for c in caps], "resource": [c[1] for c in caps],
                                   "capacity": [float(c[2]) for c in caps]}))
    links = record.get("links", {})
    con.register("iface", pa.table({"node": list(links), "iface": [v["iface"] for v in links.values()]}))
    net = """UNION ALL SELECT n.node, 'link', n.ts_ns, n.interval_ns,
                    greatest(n.net_rx_bytes, n.net_tx_bytes) * 1e9 / n.interval_ns
             FROM nsample n JOIN iface i ON n.node = i.node AND n.net_iface = i.iface WHERE n.interval_ns > 0"""
    if cap.has("node_sample"):
        con.register("nsample", cap.read("node_sample"))
    con.execute(f"""CREATE VIEW usage AS SELECT u.*, c.capacity FROM (
          SELECT node, 'cpu' AS resource, ts_ns, any_value(interval_ns) AS interval_ns,
                 sum(run_ns) / any_value(interval_ns) AS used FROM psample WHERE interval_ns > 0 GROUP BY ALL
          UNION ALL SELECT node, 'disk', ts_ns, any_value(interval_ns), sum(read_bytes) * 1e9 / any_value(interval_ns)
          FROM psample WHERE interval_ns > 0 GROUP BY ALL
          {net if cap.has("node_sample") else ""}) u JOIN caps c USING (node, resource)""")


def analyse(out: str | Path) -> dict:
    out = Path(out)
    try:
        record = json.loads((out / "ntier.json").read_text())
    except FileNotFoundError:
        raise MwinvError(f"{out}: no ntier.json (not the output of `mwinv ntier run`)") from None
    except json.JSONDecodeError as exc:
        raise MwinvError(f"{out / 'ntier.json'}: line {exc.lineno}: invalid JSON ({exc.msg})") from None
    if not record.get("levels"):
        raise MwinvError(f"{out}: no load level was measured" + (f" ({record['error']})" if record.get("error") else ""))
    cap = Capture(out / "capture")
    con = duckdb.connect()
    con.register("levels", _levels_table(record))
    con.register("pages", _page_rows(record))
    run_s = record["config"]["run_s"]
    result: dict = {"config": record["config"], "error": record.get("error"), "levels": [], "statements": {},
                    "pages": {}, "tiers": {}, "texts": {}, "node_cpu_ns": {},
                    "saturation": {}, "balancer": {}}
    if cap.has("statement"):
        con.register("stmt_raw", cap.read("statement"))
        # the workload's top-level statements, in a level's measured period
        con.execute(f"""CREATE VIEW stmt AS SELECT l.clients, s.node, s.pid, s.query_id AS key, s.start_ns, s.end_ns,
                           s.end_ns - s.start_ns AS d,
                           coalesce(s.cpu_user_ns, 0) + coalesce(s.cpu_sys_ns, 0) AS cpu, s.read_bytes AS rb
                       FROM stmt_raw s JOIN levels l ON s.start_ns >= l.lo AND s.end_ns <= l.hi
                       WHERE s.database = {literal(bboard.DATABASE)} AND coalesce(s.nesting_level, 0) = 0
                         AND s.query_id IS NOT NULL AND NOT coalesce(s.errored, false)""")
    else:
        con.execute("CREATE VIEW stmt AS SELECT NULL::int AS clients, NULL::varchar AS node, NULL::int AS pid, "
                    "NULL::bigint AS key, NULL::bigint AS start_ns, NULL::bigint AS end_ns, NULL::bigint AS d, "
                    " NULL::bigint AS cpu, NULL::bigint AS rb WHERE false")
    if cap.has("statement_text"):
        con.register("texts", cap.read("statement_text"))
        result["texts"] = {str(q): t for q, t in con.execute(
            "SELECT query_id, any_value(text) FROM texts WHERE query_id IS NOT NULL GROUP BY 1").fetchall()}
    stmts, pages = _summaries(con, "stmt"), _summaries(con, "pages")
    sessions = _owners(con, record)
    _round_trips(con, record)
    result["round_trip"] = {"all" if c is None else str(c): v for (c, _), v in _summaries(con, "round_trip").items()}
    served = {}
    for clients, key, node, n, busy in con.execute(
            "SELECT clients, key, node, count(*), sum(d) FROM stmt GROUP BY GROUPING SETS ((clients, key, node), "
            "(key, node), (clients, node))").fetchall():
        served.setdefault((clients, key), {})[node] = {"n": n, "db_ns": int(busy)}
    for (clients, key), s in stmts.items():
        s["nodes"] = served.get((clients, key), {})
    for lv in record["levels"]:
        c = lv["clients"]
        n_pages = sum(v["n"] for (cl, _), v in pages.items() if cl == c)
        result["levels"].append({
            "clients": c, "pages_per_s": round(n_pages / run_s, 1),
            "statements_per_s": round(sum(v["n"] for (cl, _), v in stmts.items() if cl == c) / run_s, 1),
            "db_busy_by_node": {n: round(v["db_ns"] / (run_s * 1e9), 3) for n, v in served.get((c, None), {}).items()},
            "sessions_by_node": sessions.get(c, {}), "replica_lag": lv.get("lag", {}),
            "pgpool_select_cnt": {f"node {x['node_id']} ({x['role']})": int(x["select_cnt"])
                                  for x in lv.get("pgpool_nodes", [])}})
    for (clients, key), s in stmts.items():
        result["statements"].setdefault(str(key), {})["all" if clients is None else str(clients)] = s
    for (clients, key), s in pages.items():
        result["pages"].setdefault(key, {})["all" if clients is None else str(clients)] = s
    if cap.has("process_sample"):
        con.register("psample_raw", cap.read("process_sample"))
        # a pid's first sample counts from its start, which the sampler saw up to a refresh late: a
        # backend's start lumped into one 100 ms window read 689 % of a 0.1-CPU replica
        con.execute("CREATE VIEW psample AS SELECT * FROM psample_raw "
                    "QUALIFY ts_ns > min(ts_ns) OVER (PARTITION BY node, pid)")
        _usage(con, record, cap)
        result["tiers"] = _tiers(con, record)
        _io(con, record, cap, result["tiers"])
        from mwinv.ntier.windows import saturation   # it reads this module's thresholds

        result["saturation"] = saturation(con, record)
        result["node_cpu_ns"] = dict(con.execute(
            "SELECT p.node, sum(p.run_ns)::bigint FROM psample p JOIN levels l "
            "ON p.ts_ns > l.lo AND p.ts_ns <= l.hi GROUP BY 1").fetchall())
    if cap.has("kernel_event"):   # with --trace: the time spent in pgpool, per statement
        con.register("kernel_event", cap.read("kernel_event"))
        result["balancer"] = balancer_time(con, record, _summaries)
    result["rare_heavy"] = rare_heavy(result)
    taken = out / EVIDENCE   # the plans taken while the servers ran (mwinv/ntier/evidence.py), kept
    if taken.exists():
        kept = json.loads(taken.read_text())
        for f in result["rare_heavy"]:
            f.update(kept.get(f["query_id"], {}))
    save(out, result)
    return result


def _owners(con, record: dict) -> dict:
    """owner(clients, node, pid, pgpool_pid, client): the sessions' links of each level (scenario.py);
    returns per level the client sessions per replica that served them, a replica counted where the
    pgpool child's backend there ran statements (pgpool connects a session to every backend, the
    primary too, and sends its reads to one)."""
    rows = [(lv["clients"], s["node"], s["backend_pid"], s["pgpool_pid"], s["client"]) for lv in record["levels"]
            for s in lv.get("sessions", [])]
    con.register("owner", pa.table({"clients": [r[0] for r in rows], "node": [r[1] for r in rows],
                                    "pid": pa.array([r[2] for r in rows], pa.int32()),
                                    "pgpool_pid": pa.array([r[3] for r in rows], pa.int32()),
                                    "client": pa.array([r[4] for r in rows], pa.string())}))
    out: dict = {}
    for clients, node, n in con.execute(
            "SELECT o.clients, o.node, count(DISTINCT o.pgpool_pid) FROM owner o WHERE o.client IS NOT NULL "
            "AND o.node <> 'primary' AND EXISTS (SELECT 1 FROM stmt s WHERE s.clients = o.clients "
            "AND s.node = o.node AND s.pid = o.pid) GROUP BY ALL").fetchall():
        out.setdefault(clients, {})[node] = n
    return out


def _round_trips(con, record: dict) -> None:
    """round_trip(clients, key, d, cpu, rb): from the end of a statement to the start of the next one of the
    same page, on the backends of one pgpool child (the sessions' links; a backend not linked stands
    alone). That is the answer's way back through pgpool to pgbench and the next statement's way in:
    the time outside the database per statement. Gaps of half the think time or more are between
    pages (no round trip without think time)."""
    half_think = int(record["config"]["think_ms"] * 1e6 / 2)
    con.execute(f"""CREATE VIEW round_trip AS SELECT clients, 'round trip' AS key, d, NULL::bigint AS cpu,
                        NULL::bigint AS rb FROM (
                      SELECT s.clients, s.start_ns - lag(s.end_ns) OVER (PARTITION BY s.clients,
                             coalesce('pgpool ' || o.pgpool_pid, s.node || ' ' || s.pid) ORDER BY s.start_ns) AS d
                      FROM stmt s LEFT JOIN owner o USING (clients, node, pid))
                    WHERE d >= 0 AND d < {half_think}""")


def _tiers(con, record: dict) -> dict:
    """Per node, resource with a capacity and level, its utilisation samples (usage): p50, p90, max, the
    share at or above SATURATED_UTIL and a 10-bin density. CPU: all its processes' time on a CPU over the
    interval, schedstat's ns, not utime's 10 ms ticks, which made a 100 ms window of a 0.1-CPU replica
    read 0 %, 100 % or 400 %. A level's CPU figures sit at its top, those of its disk and link under
    "disk" and "link"."""
    rows = con.execute("""
        SELECT l.clients, u.node, u.resource, u.used / u.capacity
        FROM usage u JOIN levels l ON u.ts_ns > l.lo AND u.ts_ns <= l.hi ORDER BY 1, 2, 3, u.ts_ns""").fetchall()
    by: dict = {}
    for clients, node, resource, util in rows:
        by.setdefault(node, {}).setdefault(str(clients), {}).setdefault(resource, []).append(util)
    out: dict = {}
    for node, levels in by.items():
        caps = capacities(record, node)
        out[node] = {"capacity_cpus": caps["cpu"], "levels": {},
                     "capacity_mb_s": {r: round(c / 1e6, 3) for r, c in caps.items() if r != "cpu"}}
        for clients, resources in levels.items():
            out[node]["levels"][clients] = {**_spread(resources.get("cpu", [])),
                                            **{r: _spread(u) for r, u in resources.items() if r != "cpu"}}
    return out


def _spread(util: list[float]) -> dict:
    if not util:
        return {"samples": 0, "p50": 0.0, "p90": 0.0, "max": 0.0, "saturated_share": 0.0, "saturated": False,
                "density": [0] * 10}
    util = sorted(util)
    density = [0] * 10
    for u in util:
        density[min(9, int(u * 10))] += 1
    hot = sum(u >= SATURATED_UTIL for u in util) / len(util)
    return {"samples": len(util), "p50": round(util[len(util) // 2], 3),
            "p90": round(util[min(len(util) - 1, int(len(util) * 0.9))], 3), "max": round(util[-1], 3),
            "saturated_share": round(hot, 3), "saturated": hot >= SATURATED_SHARE, "density": density}


def _io(con, record: dict, cap: Capture, tiers: dict) -> None:
    """Each tier's disk and link per level, beside its CPU: its processes' reads and writes at the block
    layer (/proc/<pid>/io), and the bytes its link moved both ways (its veth's counters); MB/s over the
    measured period, whether the resource has a capacity or not."""
    run_s = record["config"]["run_s"]
    rows = con.execute("""
        SELECT l.clients, p.node, 'disk_read_mb_s', sum(p.read_bytes) FROM psample p
        JOIN levels l ON p.ts_ns > l.lo AND p.ts_ns <= l.hi GROUP BY ALL
        UNION ALL SELECT l.clients, p.node, 'disk_write_mb_s', sum(p.write_bytes) FROM psample p
        JOIN levels l ON p.ts_ns > l.lo AND p.ts_ns <= l.hi GROUP BY ALL""").fetchall()
    if cap.has("node_sample"):
        rows += con.execute("""
            SELECT l.clients, n.node, 'net_mb_s', sum(n.net_rx_bytes + n.net_tx_bytes)
            FROM nsample n JOIN iface i ON n.node = i.node AND n.net_iface = i.iface
            JOIN levels l ON n.ts_ns > l.lo AND n.ts_ns <= l.hi GROUP BY ALL""").fetchall()
    for clients, node, what, n in rows:
        if node in tiers and str(clients) in tiers[node]["levels"]:
            tiers[node]["levels"][str(clients)][what] = round((n or 0) / run_s / 1e6, 3)


def rare_heavy(result: dict) -> list[dict]:
    """Statements whose p50 is HEAVY_RATIO times or more their peers' median p50, that are at most
    HEAVY_MAX_FREQ of the executions and at least HEAVY_MIN_SHARE of the time in the database, over
    the whole run; heaviest first."""
    alls = {q: v["all"] for q, v in result["statements"].items() if "all" in v}
    n_all = sum(s["n"] for s in alls.values())
    t_all = sum(s["total_ns"] for s in alls.values())
    found = []
    for q, s in alls.items():
        peers = sorted(p["p50_ns"] for k, p in alls.items() if k != q)
        if not peers or not n_all or not t_all:
            continue
        peer = max(peers[len(peers) // 2], 1)
        ratio, freq, share = s["p50_ns"] / peer, s["n"] / n_all, s["total_ns"] / t_all
        if ratio >= HEAVY_RATIO and freq <= HEAVY_MAX_FREQ and share >= HEAVY_MIN_SHARE:
            found.append({"query_id": q, "text": result["texts"].get(q, ""), "ratio": round(ratio, 1),
                          "orders": round(math.log10(ratio), 1), "frequency": round(freq, 4),
                          "db_share": round(share, 3), "p50_ns": s["p50_ns"], "peer_p50_ns": peer,
                          # of the CPU its nodes' processes used (the extension takes a statement's CPU
                          # from plan cost 1000 only, mwinv.resource_min_cost: its peers' is not recorded)
                          "cpu_share": round((s["cpu_ns"] or 0) / max(1, sum(result["node_cpu_ns"].get(n, 0)
                                                                             for n in s["nodes"])), 3),
                          "nodes": s["nodes"], "advice": advice(result["texts"].get(q, ""))})
    return sorted(found, key=lambda f: -f["db_share"])


PREFIX_LIKE = re.compile(r"(?:(\w+)\.)?(\w+)\s+LIKE\s+'([^'%_]+)%'", re.I)
OFFSET = re.compile(r"\bOFFSET\s+(\d+)", re.I)


def advice(text: str, relation: str | None = None) -> list[str]:
    """What would serve the statement: an index for a prefix search, keyset pagination for OFFSET.
    relation: the table a plan's sequential scan read (else a name the advice leaves to the reader)."""
    out = []
    m = PREFIX_LIKE.search(text)
    if m and relation is None:   # the table the text names for the column's alias (or its only one)
        t = re.search(rf"\b(?:FROM|JOIN)\s+(\w+)\s+(?:AS\s+)?{re.escape(m.group(1))}\b" if m.group(1) else
                      r"\bFROM\s+(\w+)", text, re.I)
        relation = t.group(1) if t else None
    if m:
        out.append(f"an index that serves the prefix: CREATE INDEX ON {relation or '<table>'} ({m.group(2)} "
                   "text_pattern_ops) (LIKE 'abc%' becomes a range scan; a plain btree serves it in the C locale "
                   "only)")
    m = OFFSET.search(text)
    if m:
        out.append(f"keyset pagination instead of OFFSET {m.group(1)}: remember the last row's sort key and ask "
                   "WHERE (date, id) < (:last_date, :last_id) ORDER BY date DESC, id DESC LIMIT 20; OFFSET reads and "
                   "throws away every row before the page")
    return out


def save(out: str | Path, result: dict) -> None:
    """distributions.json (everything) and distributions.csv (a row per source, level and key)."""
    out = Path(out)
    privfile.write(out / "distributions.json", json.dumps(result, indent=1))
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["source", "clients", "key", "text", "n", "p50_us", "p90_us", "p99_us", "max_us", "mean_us",
                "total_ms", "nodes"])
    for source, table in (("statement", result["statements"]), ("page", result["pages"])):
        for key, levels in table.items():
            for clients, s in levels.items():
                w.writerow([source, clients, key, result["texts"].get(key, "") if source == "statement" else key,
                            s["n"], *(round(s[f"{p}_ns"] / 1e3, 1) for p in (*PERCENTILES, "max", "mean")),
                            round(s["total_ns"] / 1e6, 1),
                            " ".join(f"{n}:{v['n']}" for n, v in sorted(s.get("nodes", {}).items()))])
    privfile.write(out / "distributions.csv", buf.getvalue())
