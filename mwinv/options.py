"""The options of mwinv's steps as typed objects, their defaults set here and nowhere else, checked
when made: the command line makes them from its flags (taking these defaults), so a bad value is a
one-line error before anything starts, and the code below the command line takes them as they are
(docs/capture.md lists the capture's)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mwinv.capture.tables import node_name
from mwinv.errors import MwinvError
from mwinv.kernel_trace.sampler import MIN_INTERVAL_S

# a node's name is a file name in its capture (kernel/<node>/, <table>/<node>-00000.parquet)
NODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def check_node_name(name: str) -> None:
    if not NODE_NAME.fullmatch(name):
        raise MwinvError(f"node name {name!r}: letters, digits, _ . - (not first), at most 64")


# what becomes of a parsed trace.dat (CaptureOptions.keep_trace)
KEEP_TRACE = ("keep", "zstd", "drop")


@dataclass(frozen=True)
class CaptureOptions:
    """How one node capture (mwinv/node_capture.py) records.

    node: the node's name in the tables (None: $MWINV_NODE or the host name, taken when the options
    are made; letters, digits, `_`, `.`, `-`, as NODE_NAME); stacks: kernel stacks
    on wait events and perf CPU samples; sample_interval_s: the /proc sampler's interval (at least
    sampler.MIN_INTERVAL_S); events: the kernel events to trace (None: recorder.default_events, with
    the user page faults when page_faults); trace: kernel tracing, True (fail when it is impossible),
    False, or "auto" (skip it, saying why); sample: the /proc sampler; statements: the engine's
    statement reader; duty: the share of the time with kernel events on, in windows of window_s
    seconds (statements are read throughout); event_budget: kernel events/s per CPU above which
    fewer windows are traced (None: no budget; `mwinv-trace capture` sets
    recorder.DEFAULT_EVENT_BUDGET); keep_trace: what becomes of the raw trace (kernel/<node>/trace.dat)
    once it is parsed whole, KEEP_TRACE: kept, compressed (zstd: by default, as it is the bulk of a
    capture, 113 of 134 MB for 30 s of pgbench -S, and a later parser may want it) or dropped."""
    node: str | None = None
    stacks: bool = False
    sample_interval_s: float = 1.0
    events: tuple[str, ...] | None = None
    page_faults: bool = False
    trace: bool | str = True
    sample: bool = True
    statements: bool = True
    duty: float = 1.0
    window_s: float = 1.0
    event_budget: float | None = None
    keep_trace: str = "zstd"

    def __post_init__(self) -> None:
        if self.node is None:
            object.__setattr__(self, "node", node_name())
        check_node_name(self.node)
        if not self.sample_interval_s >= MIN_INTERVAL_S:
            raise MwinvError(f"sampling interval {self.sample_interval_s:g} s: {MIN_INTERVAL_S:g} s or more")
        if self.trace not in (True, False, "auto"):
            raise MwinvError(f"trace {self.trace!r}: True, False or 'auto'")
        if not (0 < self.duty <= 1 and self.window_s > 0):
            raise MwinvError(f"duty cycle {self.duty:g} of {self.window_s:g} s windows: a share in (0, 1] and "
                             "windows of more than 0 s")
        if self.event_budget is not None and not self.event_budget > 0:
            raise MwinvError(f"event budget {self.event_budget:g}/s per CPU: more than 0 (or none)")
        if self.keep_trace not in KEEP_TRACE:
            raise MwinvError(f"keep trace {self.keep_trace!r}: one of {', '.join(KEEP_TRACE)}")
        if self.events is not None:
            object.__setattr__(self, "events", tuple(self.events))


# DuckDB's memory limit, as `--memory` takes it: a number and a unit
MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB)", re.I)
# the default's bounds: half of what the machine has available, but the process should stay under 2 GB
# and DuckDB's pages are only part of it (the base ~0.5 GB, the segment walk's numpy slices): at a 1 GiB
# limit a 2 M-statement pgbench capture peaked at 2.1 GiB, at 450 MB at 1.6 GiB
MEMORY_CAP_BYTES = 768 << 20
MEMORY_FLOOR_BYTES = 256 << 20


def default_memory() -> str:
    """DuckDB's limit when `--memory` is not given: half of MemAvailable, within the floor and the cap."""
    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        available = 2 * MEMORY_CAP_BYTES
    return f"{max(MEMORY_FLOOR_BYTES, min(MEMORY_CAP_BYTES, available // 2)) >> 20}MiB"


