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
    kernel = [{}, {vm.dirty_background_ratio = 5}, {block.read_ahead_kb = 4096}]   # kernel settings per cell
    storage = ["local", "sshfs", "glusterfs"]   # the data nodes' tables on their disk, one remote, striped
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from mwinv.cluster.distribute import read_toml, resolve_scheme
from mwinv.cluster import storage
from mwinv.cluster.harness import MAX_DATA_NODES
from mwinv.errors import MwinvError
from mwinv.kernel_settings import flatten, knob, settings_text, value_text
from mwinv.workloads import tpch

DEFAULTS = {"nodes": 2, "scheme": "2-part", "node_cpu": 0.5, "node_memory_mb": 512, "node_read_mbps": None,
            "link_mbit": None, "link_latency_ms": None, "parallel_workers": None, "streams": 1, "cold": False, "kernel": {},
            "storage": storage.LOCAL}
FACTORS = tuple(DEFAULTS)


@dataclass
class Cell:
    levels: dict

    @property
    def id(self) -> str:
        # no kernel settings, local storage: the id a cell had before the factor existed (an older run resumes)
        levels = {k: v for k, v in self.levels.items() if k not in ("kernel", "storage") or v != DEFAULTS[k]}
        return hashlib.sha1(json.dumps(levels, sort_keys=True, default=str).encode()).hexdigest()[:10]

    def label(self) -> str:
        return " ".join(f"{k}={settings_text(v) if k == 'kernel' else v}" for k, v in self.levels.items()
                        if v is not None)


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


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# Each factor's levels: a test and what it says when a level fails it (None, where the factor's
# default is None, is written by leaving the factor out). A CPU quota below 0.01 became 0.01 (the
# cgroup's least quota, 1 ms a 100 ms period); a memory cap of 0 was no cap at all.
LEVELS = {
    "nodes": (lambda v: _integer(v) and 1 <= v <= MAX_DATA_NODES, f"an integer from 1 to {MAX_DATA_NODES}"),
    "scheme": (lambda v: isinstance(v, str) and v != "", "a scheme name or a scheme file"),
    "node_cpu": (lambda v: _number(v) and v >= 0.01, "a number of CPUs, 0.01 or more"),
    "node_memory_mb": (lambda v: _integer(v) and v >= 1, "a positive integer (MB)"),
    "node_read_mbps": (lambda v: _number(v) and v > 0, "a positive number (MB/s)"),
    "link_mbit": (lambda v: _number(v) and v > 0, "a positive number (Mbit/s)"),
    "link_latency_ms": (lambda v: _number(v) and v >= 0, "a number of ms, 0 or more"),
    "parallel_workers": (lambda v: _integer(v) and 0 <= v <= 1024, "an integer from 0 to 1024"),
    "streams": (lambda v: _integer(v) and 1 <= v <= 64, "an integer from 1 to 64"),
    "cold": (lambda v: isinstance(v, bool), "true or false"),
    "kernel": (lambda v: isinstance(v, dict), "a table of kernel settings ({} for none)"),
    "storage": (storage.is_level, storage.LEVEL_TEXT),
}


def check_level(where: str, factor: str, value) -> None:
    """A one-line error, `where` first, if `value` is not a level of `factor`."""
    test, what = LEVELS[factor]
    if not test(value):
        raise MwinvError(f"{where}: {value!r} is not {what}")


def load_plan(path: str | Path) -> Plan:
    """The plan in `path`, every value checked before anything starts: a value of the wrong type or
    out of its factor's domain is a one-line error naming the file and the key."""
    p = Path(path)
    data = read_toml(p)
    unknown = set(data) - {"name", "scale", "queries", "repetitions", "timeout_s", "factors"}
    if unknown:
        raise MwinvError(f"{p}: unknown key {sorted(unknown)[0]!r}")

    def check(ok: bool, key: str, value, what: str) -> None:
        if not ok:
            raise MwinvError(f"{p}: {key} = {value!r}: {what}")

    name = data.get("name", p.stem)
    check(isinstance(name, str) and name != "", "name", name, "a string")
    scale = data.get("scale", 0.01)
    check(_number(scale) and scale > 0, "scale", scale, "a positive number (the TPC-H scale factor)")
    timeout = data.get("timeout_s", 60)
    check(_number(timeout) and timeout > 0, "timeout_s", timeout, "a positive number of seconds")
    reps = data.get("repetitions", 1)
    check(_integer(reps) and reps >= 1, "repetitions", reps, "a positive integer")
    queries = data.get("queries", "all")
    check(isinstance(queries, str) or (isinstance(queries, list) and queries and all(map(_integer, queries))),
          "queries", queries, 'a non-empty list of query numbers, or a list like "1-6,12" or "all"')
    try:
        numbers = tpch.parse_query_list(queries) if isinstance(queries, str) else tpch.check_queries(queries)
    except MwinvError as exc:
        raise MwinvError(f"{p}: queries: {exc}") from None
    factors = data.get("factors", {})
    check(isinstance(factors, dict), "factors", factors, "a table of factors ([factors])")
    for name_, levels in factors.items():
        if name_ not in FACTORS:
            raise MwinvError(f"{p}: [factors] {name_}: unknown factor (one of {', '.join(FACTORS)})")
        if not isinstance(levels, list) or not levels:
            raise MwinvError(f"{p}: [factors] {name_}: a non-empty list of levels")
        for v in levels:
            check_level(f"{p}: [factors] {name_}", name_, v)
    if "scheme" in factors:
        resolved = []
        for spec in factors["scheme"]:
            if spec.endswith(".toml") and not Path(spec).is_absolute():
                spec = str(p.parent / spec)
            try:
                resolve_scheme(spec)            # an unknown scheme fails here, before any cluster starts
            except MwinvError as exc:
                raise MwinvError(f"{p}: [factors] scheme: {exc}") from None
            resolved.append(spec)
        factors["scheme"] = resolved
    if "kernel" in factors:
        factors["kernel"] = [flatten(level) for level in factors["kernel"]]
        for level in factors["kernel"]:
            for name_, v in level.items():
                try:   # known and present here; writable and held as written: kernel_settings.check
                    knob(name_)
                    value_text(v, name_)
                except MwinvError as exc:
                    raise MwinvError(f"{p}: [factors] kernel: {exc}") from None
    return Plan(p, name, float(scale), numbers, reps, float(timeout), factors)
