"""Seed 000's analytical model (Table 1) over the measured attribution, and what-if predictions.

Per statement and node j (a statement's remote sub-statements count as the nodes they ran on; its
parallel workers belong to their leader's node):
    t_cpu(j)    = on-CPU time on j's critical path (cpu_user + cpu_sys; node_cpu_ns) / cpu speed
    t_seq(j)    = sequential requests x sequential access time + sequential bytes / disk_rate
    t_no_seq(j) = random requests x (random access time + mean random request size / disk_rate)
    t_net(j)    = (bytes received + bytes sent) / link rate
The estimate is the sum over components of the max over nodes (the components are constrained per
node; seed 000: "max values of the time components given by the several nodes and the coordinator"),
less the overlap of streamed reads with CPU: where the sequential requests are read-ahead windows
(>= 128 KiB on average), the kernel reads the next window while the backend works on the last one,
so min(t_cpu, t_seq) of that node is counted once. Two refinements of Table 1, both measured
(docs/model.md): without them a cold 185 MB scan was over-estimated by 16 % and a cold index scan,
whose ~400 short sequential reads each paid an access time, under-estimated by 33-45 %. The
sequential access time is calibrated apart (8 KiB reads of adjacent pages; 0 for calibrations made
before it existed, which gives Table 1's t_seq).
On-CPU time is measured rather than derived from instruction counts x CPI x clock: this VM has no
PMU counters, and the measured time already contains the CPI.

What-if: a factor k changes the platform (CPU k times faster, disk rate x k, random access time x k,
link rate x k); the prediction is the measured wall time plus the change of the model's estimate, so
the part the model does not explain (locks, waits) is carried over unchanged."""

from __future__ import annotations

from dataclasses import dataclass, replace

import duckdb
import pyarrow as pa

from mwinv.capture.columns import empty_table
from mwinv.capture.tables import SCHEMAS
from mwinv.correlator.attribution import RUSAGE_MIN_WALL_NS
from mwinv.correlator.load import connect
from mwinv.errors import MwinvError

MODEL_COMPONENTS = ("t_cpu", "t_seq", "t_no_seq", "t_net")
# Mean sequential request from which reads count as streamed (read-ahead windows, overlapping CPU):
# the kernel's default read_ahead_kb; a backend's own synchronous 8 KiB reads stay far below it.
STREAM_REQUEST_BYTES = 128 * 1024
RESOURCE_ATTRIBUTION = ("cpu_user", "cpu_sys", "disk_seq", "disk_random", "network")
WHAT_IFS = {  # name -> (platform fields it scales, what k means)
    "cpu": (("cpu_speed",), "CPU k times as fast"),
    "disk_rate": (("disk_rate_bps",), "sequential disk rate x k"),
    # a device k times slower to answer a request: the short sequential reads pay its access time too
    "rand_access": (("rand_access_s", "seq_access_s"), "disk access time per request x k (random and short "
                    "sequential requests)"),
    "link_rate": (("link_rate_bps",), "network link rate x k"),
}
DEFAULT_FACTORS = (0.5, 2.0, 10.0)


@dataclass(frozen=True)
class Platform:
    """The variable factors of Table 1 (one set for all nodes: the nodes of one capture share a machine)."""
    disk_rate_bps: float
    rand_access_s: float
    link_rate_bps: float
    cpu_speed: float = 1.0  # relative to the captured run
    seq_access_s: float = 0.0  # per short sequential request
    cpus: int | None = None  # CPUs of a node: how many of a parallel statement's processes run at once

    @classmethod
    def from_calibration(cls, calibration: dict | None, link: str | None = None) -> "Platform":
        if not calibration or "disk" not in calibration:
            raise MwinvError("the capture has no calibration (run `mwinv calibrate CAPTURE`): "
                             "the model needs the disk rate and random access time")
        links = calibration.get("links") or {}
        chosen = links.get(link) if link else (next(iter(links.values())) if links else None)
        return cls(disk_rate_bps=float(calibration["disk"]["disk_rate_bps"]),
                   rand_access_s=float(calibration["disk"]["rand_access_s"]),
                   link_rate_bps=float(chosen["rate_bps"]) if chosen else float("inf"),
                   seq_access_s=float(calibration["disk"].get("seq_access_s", 0.0)),
                   cpus=(calibration.get("cpu") or {}).get("cpus"))

    def scaled(self, what_if: str, k: float) -> "Platform":
        if what_if not in WHAT_IFS:
            raise MwinvError(f"unknown what-if {what_if!r} (one of {', '.join(WHAT_IFS)})")
        if k <= 0:
            raise MwinvError(f"what-if factor must be > 0, got {k}")
        return replace(self, **{field: getattr(self, field) * k for field in WHAT_IFS[what_if][0]})