def memory_bytes(value: str, what: str = "memory size") -> int:
    """A size above 0 as `--memory` takes it, or as DuckDB shows its limit ('762.9 MiB'), in bytes (KB:
    1000, KiB: 1024, as DuckDB counts them); what: the name the error gives the value."""
    m = MEMORY.fullmatch(value.strip())
    if not m or float(m.group(1)) <= 0:
        raise MwinvError(f"{what} {value!r}: a size such as 512MB or 2GB")
    unit = m.group(2).lower()
    return int(float(m.group(1)) * (1024 if "i" in unit else 1000) ** ("kmgt".index(unit[0]) + 1))


def check_memory(value: str) -> str:
    memory_bytes(value, "--memory")
    return value.strip()


@dataclass(frozen=True)
class CorrelateOptions:
    """What `mwinv-correlate` correlates and shows.

    node: that node's tables only, correlated as on that node (None: every node; it must be one of the
    capture's, `check`); merge: the cluster view from every node's own correlation (not with node);
    top: how many statements to show (1 or more); by: the ranking (pipeline.RANK_BY: total or one
    resource); query_id: that query id only; memory: DuckDB's memory limit (None: default_memory(), from
    the machine); beyond it DuckDB spills into the capture's directory."""
    node: str | None = None
    merge: bool = False
    top: int = 5
    by: str = "total"
    query_id: int | None = None
    memory: str | None = None

    def __post_init__(self) -> None:
        if self.node is not None and self.merge:
            raise MwinvError("--node correlates one node, --merge all of them afterwards: one or the other")
        if self.top < 1:
            raise MwinvError(f"top {self.top}: 1 or more statements")
        object.__setattr__(self, "memory", check_memory(self.memory) if self.memory else default_memory())

    def check(self, manifest: dict) -> None:
        """The node is one of the capture's (whose names the manifest's check allows as file names):
        correlating one it does not have would replace the capture's derived tables with empty ones."""
        nodes = sorted(manifest.get("nodes") or {})
        if self.node is not None and self.node not in nodes:
            raise MwinvError(f"node {self.node!r}: not in this capture (its nodes: {', '.join(nodes) or 'none'})")


@dataclass(frozen=True)
class AdviceOptions:
    """What the advice (correlator/advice.advise) weighs beside each statement's own evidence: the
    capture's platform, as its manifest recorded it (checked when the manifest is read).

    calibration: the model's platform factors (`mwinv calibrate`; None: no expected gains from the
    model); cpus: the CPUs the server may use (the parallel-query what-if; 2 where the capture did not
    record them); settings: the server's settings the rules read (jit, ...); storage: the cluster's storage
    back-end (the manifest's record, mwinv/cluster/storage.py: which nodes' tables are on a FUSE mount);
    function_tracer: per node, why the recorder's function tracer did not run ("" where it ran; the nodes'
    `function_tracer` records, else what they skipped), said where the kernel-knob rules fall back on
    sampled stacks."""
    calibration: dict | None = None
    cpus: int = 2
    settings: dict = field(default_factory=dict)
    storage: dict = field(default_factory=dict)
    function_tracer: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.cpus, int) and self.cpus >= 1):
            raise MwinvError(f"cpus {self.cpus!r}: a whole number of 1 or more")

    @classmethod
    def from_manifest(cls, manifest: dict) -> "AdviceOptions":
        tracer = {}
        for node, info in (manifest.get("nodes") or {}).items():
            if ft := info.get("function_tracer"):
                tracer[node] = "" if ft["ran"] else ft["why_not"]
            elif why := (info.get("skipped") or {}).get("tracer:function"):   # recorded before that record
                tracer[node] = why
        return cls(manifest.get("calibration"), manifest.get("cpus") or cls.cpus, manifest.get("settings") or {},
                   manifest.get("storage") or {}, tracer)
