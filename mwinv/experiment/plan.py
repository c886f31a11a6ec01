"""An experiment plan: factors and their levels ([Taufer]'s node counts and schemes, [Zhang]'s
one-factor resource sweeps), the queries, repetitions; each combination of levels is a cell.

    name = "nodes-and-schemes"
    scale = 0.01
    queries = [3, 5, 10, 12]           # or "all", "1-6,12"
    repetitions = 1
    timeout_s = 60                     # a query running longer is cancelled and marked as a timeout
    [factors]                          # each a list of levels; absent factors keep their default
    nodes = [1, 2, 3]
    scheme = ["1-part", "2-part"]      # names, or scheme files (relative to the plan)
    node_cpu = [0.5]                   # CPUs per data node (cgroup quota)
    node_memory_mb = [512]
    node_read_mbps = [50]              # disk read rate per data node
    link_mbit = [100]                  # each data node's link, each way
    link_latency_ms = [0, 5]           # added each way by a relay on the host (netem is not in every kernel)
    parallel_workers = [0, 2]          # max_parallel_workers_per_gather on every node
    streams = [1]
    cold = [false]                     # drop the page cache before the measured pass
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

from mwinv.cluster.distribute import read_toml, resolve_scheme
from mwinv.cluster.harness import MAX_DATA_NODES
from mwinv.errors import MwinvError
from mwinv.workloads import tpch

DEFAULTS = {"nodes": 2, "scheme": "2-part", "node_cpu": 0.5, "node_memory_mb": 512, "node_read_mbps": None,
            "link_mbit": None, "link_latency_ms": None, "parallel_workers": None, "streams": 1, "cold": False}
FACTORS = tuple(DEFAULTS)


@dataclass
class Cell:
    levels: dict

    @property
    def id(self) -> str:
        return hashlib.sha1(json.dumps(self.levels, sort_keys=True, default=str).encode()).hexdigest()[:10]

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.levels.items() if v is not None)


@dataclass
class Plan:
    path: Path
    name: str
    scale: float
    queries: list[int]
    repetitions: int = 1
    timeout_s: float = 60.0
    factors: dict[str, list] = field(default_factory=dict)   # only those the plan names

    def cells(self) -> list[Cell]:
        names = list(self.factors)
        out = []
        for combo in itertools.product(*(self.factors[n] for n in names)):
            levels = {**DEFAULTS, **dict(zip(names, combo))}
            out.append(Cell(levels))
        return out

    def schemes(self) -> dict[str, dict]:
        """The definitions of the plan's schemes by name (the report's advice says what differs)."""
        return {d["name"]: d for d in (resolve_scheme(spec).describe()
                                       for spec in self.factors.get("scheme", [DEFAULTS["scheme"]]))}

    def varied(self) -> list[str]:
        """The factors with more than one level."""
        return [n for n, v in self.factors.items() if len(v) > 1]


def load_plan(path: str | Path) -> Plan:
    p = Path(path)
    data = read_toml(p)
    unknown = set(data) - {"name", "scale", "queries", "repetitions", "timeout_s", "factors"}
    if unknown:
        raise MwinvError(f"{p}: unknown key {sorted(unknown)[0]!r}")
    factors = data.get("factors") or {}
    for name, levels in factors.items():
        if name not in FACTORS:
            raise MwinvError(f"{p}: [factors] {name}: unknown factor (one of {', '.join(FACTORS)})")
        if not isinstance(levels, list) or not levels:
            raise MwinvError(f"{p}: [factors] {name}: a non-empty list of levels")
    for n in factors.get("nodes", []):
        if not isinstance(n, int) or not 1 <= n <= MAX_DATA_NODES:
            raise MwinvError(f"{p}: [factors] nodes: {n!r} is not 1 to {MAX_DATA_NODES}")
    if "scheme" in factors:
        resolved = []
        for s in factors["scheme"]:
            spec = str(s)
            if spec.endswith(".toml") and not Path(spec).is_absolute():
                spec = str(p.parent / spec)
            resolve_scheme(spec)            # an unknown scheme fails here, before any cluster starts
            resolved.append(spec)
        factors["scheme"] = resolved
    queries = data.get("queries", "all")
    try:
        numbers = tpch.parse_query_list(queries) if isinstance(queries, str) else tpch.check_queries(queries)
    except MwinvError as exc:
        raise MwinvError(f"{p}: queries: {exc}") from None
    reps = data.get("repetitions", 1)
    if not isinstance(reps, int) or reps < 1:
        raise MwinvError(f"{p}: repetitions = {reps!r}: a positive integer")
    return Plan(p, str(data.get("name", p.stem)), tpch.check_scale(float(data.get("scale", 0.01))), numbers, reps,
                float(data.get("timeout_s", 60)), factors)
