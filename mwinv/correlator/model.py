"""[Taufer]'s analytical model (Table 1) over the measured attribution, and what-if predictions.

Per statement and node j (a statement's remote sub-statements count as the nodes they ran on; its
parallel workers belong to their leader's node):
    t_cpu(j)    = on-CPU time on j's critical path (cpu_user + cpu_sys; node_cpu_ns) / cpu speed
    t_seq(j)    = sequential requests x sequential access time + sequential bytes / disk_rate
    t_no_seq(j) = random requests x (random access time + mean random request size / disk_rate)
    t_net(j)    = (bytes received + bytes sent) / link rate
The estimate is the sum over components of the max over nodes (the components are constrained per
node; [Taufer]: "max values of the time components given by the several nodes and the coordinator"),
less the overlap of streamed reads with CPU: where the sequential requests are read-ahead windows
(>= 128 KiB on average), the kernel reads the next window while the backend works on the last one,
so min(t_cpu, t_seq) of that node is counted once. Two refinements of Table 1, both measured
(docs/model.md): without them a cold 185 MB scan was over-estimated by 16 % and a cold index scan,
whose ~400 short sequential reads each paid an access time, under-estimated by 33-45 %. The
access times are what a read waits off-CPU (the kernel's work for a request is on-CPU, in t_cpu
already), calibrated for random reads and for reads a short hop apart (0 for calibrations made before
the latter existed, which gives Table 1's t_seq).
On-CPU time is measured rather than derived from instruction counts x CPI x clock: virtual machines often
expose no PMU counters (the project's test VM does not), and the measured time already contains the CPI.

What-if: a factor k changes the platform (CPU k times faster, disk rate x k, random access time x k,
link rate x k); the prediction is the measured time in the database plus the change of the model's estimate, so
the part the model does not explain (locks, waits) is carried over unchanged."""

from __future__ import annotations

from dataclasses import dataclass, replace

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mwinv.capture.columns import empty_table
from mwinv.capture.tables import ATTRIBUTION_COMPONENTS, SCHEMAS
from mwinv.correlator.attribution import RUSAGE_MIN_WALL_NS
from mwinv.correlator.load import connect, literal, sql_file
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


NODE_INPUTS = ("cpu_ns", "workers_cpu_ns", "workers", "seq_bytes", "seq_reqs", "random_reqs", "random_bytes",
               "net_bytes")


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def node_cpu_ns(cpu_ns: np.ndarray, workers_cpu_ns: np.ndarray, workers: np.ndarray, cpus: int | None) -> np.ndarray:
    """A node's CPU time on the statement's critical path. With parallel workers the CPU work is spread
    over 1 + workers processes, which run at once on at most `cpus` CPUs: the node needs the larger of
    its busiest process's CPU time (the workers' split evenly) and the total over the CPUs it can use."""
    processes = 1 + workers
    lanes = np.minimum(processes, cpus) if cpus else processes
    spread = np.maximum(np.maximum(cpu_ns, _ratio(workers_cpu_ns, workers)), (cpu_ns + workers_cpu_ns) / lanes)
    return np.where(workers > 0, spread, cpu_ns)


def node_components(platform: Platform, n: dict) -> dict[str, np.ndarray]:
    """Table 1 for nodes (columns NODE_INPUTS, one value or an array each), in seconds, and the overlap of
    streamed reads with CPU."""
    n = {k: np.asarray(n[k], dtype=float) for k in NODE_INPUTS}
    seq_bytes, seq_reqs, random_reqs = n["seq_bytes"], n["seq_reqs"], n["random_reqs"]
    comp = {
        "t_cpu": node_cpu_ns(n["cpu_ns"], n["workers_cpu_ns"], n["workers"], platform.cpus) / 1e9 / platform.cpu_speed,
        "t_seq": seq_reqs * platform.seq_access_s + seq_bytes / platform.disk_rate_bps,
        "t_no_seq": random_reqs * (platform.rand_access_s + _ratio(n["random_bytes"], random_reqs) / platform.disk_rate_bps),
        "t_net": n["net_bytes"] / platform.link_rate_bps,
    }
    streamed = (seq_reqs > 0) & (_ratio(seq_bytes, seq_reqs) >= STREAM_REQUEST_BYTES)
    comp["overlap"] = np.where(streamed, np.minimum(comp["t_cpu"], comp["t_seq"]), 0.0)
    return comp