def node_cpu_ns(cpu_ns: float, workers_cpu_ns: float, workers: float, cpus: int | None) -> float:
    """A node's CPU time on the statement's critical path. With parallel workers the CPU work is spread
    over 1 + workers processes, which run at once on at most `cpus` CPUs: the node needs the larger of
    its busiest process's CPU time (the workers' split evenly) and the total over the CPUs it can use."""
    if not workers:
        return cpu_ns
    processes = 1 + workers
    lanes = min(processes, cpus or processes)
    return max(cpu_ns, workers_cpu_ns / workers, (cpu_ns + workers_cpu_ns) / lanes)


def node_components(platform: Platform, n: dict) -> dict[str, float]:
    """Table 1 for one node (a row of statement_inputs' "nodes"), in seconds, and the overlap of streamed
    reads with CPU."""
    seq_bytes, seq_reqs, random_reqs = n["seq_bytes"], n["seq_reqs"], n["random_reqs"]
    mean_random = n["random_bytes"] / random_reqs if random_reqs else 0.0
    comp = {
        "t_cpu": node_cpu_ns(n["cpu_ns"], n["workers_cpu_ns"], n["workers"], platform.cpus) / 1e9 / platform.cpu_speed,
        "t_seq": seq_reqs * platform.seq_access_s + seq_bytes / platform.disk_rate_bps,
        "t_no_seq": random_reqs * (platform.rand_access_s + mean_random / platform.disk_rate_bps),
        "t_net": n["net_bytes"] / platform.link_rate_bps,
    }
    streamed = seq_reqs > 0 and seq_bytes / seq_reqs >= STREAM_REQUEST_BYTES
    comp["overlap"] = min(comp["t_cpu"], comp["t_seq"]) if streamed else 0.0
    return comp


def estimate_components(per_node: list[dict], platform: Platform) -> dict[str, float]:
    """Max over nodes of each component and of the overlap (seconds), and the node holding the
    largest total."""
    out = {c: 0.0 for c in MODEL_COMPONENTS + ("overlap",)}
    best_node, best = None, -1.0
    for n in per_node:
        comp = node_components(platform, n)
        for c, v in comp.items():
            out[c] = max(out[c], v)
        if model_total(comp) > best:
            best_node, best = n["node"], model_total(comp)
    out["critical_node"] = best_node
    return out


def model_total(comp: dict[str, float]) -> float:
    """The estimate in seconds: the components' sum, the streamed reads' overlap with CPU counted once."""
    return sum(comp[c] for c in MODEL_COMPONENTS) - comp["overlap"]


_PER_NODE_SQL = """
WITH RECURSIVE roots AS (  -- remote sub-statements and parallel workers belong to their root
    SELECT statement_id, statement_id AS root_id, node AS root_node FROM statements WHERE parent_statement_id IS NULL
    UNION ALL
    SELECT s.statement_id, r.root_id, r.root_node FROM statements s JOIN roots r ON s.parent_statement_id = r.statement_id
),
worker AS (  -- a parallel worker: its own pid, its leader's statement as parent
    SELECT statement_id FROM statements
    WHERE parent_statement_id IS NOT NULL AND leader_pid IS NOT NULL AND pid <> leader_pid
),
cpu AS (  -- a leader's own CPU, and its workers' (rolled up into the leader's attribution rows)
    SELECT statement_id, node, sum(ns) FILTER (WHERE component IN ('cpu_user', 'cpu_sys')) AS cpu_ns,
           sum(from_workers_ns) FILTER (WHERE component IN ('cpu_user', 'cpu_sys')) AS workers_cpu_ns
    FROM attribution GROUP BY ALL
),
io AS (
    SELECT statement_id, node, sum(seq_bytes) AS seq_bytes, sum(seq_reqs) AS seq_reqs, sum(random_reqs) AS random_reqs,
           sum(random_bytes) AS random_bytes,
           sum(coalesce(net_rx_bytes, 0) + coalesce(net_tx_bytes, 0)) AS net_bytes
    FROM statement_io GROUP BY ALL
),
both_ AS (
    SELECT coalesce(cpu.statement_id, io.statement_id) AS statement_id, coalesce(cpu.node, io.node) AS node,
           coalesce(cpu_ns, 0) AS cpu_ns, coalesce(workers_cpu_ns, 0) AS workers_cpu_ns,
           coalesce(seq_bytes, 0) AS seq_bytes, coalesce(seq_reqs, 0) AS seq_reqs,
           coalesce(random_reqs, 0) AS random_reqs, coalesce(random_bytes, 0) AS random_bytes,
           coalesce(net_bytes, 0) AS net_bytes
    FROM cpu FULL JOIN io ON cpu.statement_id = io.statement_id AND cpu.node = io.node
)
SELECT r.root_id AS statement_id, b.node,
       coalesce(sum(cpu_ns) FILTER (WHERE w.statement_id IS NULL), 0)::DOUBLE AS cpu_ns,
       -- rolled up into the leader's rows by the correlator; a worker's own rows where they were not (rusage)
       (sum(workers_cpu_ns) + coalesce(sum(cpu_ns) FILTER (WHERE w.statement_id IS NOT NULL), 0))::DOUBLE
           AS workers_cpu_ns,
       count(w.statement_id)::DOUBLE AS workers, sum(seq_bytes)::DOUBLE AS seq_bytes,
       sum(seq_reqs)::DOUBLE AS seq_reqs, sum(random_reqs)::DOUBLE AS random_reqs, sum(random_bytes)::DOUBLE AS random_bytes,
       sum(net_bytes)::DOUBLE AS net_bytes
FROM both_ b JOIN roots r USING (statement_id) LEFT JOIN worker w USING (statement_id)
-- a nested statement on the root's own node ran inside the root's time: counted once, by the root;
-- a parallel worker's requests went to the same disk as its leader's: they add up
WHERE b.statement_id = r.root_id OR b.node <> r.root_node OR w.statement_id IS NOT NULL
GROUP BY ALL ORDER BY 1, 2
"""

