"""The advice rules: each a small function of one statement's Evidence returning its Advice or None,
run in RULES' order. Adding a rule is adding a function to RULES; the evidence (advice.evidence_of)
is computed once per statement, the model's what-ifs once each, whatever the rules that read them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from mwinv.correlator.classify import _pct
from mwinv.fmt import ms

MIN_WALL_NS = 10_000_000  # below 10 ms a handful of samples decide the shares: too thin to advise on
MIN_SHARE = 0.25  # a resource has to hold a quarter of the wall time before it is worth tuning
SPILL_BYTES = 1 << 20  # a SELECT writing a MiB or more is spilling sorts/hashes, not setting hint bits
MIN_RUN_QUEUE_SHARE = 0.10  # waiting runnable this share of the wall time is worth a word
MIN_LOCK_SHARE = 0.10  # and so is waiting for a lock
# Half a CPU idle on average while a statement waited runnable: the CPUs were not short, the process was
# held back (a quota, affinity); a run-queue wait with all CPUs busy is oversubscription.
IDLE_CPUS_NOT_SHORT = 0.5


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


def _ms(ns: float) -> str:
    return f"{ms(ns)} ms"


Rule = Callable[[Evidence], "Advice | None"]


# --- CPU
def _cpu_ev(e: Evidence) -> str:
    return (f"cpu {_pct(e.shares['cpu'])} of {_ms(e.wall_ns)} (user {_ms(e.ns.get('cpu_user', 0))}, "
            f"sys {_ms(e.ns.get('cpu_sys', 0))})")


def cpu_per_call(e: Evidence) -> Advice | None:
    if e.shares["cpu"] < MIN_SHARE or e.executions <= 1:
        return None
    per_call = e.wall_ns / e.executions
    each = _ms(per_call) if per_call >= 1e6 else f"{per_call / 1e3:.1f} µs"
    return e.advice("cpu.per_call", f"{e.executions:,} executions of {each} each on "
                    "average: too short for parallel query or JIT to pay off. Cut the calls or the work per "
                    "call: batch rows into fewer statements, cache what is read again and again, check the "
                    "plan (EXPLAIN (ANALYZE, BUFFERS)) for a narrower index or a covering one",
                    _cpu_ev(e), None, "depends on how many calls or how much work per call goes away")


def cpu_parallel(e: Evidence) -> Advice | None:
    if e.shares["cpu"] < MIN_SHARE or e.executions > 1 or e.from_workers_ns:
        return None
    k = float(e.cpus)
    return e.advice("cpu.parallel",
                    f"let it run in parallel: raise max_parallel_workers_per_gather (to {e.cpus - 1} "
                    f"here, {e.cpus} CPUs) and check that the plan gets a Gather; lower "
                    "parallel_setup_cost/parallel_tuple_cost if the planner refuses",
                    _cpu_ev(e) + "; no time came from parallel workers",
                    e.gain("cpu", k), f"model what-if CPU x{k:g} (ideal {e.cpus}-way parallelism)")


def cpu_jit(e: Evidence) -> Advice | None:
    if not (e.shares["cpu"] >= 0.5 and e.executions == 1 and e.jit in ("off", "false", "0")
            and e.wall_ns >= 500e6):
        return None
    return e.advice("cpu.jit", "try jit=on: expression-heavy scans (aggregates over many rows) "
                    "spend less CPU when compiled", _cpu_ev(e) + "; jit is off in this capture",
                    e.gain("cpu", 1.3), "model what-if CPU x1.3 (typical JIT gain on "
                    "aggregation-heavy TPC-H queries; measure it)")


def cpu_work_mem(e: Evidence) -> Advice | None:
    if e.shares["cpu"] < MIN_SHARE or not e.is_select or e.write_bytes < SPILL_BYTES:
        return None
    wb = e.write_bytes
    gain = round(2 * wb / e.disk_rate_bps * 1e9) if e.disk_rate_bps else None
    return e.advice("cpu.work_mem", "raise work_mem for this statement (SET LOCAL work_mem): its "
                    f"sorts/hashes spill {wb / 2**20:.1f} MiB to temporary files",
                    _cpu_ev(e) + f"; a read-only statement wrote {wb / 2**20:.1f} MiB (temporary files)",
                    gain, "writing and reading back the spilled bytes at the calibrated disk rate")


def cpu_faster(e: Evidence) -> Advice | None:
    if e.shares["cpu"] < MIN_SHARE or e.limit != "cpu":
        return None
    return e.advice("cpu.faster", "the statement is CPU-limited: a faster CPU or more nodes "
                    "(partitioning the scanned table) shorten it in proportion",
                    _cpu_ev(e), e.gain("cpu", 2.0), "model what-if CPU x2")


# --- disk, sequential
def _seq_ev(e: Evidence) -> str:
    return f"disk_seq {_pct(e.shares['disk_seq'])} of {_ms(e.wall_ns)}; {e.seq_bytes / 2**20:.1f} MiB read sequentially"


def disk_seq_bandwidth(e: Evidence) -> Advice | None:
    if e.shares["disk_seq"] < MIN_SHARE:
        return None
    return e.advice("disk_seq.bandwidth", "more sequential I/O bandwidth (faster storage, striping) "
                    "shortens this statement", _seq_ev(e), e.gain("disk_rate", 2.0), "model what-if disk rate x2")


def disk_seq_pruning(e: Evidence) -> Advice | None:
    # reading more than 64 KiB per returned row: the scan filters out most of what it reads
    if e.shares["disk_seq"] < MIN_SHARE or not (e.seq_bytes and e.rows and e.seq_bytes / e.rows > 64 * 1024):
        return None
    return e.advice("disk_seq.pruning", "the scan reads far more than it returns: partition the "
                    "table on the filtered column (range partitioning on dates) so that partition "
                    "pruning skips most of it, or add an index for the filter",
                    _seq_ev(e) + f"; {e.seq_bytes / e.rows / 1024:.0f} KiB read per returned row",
                    e.gain("disk_rate", 10.0), "model what-if disk rate x10 (reading a tenth of the data)")


def disk_seq_memory(e: Evidence) -> Advice | None:
    if e.shares["disk_seq"] < MIN_SHARE or not e.seq_bytes:
        return None
    gain = round(e.seq_bytes / e.disk_rate_bps * 1e9) if e.disk_rate_bps else None
    return e.advice("disk_seq.memory", f"memory that holds the {e.seq_bytes / 2**20:.0f} MiB "
                    "working set (a larger memory limit, page cache, shared_buffers) removes the "
                    "sequential disk time of repeated runs", _seq_ev(e), gain, "all of the model's t_seq")


# --- disk, random
def _random_ev(e: Evidence) -> str:
    return (f"disk_random {_pct(e.shares['disk_random'])} of {_ms(e.wall_ns)}; {int(e.random_reqs)} random "
            f"requests ({e.random_bytes / 2**20:.1f} MiB)")


def disk_random_index(e: Evidence) -> Advice | None:
    if e.shares["disk_random"] < MIN_SHARE:
        return None
    return e.advice("disk_random.index", "random heap reads: check the index used (EXPLAIN (ANALYZE, BUFFERS)) "
                    "and its correlation (pg_stats.correlation of the key); CLUSTER the table on that "
                    "index, or add a covering index (INCLUDE) for an index-only scan",
                    _random_ev(e), e.gain("rand_access", 0.1),
                    "model what-if random access time x0.1 (reads in key order become near-sequential)")


def disk_random_io_concurrency(e: Evidence) -> Advice | None:
    if e.shares["disk_random"] < MIN_SHARE:
        return None
    return e.advice("disk_random.io_concurrency", "raise effective_io_concurrency (e.g. 32-256 on SSDs) "
                    "so bitmap heap scans prefetch; random reads then overlap",
                    _random_ev(e), e.gain("rand_access", 0.5), "model what-if random access time x0.5")


def disk_random_shared_buffers(e: Evidence) -> Advice | None:
    if e.shares["disk_random"] < MIN_SHARE or not e.random_bytes:
        return None
    gain = round(e.model_no_seq_ns) if e.model_no_seq_ns is not None else None
    return e.advice("disk_random.shared_buffers", f"shared_buffers (or memory) large enough for "
                    f"the {e.random_bytes / 2**20:.0f} MiB read at random keeps it cached",
                    _random_ev(e), gain, "all of the model's t_no_seq")


# --- network
def network(e: Evidence) -> Advice | None:
    if e.shares["network"] < MIN_SHARE:
        return None
    ev = f"network {_pct(e.shares['network'])} of {_ms(e.wall_ns)}; {e.net_bytes / 2**20:.2f} MiB sent+received"
    gain = e.gain("link_rate", 10.0)
    if e.model_net_ns is not None and e.model_net_ns < 0.5 * e.ns.get("network", 0):
        return e.advice("network.latency", "the network time is not bandwidth: the bytes would take "
                        f"{_ms(e.model_net_ns)} at the link rate but the statement waited {_ms(e.ns['network'])}; "
                        "fewer round trips help (larger fetch_size for postgres_fdw, batching), a faster "
                        "link does not ([Taufer]'s Q3)", ev, gain, "model what-if link rate x10")
    return e.advice("network.bandwidth", "a faster link, or ship less data (push filters and "
                    "aggregates down to the nodes, co-locate joined partitions)", ev, gain,
                    "model what-if link rate x10")


# --- locks
def lock_wait(e: Evidence) -> Advice | None:
    if e.shares["lock"] < MIN_LOCK_SHARE:
        return None
    return e.advice("lock.wait", f"lock waits: {e.blocker}. Shorten the blocking transaction, take "
                    "locks in one order, or use SKIP LOCKED / NOWAIT for queue-like access",
                    f"lock_wait {_ms(e.ns.get('lock_wait', 0))} ({_pct(e.shares['lock'])} of {_ms(e.wall_ns)})",
                    e.ns.get("lock_wait", 0), "all of the lock wait")


# --- the data nodes (a cluster's coordinator statement)
def remote(e: Evidence) -> Advice | None:
    """The coordinator waited for its data nodes: for the transfer over their links, for their work, or for
    round trips while they idled. A node's result is flushed after its FETCH's record ends, so a node
    sending over a slow link looks idle between its fetches: the bytes over the calibrated link rate
    tell that apart."""
    if e.shares.get("remote", 0) < MIN_SHARE or not e.parts:
        return None
    parts = e.parts
    waited = e.ns.get("remote_wait", 0)
    crit = next(p for p in parts if p.critical)
    fetches = sum(p.fetches for p in parts)
    ev = (f"remote_wait {_ms(waited)} of {_ms(e.wall_ns)}; " + "; ".join(
        f"{p.node}{' (critical)' if p.critical else ''}: {p.fetches} fetches, {p.rows:,} rows, "
        f"{p.sent_bytes / 2**20:.2f} MiB, busy {_ms(p.execution_ns)}, idle {_ms(p.idle_ns)}, last fetch at "
        f"{_ms(p.last_end_ns)}" for p in parts))
    transfer = crit.sent_bytes / e.link_rate_bps * 1e9 if e.link_rate_bps else 0
    if transfer >= 0.5 * waited:
        return e.advice("remote.link", f"the wait is the transfer over node {crit.node}'s link "
                        f"({crit.sent_bytes / 2**20:.2f} MiB at the calibrated {e.link_rate_bps / 2**20:.2f} MiB/s = "
                        f"{_ms(transfer)}): a faster link, or ship less (co-partition joined tables, group by the "
                        "partition key so that aggregates are pushed whole, select fewer columns)", ev,
                        round(0.9 * transfer), "90 % of the critical node's transfer time (a link 10x faster)")
    if crit.execution_ns >= 0.5 * waited:
        return e.advice("remote.node_work", f"the wait is node {crit.node}'s own work ({_busy_shares(crit)}): more "
                        "nodes, a scheme that spreads the scanned table wider, or what its breakdown names "
                        "(check the skew: the other nodes finished earlier)", ev, None,
                        "depends on how the critical node's work shrinks")
    ends = sorted(p.last_end_ns for p in parts)
    serial = len(parts) > 1 and all(b - end >= 0.5 * (crit.execution_ns + crit.idle_ns) / len(parts)
                                    for end, b in zip(ends, ends[1:]))
    text = (f"the data nodes idled (critical node busy {_ms(crit.execution_ns)} of {_ms(waited)} waited) through "
            f"{fetches} fetch round trips: raise postgres_fdw's fetch_size (ALTER SERVER ... OPTIONS (SET "
            "fetch_size '10000')), and push work down: co-partition joined tables, group by the partition key "
            "(postgres_fdw pushes only whole aggregates; partial ones ship every row)")
    if serial:
        text += ("; the nodes worked one after the other: async_capable 'true' on the servers runs their scans "
                 "at once (only where an Append sits directly over the foreign scans; a nested loop rescans "
                 "them one by one)")
    return e.advice("remote.round_trips", text, ev, None, "depends on the round-trip latency and the plan")


def _busy_shares(part) -> str:
    busy = {c: v for c, v in part.components.items() if c != "client_wait" and v}
    total = sum(busy.values()) or 1
    return ", ".join(f"{c} {100 * v / total:.0f}%" for c, v in sorted(busy.items(), key=lambda kv: -kv[1])[:3])


# --- run queue
def run_queue(e: Evidence) -> Advice | None:
    if e.shares["run_queue"] < MIN_RUN_QUEUE_SHARE:
        return None
    waited = e.ns.get("run_queue", 0)
    queued = f"the statement waited {_ms(waited)} runnable but not running"
    evidence = f"run_queue {_pct(e.shares['run_queue'])} of {_ms(e.wall_ns)}"
    if e.idle_cpus is not None:
        evidence += f"; {e.idle_cpus:.1f} of {e.cpus} CPUs idle on average meanwhile (node samples)"
    if e.idle_cpus is not None and e.idle_cpus >= IDLE_CPUS_NOT_SHORT:
        return e.advice("run_queue.throttled", f"{queued} while the node had idle CPUs: not a shortage of "
                        f"CPUs. Backend pid {e.pid} is held back: a CPU quota (cgroup cpu.cfs_quota_us "
                        "or cpu.max, a container's CPU limit; its cpu.stat counts nr_throttled and "
                        "throttled_time), CPU affinity (taskset, cpuset) or a low weight under contention "
                        f"(nice, cpu.shares). Look at /proc/{e.pid}/cgroup and raise the limit",
                        evidence, waited, "all of the run-queue wait")
    return e.advice("run_queue.oversubscription", f"{queued}: more busy processes than the {e.cpus} CPUs. "
                    "Reduce concurrency (connection pool size, max_parallel_workers) or add CPUs",
                    evidence, waited, "all of the run-queue wait")


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
                        f"{names}: {_pct(share)} of the statement's kernel time ({source}, "
                        f"{sum(k['samples'] or 0 for k in hits)} samples; {_ms(sys_ns)} sys)",
                        round(share * sys_ns), "upper bound: all of the hot spot's kernel time")
    rule.__name__ = f"kernel_{key}"
    return rule


# --- nothing explains it ([Taufer]'s query 8)
def not_allocated(e: Evidence) -> Advice | None:
    if e.limit != "dbms-internal" and e.shares["unexplained"] < 0.5:
        return None
    s = e.shares
    shares_txt = (f"cpu {_pct(s['cpu'])}, disk_seq {_pct(s['disk_seq'])}, disk_random {_pct(s['disk_random'])}, "
                  f"network {_pct(s['network'])}")
    return e.advice("not_allocated", f"no machine resource explains {_pct(s['unexplained'])} of this "
                    "statement's time: it waited for something the trace does not see (client round "
                    "trips, sleeps, latches, IPC, a remote node). Look at pg_stat_activity wait events "
                    "(pg_wait_sampling), EXPLAIN ANALYZE and the client; such statements have a high "
                    "potential for tuning the application or the DBMS ([Taufer])",
                    f"explained {_pct(e.explained)}; {shares_txt}", None, "unknown: no resource to scale")


# The rules in the order their advice is listed.
RULES: list[Rule] = [
    cpu_per_call, cpu_parallel, cpu_jit, cpu_work_mem, cpu_faster,
    disk_seq_bandwidth, disk_seq_pruning, disk_seq_memory,
    disk_random_index, disk_random_io_concurrency, disk_random_shared_buffers,
    network, lock_wait, remote, run_queue,
    *(kernel_hot_spot(*spot) for spot in KERNEL_HOT_SPOTS),
    not_allocated,
]
