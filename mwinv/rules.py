"""What an advice rule is written against, whichever engine's it is: the Evidence it reads about one
statement, the Advice it returns (Rule: a function from one to the other, None when it does not fire),
the thresholds the engines' rules share, and the kernel's hot-spot rules (KERNEL_RULES, from
mwinv/kernel_knobs.py: the kernel is the same under every engine). An engine's rules are listed by its
registration (mwinv/engines/registry.py); the evidence (correlator/advice.evidence_of) is computed once
per statement, the model's what-ifs once each, whatever the rules that read them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from mwinv.fmt import duration
from mwinv.kernel_knobs import KERNEL_RULES  # noqa: F401 (the kernel's rules, listed by every engine)

MIN_WALL_NS = 10_000_000  # below 10 ms in the database a handful of samples decide the shares: too thin to advise on
MIN_SHARE = 0.25  # a resource has to hold a quarter of the time in the database before it is worth tuning
MIN_RUN_QUEUE_SHARE = 0.10  # waiting runnable this share of it is worth a word
MIN_LOCK_SHARE = 0.10  # and so is waiting for a lock


@dataclass
class Advice:
    statement_id: int
    query_id: int | None
    rule: str  # e.g. "cpu.parallel", "kernel.numa_balancing", "too-thin"
    advice: str  # what to change
    evidence: str  # the measurements the rule fired on
    expected_gain_ns: int | None  # wall time the model expects to save; None when it cannot say
    basis: str  # how the gain was computed


@dataclass
class Evidence:
    """What the rules may read about one statement (or one query id's executions, summed)."""
    statement_id: int
    query_id: int | None
    db_ns: float  # the time in the database: the wall time (its window) less client_wait; the shares' base
    executions: int  # > 1: the row stands for its query id's executions, summed
    shares: dict[str, float]  # share of db_ns per class (classify.class_shares): cpu, disk_seq, lock, ...
    limit: str  # the class that limits it, e.g. "cpu", "dbms-internal"
    explained: float  # share of db_ns a resource explains
    ns: dict[str, int]  # attributed ns per component (cpu_user, lock_wait, run_queue, ...)
    from_workers_ns: int  # time that came from parallel workers
    seq_bytes: int
    random_reqs: int
    random_bytes: int
    net_bytes: int
    # model (None without a calibration): wall ns saved per (what_if, factor), and model components in ns
    gains: dict[tuple[str, float], int | None]
    model_no_seq_ns: float | None
    model_net_ns: float | None
    disk_rate_bps: float | None
    link_rate_bps: float | None
    idle_cpus: float | None  # mean idle CPUs on its node meanwhile; None without samples or run-queue wait
    blocker: str | None  # who held the lock it waited for; None without a lock wait worth a word
    is_select: bool  # read-only text (SELECT, WITH)
    pid: int
    rows: int
    write_bytes: int
    jit: str  # the capture's jit setting, lower case ("" when not recorded)
    cpus: int
    kernel_functions: list[dict]  # ranked kernel hot spots (function, source, share, samples)
    parts: list | None  # a cluster statement's parts on its data nodes
    # the DBMS's own account where it keeps one (Oracle's 10046 trace): wait events with their objects,
    # calls, hard parses, literal variants, commits, fetch round trips; empty otherwise
    dbms: dict = field(default_factory=dict)
    storage: dict = field(default_factory=dict)  # the storage back-end's record (AdviceOptions.storage)
    function_tracer: dict = field(default_factory=dict)  # AdviceOptions.function_tracer

    def advice(self, rule: str, advice: str, evidence: str, gain: int | None = None,
               basis: str = "no model estimate") -> Advice:
        return make_advice(self.statement_id, self.query_id, self.executions, rule, advice, evidence, gain, basis)

    def in_db(self) -> str:
        """The base of the shares, said with them (docs/attribution.md, "Wall time and time in the database"):
        '7.3 ms in the database (client waits, 2.1 ms, excluded)'; the top table's wall time holds both."""
        client = self.ns.get("client_wait", 0)
        return f"{duration(self.db_ns)} in the database" + (f" (client waits, {duration(client)}, excluded)"
                                                            if client else "")

    def gain(self, what_if: str, k: float) -> int | None:
        return self.gains.get((what_if, k))


def make_advice(statement_id: int, query_id: int | None, executions: int, rule: str, advice: str, evidence: str,
                gain: int | None = None, basis: str = "no model estimate") -> Advice:
    """An Advice whose evidence says when it is summed over a query id's executions."""
    over = f"over {executions:,} executions: " if executions > 1 else ""
    return Advice(statement_id, query_id, rule, advice, over + evidence, gain, basis)


def what_ifs(cpus: int) -> list[tuple[str, float]]:
    """The model what-ifs the rules read (Evidence.gain): computed once per statement."""
    return [("cpu", float(cpus)), ("cpu", 1.3), ("cpu", 2.0), ("disk_rate", 2.0), ("disk_rate", 10.0),
            ("rand_access", 0.1), ("rand_access", 0.5), ("link_rate", 10.0)]


Rule = Callable[[Evidence], "Advice | None"]
