"""PostgreSQL's advice rules: each a small function of one statement's Evidence (mwinv/rules.py)
returning its Advice or None, run in RULES' order; the remedies are PostgreSQL's settings. Adding a
rule is adding a function to RULES."""

from __future__ import annotations

from mwinv.fmt import duration, pct
from mwinv.rules import (KERNEL_RULES, MIN_LOCK_SHARE, MIN_RUN_QUEUE_SHARE, MIN_SHARE, Advice, Evidence, Rule)

SPILL_BYTES = 1 << 20  # a SELECT writing a MiB or more is spilling sorts/hashes, not setting hint bits
# Half a CPU idle on average while a statement waited runnable: the CPUs were not short, the process was
# held back (a quota, affinity); a run-queue wait with all CPUs busy is oversubscription.
IDLE_CPUS_NOT_SHORT = 0.5


# --- CPU
def _cpu_ev(e: Evidence) -> str:
    return (f"cpu {pct(e.shares['cpu'])} of {e.in_db()} (user {duration(e.ns.get('cpu_user', 0))}, "
            f"sys {duration(e.ns.get('cpu_sys', 0))})")


def cpu_per_call(e: Evidence) -> Advice | None:
    if e.shares["cpu"] < MIN_SHARE or e.executions <= 1:
        return None
    per_call = e.db_ns / e.executions
    return e.advice("cpu.per_call", f"{e.executions:,} executions of {duration(per_call)} each on "
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
            and e.db_ns >= 500e6):
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
    return f"disk_seq {pct(e.shares['disk_seq'])} of {e.in_db()}; {e.seq_bytes / 2**20:.1f} MiB read sequentially"


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
    return (f"disk_random {pct(e.shares['disk_random'])} of {e.in_db()}; {int(e.random_reqs)} random "
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
    ev = f"network {pct(e.shares['network'])} of {e.in_db()}; {e.net_bytes / 2**20:.2f} MiB sent+received"
    gain = e.gain("link_rate", 10.0)
    if e.model_net_ns is not None and e.model_net_ns < 0.5 * e.ns.get("network", 0):
        return e.advice("network.latency", "the network time is not bandwidth: the bytes would take "
                        f"{duration(e.model_net_ns)} at the link rate but the statement waited {duration(e.ns['network'])}; "
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
                    f"lock_wait {duration(e.ns.get('lock_wait', 0))} ({pct(e.shares['lock'])} of {e.in_db()})",
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
    ev = (f"remote_wait {duration(waited)} of {e.in_db()}; " + "; ".join(
        f"{p.node}{' (critical)' if p.critical else ''}: {p.fetches} fetches, {p.rows:,} rows, "
        f"{p.sent_bytes / 2**20:.2f} MiB, busy {duration(p.execution_ns)}, idle {duration(p.idle_ns)}, last fetch at "
        f"{duration(p.last_end_ns)}" for p in parts))
    transfer = crit.sent_bytes / e.link_rate_bps * 1e9 if e.link_rate_bps else 0
    if transfer >= 0.5 * waited:
        return e.advice("remote.link", f"the wait is the transfer over node {crit.node}'s link "
                        f"({crit.sent_bytes / 2**20:.2f} MiB at the calibrated {e.link_rate_bps / 2**20:.2f} MiB/s = "
                        f"{duration(transfer)}): a faster link, or ship less (co-partition joined tables, group by the "
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
    text = (f"the data nodes idled (critical node busy {duration(crit.execution_ns)} of {duration(waited)} waited) through "
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
    queued = f"the statement waited {duration(waited)} runnable but not running"
    evidence = f"run_queue {pct(e.shares['run_queue'])} of {e.in_db()}"
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


# --- nothing explains it ([Taufer]'s query 8)
def not_allocated(e: Evidence) -> Advice | None:
    if e.limit != "dbms-internal" and e.shares["unexplained"] < 0.5:
        return None
    s = e.shares
    shares_txt = (f"cpu {pct(s['cpu'])}, disk_seq {pct(s['disk_seq'])}, disk_random {pct(s['disk_random'])}, "
                  f"network {pct(s['network'])}")
    return e.advice("not_allocated", f"no machine resource explains {pct(s['unexplained'])} of this "
                    "statement's time in the database: it waited for something the trace does not see (client round "
                    "trips, sleeps, latches, IPC, a remote node). Look at pg_stat_activity wait events "
                    "(pg_wait_sampling), EXPLAIN ANALYZE and the client; such statements have a high "
                    "potential for tuning the application or the DBMS ([Taufer])",
                    f"explained {pct(e.explained)} of {e.in_db()}; {shares_txt}", None, "unknown: no resource to scale")


# The rules in the order their advice is listed.
RULES: list[Rule] = [
    cpu_per_call, cpu_parallel, cpu_jit, cpu_work_mem, cpu_faster,
    disk_seq_bandwidth, disk_seq_pruning, disk_seq_memory,
    disk_random_index, disk_random_io_concurrency, disk_random_shared_buffers,
    network, lock_wait, remote, run_queue,
    *KERNEL_RULES,
    not_allocated,
]