def model_total(comp: dict) -> np.ndarray:
    """The estimate in seconds: the components' sum, the streamed reads' overlap with CPU counted once."""
    return sum(comp[c] for c in MODEL_COMPONENTS) - comp["overlap"]


@dataclass
class Estimates:
    """Per statement (ids ascending): the max over its nodes of each component and of the overlap
    (seconds), and the node holding the largest total."""
    statement_id: np.ndarray
    components: dict[str, np.ndarray]
    critical_node: list


def estimate_all(frame: dict[str, np.ndarray], platform: Platform) -> Estimates:
    """Table 1 for every statement of `frame` (one row per statement and node, sorted by statement)."""
    ids = np.asarray(frame["statement_id"])
    comp = node_components(platform, frame)
    if not len(ids):
        return Estimates(ids, {c: np.zeros(0) for c in comp}, [])
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    group = np.cumsum(np.r_[True, ids[1:] != ids[:-1]]) - 1
    # the first node (in node order) with the largest total: a stable sort by statement, then -total
    order = np.lexsort((-model_total(comp), group))
    nodes = np.asarray(frame["node"], dtype=object)
    return Estimates(ids[starts], {c: np.maximum.reduceat(v, starts) for c, v in comp.items()},
                     list(nodes[order[starts]]))


def estimate_components(per_node: list[dict], platform: Platform) -> dict[str, float]:
    """estimate_all for one statement's nodes (rows of inputs_from's "nodes")."""
    if not per_node:
        return {**{c: 0.0 for c in MODEL_COMPONENTS + ("overlap",)}, "critical_node": None}
    frame = {k: np.array([n[k] for n in per_node], dtype=float) for k in NODE_INPUTS}
    est = estimate_all({**frame, "statement_id": np.zeros(len(per_node), np.int64),
                        "node": [n["node"] for n in per_node]}, platform)
    return {**{c: float(v[0]) for c, v in est.components.items()}, "critical_node": est.critical_node[0]}


def model_connection(statements: pa.Table, attribution: pa.Table,
                     statement_io: pa.Table | None) -> duckdb.DuckDBPyConnection:
    """A connection holding the model's inputs from Arrow tables (`model_statement`, `model_attribution`,
    `model_statement_io`) and the macros over them: what the functions below read, with the names a
    capture's analysis session gives them (sql/model_*.sql)."""
    con = connect(threads=1)  # per-statement aggregates: threads only add contention
    con.register("model_statement", statements)
    con.register("model_attribution", attribution)
    con.register("model_statement_io",
                 statement_io if statement_io is not None else empty_table(SCHEMAS["statement_io"]))
    add_model_views(con)
    return con


MODEL_MACROS = ("duration_text", "statement_shares", "model_node_inputs", "class_shares", "class_evidence")


def add_model_views(con: duckdb.DuckDBPyConnection) -> None:
    """The model's table macros (sql/statement_shares.sql, model_node_inputs.sql, class_shares.sql,
    class_evidence.sql) on a connection outside a capture's session (a session's runner builds them)."""
    for macro in MODEL_MACROS:
        con.execute(sql_file(macro))


