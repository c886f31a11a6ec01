"""What an advice rule is written against, whichever engine's it is: the Evidence it reads about one
statement, the Advice it returns (Rule: a function from one to the other, None when it does not fire),
the thresholds the engines' rules share, and the kernel's hot-spot rules (the kernel is the same under
every engine). An engine's rules are listed by its registration (mwinv/engines/registry.py); the
evidence (correlator/advice.evidence_of) is computed once per statement, the model's what-ifs once
each, whatever the rules that read them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from mwinv.fmt import ms_text, pct

MIN_WALL_NS = 10_000_000  # below 10 ms a handful of samples decide the shares: too thin to advise on
MIN_SHARE = 0.25  # a resource has to hold a quarter of the wall time before it is worth tuning
MIN_RUN_QUEUE_SHARE = 0.10  # waiting runnable this share of the wall time is worth a word
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
    wall_ns: float
    executions: int  # > 1: the row stands for its query id's executions, summed
    shares: dict[str, float]  # wall-time share per class (classify.class_shares): cpu, disk_seq, lock, ...
    limit: str  # the class that limits it, e.g. "cpu", "dbms-internal"
    explained: float  # share of the wall time a resource explains
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

    def advice(self, rule: str, advice: str, evidence: str, gain: int | None = None,
               basis: str = "no model estimate") -> Advice:
        return make_advice(self.statement_id, self.query_id, self.executions, rule, advice, evidence, gain, basis)

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


# --- kernel hot spots ([Tanigawa]): function name pattern -> (rule key, sysctl advice, why)
KERNEL_HOT_SPOTS = [
    (re.compile(r"find_busiest_group|load_balance|update_sd_lb_stats|newidle_balance|select_task_rq_fair|"
                r"migrate_task|active_load_balance"),
     "sched_migration_cost",
     "raise the scheduler's migration cost (sysctl kernel.sched_migration_cost_ns, or "
     "/sys/kernel/debug/sched/migration_cost_ns on kernels >= 5.13), e.g. from 0.5 ms to 5 ms",
     "the scheduler spends this statement's kernel time looking for a busier CPU and migrating tasks; a "
     "higher migration cost makes tasks count as cache-hot and cuts load-balancing ([Tanigawa]: "
     "find_busiest_group 30 % of an INSERT's kernel time)"),
    (re.compile(r"task_numa_work|numa_migrate|migrate_pages|change_prot_numa|change_protection_range|"
                r"do_numa_page|migrate_misplaced"),
     "numa_balancing",
     "turn automatic NUMA balancing off (sysctl kernel.numa_balancing=0) or bind the server to one node",
     "NUMA hinting faults and page migration run on the statement's behalf; on a database whose shared "
     "buffers are touched from every node they move pages back and forth ([Tanigawa]: 80 % of a TPC-H "
     "query's kernel time)"),
    (re.compile(r"clear_page|do_anonymous_page|handle_mm_fault|__handle_mm_fault|do_huge_pmd|khugepaged|"
                r"compact_zone|isolate_migratepages|do_page_fault|exc_page_fault|filemap_map_pages"),
     "transparent_hugepage",
     "set /sys/kernel/mm/transparent_hugepage/enabled and defrag to madvise (or never) and give "
     "PostgreSQL explicit huge pages (vm.nr_hugepages, huge_pages=on) for shared_buffers",
     "page faults and page clearing/compaction hold this statement's kernel time; explicit huge pages "
     "cut the faults, and THP defragmentation stalls are avoided"),
    (re.compile(r"balance_dirty_pages|wb_writeback|writeback_sb_inodes|ext4_writepages|"
                r"blk_mq_submit_bio.*write|folio_wait_writeback|wait_on_page_writeback"),
     "dirty_writeback",
     "start background writeback earlier and bound dirty memory: lower vm.dirty_background_bytes "
     "(e.g. 64 MB) and vm.dirty_bytes (e.g. 256 MB) instead of the ratio defaults",
     "the statement is throttled in dirty-page writeback (balance_dirty_pages): large bursts of dirty "
     "pages are flushed in the foreground of the writer"),
]


def kernel_hot_spot(pattern: re.Pattern, key: str, what: str, why: str) -> Rule:
    """The rule for one of KERNEL_HOT_SPOTS: its functions hold a tenth of the statement's kernel time,
    which is itself a twentieth of the wall time."""
    def rule(e: Evidence) -> Advice | None:
        sys_ns = e.ns.get("cpu_sys", 0)
        if sys_ns < 0.05 * e.wall_ns:
            return None
        # shares are of one source's samples: summed per source, the source that sees most decides
        per_source: dict[str, list[dict]] = {}
        for k in e.kernel_functions:
            if pattern.search(k["function"] or ""):
                per_source.setdefault(k["source"], []).append(k)
        if not per_source:
            return None
        source, hits = max(per_source.items(), key=lambda kv: sum(k["share"] or 0 for k in kv[1]))
        share = sum(k["share"] or 0 for k in hits)
        if share < 0.10:
            return None
        names = ", ".join(sorted({k["function"] for k in hits})[:4])
        return e.advice(f"kernel.{key}", what + ". Why: " + why,
                        f"{names}: {pct(share)} of the statement's kernel time ({source}, "
                        f"{sum(k['samples'] or 0 for k in hits)} samples; {ms_text(sys_ns)} sys)",
                        round(share * sys_ns), "upper bound: all of the hot spot's kernel time")
    rule.__name__ = f"kernel_{key}"
    return rule