_SHARES_SQL = """
SELECT s.statement_id, s.query_id, (s.end_ns - s.start_ns) AS wall_ns, a.component, sum(a.ns) AS ns,
       sum(coalesce(a.from_workers_ns, 0)) AS from_workers_ns
FROM statements s LEFT JOIN attribution a USING (statement_id)
WHERE s.parent_statement_id IS NULL
GROUP BY ALL ORDER BY 1
"""


def _connect(statements: pa.Table, attribution: pa.Table, statement_io: pa.Table | None) -> duckdb.DuckDBPyConnection:
    con = connect(threads=1)  # per-statement aggregates: threads only add contention
    con.register("statements", statements)
    con.register("attribution", attribution)
    con.register("statement_io", statement_io if statement_io is not None else empty_table(SCHEMAS["statement_io"]))
    return con


def statement_inputs(statements: pa.Table, attribution: pa.Table,
                     statement_io: pa.Table | None) -> dict[int, dict]:
    """Per root statement: query_id, wall_ns, attributed ns per component, and the per-node model inputs."""
    con = _connect(statements, attribution, statement_io)
    out = inputs_from(con)
    con.close()
    return out


def inputs_from(con: duckdb.DuckDBPyConnection) -> dict[int, dict]:
    """statement_inputs over a connection that holds `statements`, `attribution` and `statement_io`."""
    out: dict[int, dict] = {}
    for sid, qid, wall, comp, ns, workers in con.execute(_SHARES_SQL).fetchall():
        st = out.setdefault(sid, {"statement_id": sid, "query_id": qid, "wall_ns": wall, "attributed": {},
                                  "from_workers_ns": 0, "nodes": []})
        if comp is not None:
            st["attributed"][comp] = st["attributed"].get(comp, 0) + int(ns)
            st["from_workers_ns"] += int(workers)
    cols = ["statement_id", "node", "cpu_ns", "workers_cpu_ns", "workers", "seq_bytes", "seq_reqs", "random_reqs",
            "random_bytes", "net_bytes"]
    for row in con.execute(_PER_NODE_SQL).fetchall():
        n = dict(zip(cols, row))
        if n["statement_id"] in out:
            out[n["statement_id"]]["nodes"].append(n)
    return out


def allocated_share(attributed: dict[str, int], wall_ns: int) -> float:
    """Share of wall time attributed to a machine resource the model covers (CPU, disk, network)."""
    return sum(attributed.get(c, 0) for c in RESOURCE_ATTRIBUTION) / wall_ns if wall_ns > 0 else 0.0


def estimate(statements: pa.Table, attribution: pa.Table, statement_io: pa.Table | None,
             calibration: dict | None, link: str | None = None) -> pa.Table:
    """The `statement_estimate` table: Table 1 components, estimate vs measured, error per statement."""
    platform = Platform.from_calibration(calibration, link)
    rows = []
    for st in statement_inputs(statements, attribution, statement_io).values():
        comp = estimate_components(st["nodes"], platform)
        est_s = model_total(comp)
        wall = st["wall_ns"]
        rows.append({
            "statement_id": st["statement_id"], "query_id": st["query_id"],
            **{f"{c}_ns": round(comp[c] * 1e9) for c in MODEL_COMPONENTS},
            "estimated_ns": round(est_s * 1e9), "measured_ns": wall,
            "allocated_share": allocated_share(st["attributed"], wall),
            "error": (est_s * 1e9 - wall) / wall if wall > 0 else None,
            "critical_node": comp["critical_node"],
        })
    return pa.Table.from_pylist(rows, schema=SCHEMAS["statement_estimate"])