def inputs_from(con: duckdb.DuckDBPyConnection, only: list[int] | None = None, inputs: str = "model") -> dict[int, dict]:
    """Per root statement: query_id, db_ns (the time in the database), attributed ns per component, and the per-node model inputs,
    from a connection that holds a model's inputs (`inputs`: 'model', the capture's or model_connection's;
    'advice', the advice's examples); of the statements in `only`, if given (the advice's few: the
    classification and the model run on columns)."""
    wanted = f"statement_id IN ({', '.join(str(int(i)) for i in only) or 'NULL'})" if only is not None else "true"
    out: dict[int, dict] = {}
    shares = (f"SELECT statement_id, query_id, db_ns, from_workers_ns, {', '.join(ATTRIBUTION_COMPONENTS)} "
              f"FROM statement_shares({literal(inputs)})")
    for sid, qid, wall, workers, *ns in con.execute(f"{shares} WHERE {wanted}").fetchall():
        out[sid] = {"statement_id": sid, "query_id": qid, "db_ns": wall, "from_workers_ns": int(workers),
                    "attributed": {c: int(v) for c, v in zip(ATTRIBUTION_COMPONENTS, ns) if v is not None},
                    "nodes": []}
    cols = ("statement_id", "node", *NODE_INPUTS)
    for row in con.execute(f"SELECT {', '.join(cols)} FROM model_node_inputs({literal(inputs)}) "
                           f"WHERE {wanted} ORDER BY 1, 2").fetchall():
        if row[0] in out:
            out[row[0]]["nodes"].append(dict(zip(cols, row)))
    return out


_ROOTS_SQL = f"""
SELECT statement_id, query_id, db_ns, {" + ".join(f"coalesce({c}, 0)" for c in RESOURCE_ATTRIBUTION)} AS resource_ns
FROM statement_shares('model') ORDER BY 1
"""


def model_frames(con: duckdb.DuckDBPyConnection) -> tuple[pa.Table, dict[str, np.ndarray]]:
    """The root statements (statement_id ascending, query_id, db_ns, resource_ns) and the per-node model
    inputs, as columns, from a connection holding the model's inputs (model_connection): what estimate and
    predict read (computed once when both run)."""
    roots = con.execute(_ROOTS_SQL).to_arrow_table()
    frame = con.execute("SELECT * FROM model_node_inputs('model')").fetchnumpy()
    return roots, frame


def _on_roots(roots: pa.Table, est: Estimates) -> tuple[dict[str, np.ndarray], list]:
    """Estimates laid on the root statements: zero (and no critical node) where a statement has no inputs."""
    ids = np.array(roots.column("statement_id").to_pylist(), dtype=np.int64)
    if not len(est.statement_id):
        return {c: np.zeros(len(ids)) for c in est.components}, [None] * len(ids)
    at = np.minimum(np.searchsorted(est.statement_id, ids), len(est.statement_id) - 1)
    found = est.statement_id[at] == ids
    comps = {c: np.where(found, v[at], 0.0) for c, v in est.components.items()}
    return comps, [est.critical_node[i] if f else None for i, f in zip(at.tolist(), found.tolist())]


def _ns(seconds: np.ndarray) -> pa.Array:
    return pa.array(np.round(seconds * 1e9).astype(np.int64))


def estimate(con: duckdb.DuckDBPyConnection, calibration: dict | None, link: str | None = None,
             frames: tuple | None = None) -> pa.Table:
    """The `statement_estimate` table: Table 1 components, estimate vs measured, error per statement (con:
    holding the model's inputs, model_connection)."""
    platform = Platform.from_calibration(calibration, link)
    roots, frame = frames or model_frames(con)
    comps, nodes = _on_roots(roots, estimate_all(frame, platform))
    total = model_total(comps)
    wall = np.asarray(roots.column("db_ns").to_pylist(), dtype=float)
    resource = np.asarray(roots.column("resource_ns").to_pylist(), dtype=float)
    timed = wall > 0
    return pa.Table.from_arrays([
        roots.column("statement_id"), roots.column("query_id"),
        *[_ns(comps[c]) for c in MODEL_COMPONENTS], _ns(total), roots.column("db_ns"),
        pa.array(_ratio(resource, wall)), pa.array(_ratio(total * 1e9 - wall, wall), mask=~timed),
        pa.array(nodes, pa.string())], schema=SCHEMAS["statement_estimate"])