def predict(statements: pa.Table, attribution: pa.Table, statement_io: pa.Table | None,
            calibration: dict | None, factors: dict[str, tuple[float, ...]] | None = None,
            link: str | None = None) -> pa.Table:
    """The `prediction` table: each statement under each what-if (measured_ns stays null until checked)."""
    platform = Platform.from_calibration(calibration, link)
    factors = factors or {w: DEFAULT_FACTORS for w in WHAT_IFS}
    rows = []
    for st in statement_inputs(statements, attribution, statement_io).values():
        base = estimate_components(st["nodes"], platform)
        base_s = model_total(base)
        for what_if, ks in factors.items():
            for k in ks:
                new = estimate_components(st["nodes"], platform.scaled(what_if, k))
                delta_s = model_total(new) - base_s
                rows.append({"statement_id": st["statement_id"], "query_id": st["query_id"], "what_if": what_if,
                             "factor": float(k), "predicted_ns": max(0, round(st["wall_ns"] + delta_s * 1e9)),
                             "measured_ns": None, "baseline_ns": st["wall_ns"]})
    return pa.Table.from_pylist(rows, schema=SCHEMAS["prediction"])


# A run whose disk waited this many times more (or less) per request than calibrated ran on another
# platform than the model's: a disk-latency-bound statement's estimate is then off by about that ratio.
DISK_DRIFT_RATIO = 1.5


@dataclass(frozen=True)
class DiskWaitCheck:
    """The disk's access time as the run saw it next to the calibrated one."""
    requests: int
    observed_s: float    # per request: attributed disk wait less transfer time, over requests
    calibrated_s: float  # the same requests' calibrated access times, over requests

    @property
    def ratio(self) -> float | None:
        return self.observed_s / self.calibrated_s if self.calibrated_s > 0 else None

    @property
    def drifted(self) -> bool:
        r = self.ratio
        return r is not None and (r <= 0 or max(r, 1 / r) > DISK_DRIFT_RATIO)


# Fewer requests than this say little about a disk's access time.
MIN_CHECKED_REQUESTS = 100


def disk_wait_check(statements: pa.Table, attribution: pa.Table, statement_io: pa.Table | None,
                    calibration: dict | None) -> DiskWaitCheck | None:
    """Per-request disk wait during the run vs calibration, over the statements that read in short
    requests (below STREAM_REQUEST_BYTES on average, so their waits are not hidden behind CPU work) and
    ran without parallel workers (whose requests are not in the leader's counts). A shared or virtual
    disk's latency drifts; when the run's differs from the calibration's, a disk-latency-bound
    statement's estimate is off by about their ratio, and the report says so."""
    platform = Platform.from_calibration(calibration)
    waits_s = calibrated_s = 0.0
    requests = 0
    for st in statement_inputs(statements, attribution, statement_io).values():
        if st["from_workers_ns"] or len(st["nodes"]) != 1:
            continue
        (n,) = st["nodes"]
        reqs = n["seq_reqs"] + n["random_reqs"]
        if not reqs or (n["seq_bytes"] + n["random_bytes"]) / reqs >= STREAM_REQUEST_BYTES:
            continue
        disk_ns = st["attributed"].get("disk_seq", 0) + st["attributed"].get("disk_random", 0)
        waits_s += disk_ns / 1e9 - (n["seq_bytes"] + n["random_bytes"]) / platform.disk_rate_bps
        calibrated_s += n["seq_reqs"] * platform.seq_access_s + n["random_reqs"] * platform.rand_access_s
        requests += int(reqs)
    if requests < MIN_CHECKED_REQUESTS:
        return None
    return DiskWaitCheck(requests, waits_s / requests, calibrated_s / requests)


# Statements shorter than this are left out of the accuracy figure: their CPU is known to a 4 ms
# scheduler tick, so a 5 ms statement's error says more about the clock than about the model.
MIN_TIMED_NS = RUSAGE_MIN_WALL_NS


def mean_abs_error(estimates: pa.Table, min_allocated: float = 0.85,
                   min_measured_ns: int = 0) -> tuple[float | None, int]:
    """Seed 000's accuracy figure: mean |error| over statements whose allocated share >= min_allocated
    (and which lasted at least min_measured_ns)."""
    errs = [abs(r["error"]) for r in estimates.to_pylist()
            if r["error"] is not None and (r["allocated_share"] or 0) >= min_allocated
            and r["measured_ns"] >= min_measured_ns]
    return (sum(errs) / len(errs) if errs else None), len(errs)