def predict(con: duckdb.DuckDBPyConnection, calibration: dict | None,
            factors: dict[str, tuple[float, ...]] | None = None, link: str | None = None,
            frames: tuple | None = None) -> pa.Table:
    """The `prediction` table: each statement under each what-if (measured_ns stays null until checked;
    con: holding the model's inputs, model_connection)."""
    platform = Platform.from_calibration(calibration, link)
    factors = factors or {w: DEFAULT_FACTORS for w in WHAT_IFS}
    roots, frame = frames or model_frames(con)
    base = model_total(_on_roots(roots, estimate_all(frame, platform))[0])
    wall = np.asarray(roots.column("db_ns").to_pylist(), dtype=float)
    parts = []
    for what_if, ks in factors.items():
        for k in ks:
            delta = model_total(_on_roots(roots, estimate_all(frame, platform.scaled(what_if, k)))[0]) - base
            n = roots.num_rows
            parts.append(pa.Table.from_arrays([
                roots.column("statement_id"), roots.column("query_id"), pa.array([what_if] * n, pa.string()),
                pa.array(np.full(n, float(k))), pa.array(np.maximum(0, np.round(wall + delta * 1e9)).astype(np.int64)),
                pa.nulls(n, pa.int64()), roots.column("db_ns")], schema=SCHEMAS["prediction"]))
    return pa.concat_tables(parts) if parts else empty_table(SCHEMAS["prediction"])


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


def disk_wait_check(con: duckdb.DuckDBPyConnection, calibration: dict | None) -> DiskWaitCheck | None:
    """Per-request disk wait during the run vs calibration, over the statements that read in short
    requests (below STREAM_REQUEST_BYTES on average, so their waits are not hidden behind CPU work) and
    ran without parallel workers (whose requests are not in the leader's counts). A shared or virtual
    disk's latency drifts; when the run's differs from the calibration's, a disk-latency-bound
    statement's estimate is off by about their ratio, and the report says so. con: holding the model's
    inputs (model_connection)."""
    platform = Platform.from_calibration(calibration)
    row = con.execute(f"""
        WITH n AS (SELECT * FROM model_node_inputs('model')),
        single AS (SELECT statement_id FROM n GROUP BY 1 HAVING count(*) = 1),
        waited AS (
            SELECT statement_id, sum(ns) FILTER (WHERE component IN ('disk_seq', 'disk_random')) AS disk_ns
            FROM model_attribution GROUP BY 1 HAVING sum(coalesce(from_workers_ns, 0)) = 0)
        SELECT sum(coalesce(disk_ns, 0) / 1e9 - (seq_bytes + random_bytes) / {platform.disk_rate_bps}),
               sum(seq_reqs * {platform.seq_access_s} + random_reqs * {platform.rand_access_s}),
               sum(seq_reqs + random_reqs)
        FROM n JOIN single USING (statement_id) JOIN waited USING (statement_id)
        WHERE seq_reqs + random_reqs > 0 AND (seq_bytes + random_bytes) / (seq_reqs + random_reqs) < {STREAM_REQUEST_BYTES}
        """).fetchone()
    waits_s, calibrated_s, requests = row
    if not requests or requests < MIN_CHECKED_REQUESTS:
        return None
    return DiskWaitCheck(int(requests), waits_s / requests, calibrated_s / requests)


# Statements shorter than this are left out of the accuracy figure: their CPU is known to a 4 ms
# scheduler tick, so a 5 ms statement's error says more about the clock than about the model.
MIN_TIMED_NS = RUSAGE_MIN_WALL_NS


def mean_abs_error(estimates: pa.Table, min_allocated: float = 0.85,
                   min_measured_ns: int = 0) -> tuple[float | None, int]:
    """[Taufer]'s accuracy figure: mean |error| over statements whose allocated share >= min_allocated
    (and which lasted at least min_measured_ns)."""
    counted = estimates.filter(pc.and_(pc.greater_equal(estimates["allocated_share"], min_allocated),
                                       pc.greater_equal(estimates["measured_ns"], min_measured_ns)))
    errs = pc.drop_null(counted["error"])
    return (pc.mean(pc.abs(errs)).as_py() if len(errs) else None), len(errs)
