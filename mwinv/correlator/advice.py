"""Tuning advice: rules over one statement's evidence (class shares, I/O counts, kernel hot spots,
text) and the model's expected gain. A rule fires only on evidence it names; a statement with too
little data gets one "data too thin" note instead of guesses.

The expected gain of a rule is the wall time the model's what-if (model.predict) would remove,
e.g. "CPU 3x" for three parallel processes; where the gain is "all of the component" (e.g. a
working set that would fit in memory) the rule says so. Kernel hot spot rules follow seed 003:
name the sysctl and why."""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from mwinv.capture.columns import empty_table
from mwinv.capture.tables import SCHEMAS, Capture
from mwinv.correlator.classify import class_shares, ranked_kernel_functions
from mwinv.correlator.load import connect, create_empty
from mwinv.correlator.model import Platform, estimate_components, inputs_from, model_connection, model_total

MIN_WALL_NS = 10_000_000  # below 10 ms a handful of samples decide the shares: too thin to advise on
MIN_SHARE = 0.25  # a resource has to hold a quarter of the wall time before it is worth tuning
SPILL_BYTES = 1 << 20  # a SELECT writing a MiB or more is spilling sorts/hashes, not setting hint bits
MIN_RUN_QUEUE_SHARE = 0.10  # waiting runnable this share of the wall time is worth a word
MIN_LOCK_SHARE = 0.10  # and so is waiting for a lock
BLOCKER_LOOKBACK_NS = 60_000_000_000  # a blocker's statement that took the lock started at most this long before
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


# Kernel hot spots (seed 003): function name pattern -> (rule key, sysctl advice, why)
KERNEL_HOT_SPOTS = [
    (re.compile(r"find_busiest_group|load_balance|update_sd_lb_stats|newidle_balance|select_task_rq_fair|"
                r"migrate_task|active_load_balance"),
     "sched_migration_cost",
     "raise the scheduler's migration cost (sysctl kernel.sched_migration_cost_ns, or "
     "/sys/kernel/debug/sched/migration_cost_ns on kernels >= 5.13), e.g. from 0.5 ms to 5 ms",
     "the scheduler spends this statement's kernel time looking for a busier CPU and migrating tasks; a "
     "higher migration cost makes tasks count as cache-hot and cuts load-balancing (seed 003: "
     "find_busiest_group 30 % of an INSERT's kernel time)"),
    (re.compile(r"task_numa_work|numa_migrate|migrate_pages|change_prot_numa|change_protection_range|"
                r"do_numa_page|migrate_misplaced"),
     "numa_balancing",
     "turn automatic NUMA balancing off (sysctl kernel.numa_balancing=0) or bind the server to one node",
     "NUMA hinting faults and page migration run on the statement's behalf; on a database whose shared "
     "buffers are touched from every node they move pages back and forth (seed 003: 80 % of a TPC-H "
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


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _gain(st: dict, platform: Platform | None, what_if: str, k: float) -> int | None:
    if platform is None:
        return None
    base = estimate_components(st["nodes"], platform)
    new = estimate_components(st["nodes"], platform.scaled(what_if, k))
    return round((model_total(base) - model_total(new)) * 1e9)


def advise(statements: pa.Table, attribution: pa.Table, statement_io: pa.Table | None = None,
           kernel_functions: pa.Table | None = None, statement_text: pa.Table | None = None,
           calibration: dict | None = None, kernel_events: pa.Table | None = None,
           cpus: int | None = None, settings: dict | None = None,
           node_samples: pa.Table | None = None, only: list[int] | None = None,
           con: duckdb.DuckDBPyConnection | None = None, windows: str = "statements",
           node_parts: dict | None = None) -> list[Advice]:
    """Advice for every root statement (or those in `only`). settings: server GUCs the capture recorded
    (e.g. jit); node_samples: the nodes' CPU samples, which tell a CPU shortage from a capped process.
    con: a connection that already holds these as `statements`, `attribution`, `statement_io` and
    `node_sample` (advise_capture reads them from Parquet: registering Arrow tables imports pandas).
    windows: the table of the times the statements ran (see _idle_cpus); node_parts: a cluster
    statement's parts on its data nodes (nodes.node_parts), by statement id."""
    platform = None
    if calibration and "disk" in calibration:
        platform = Platform.from_calibration(calibration)
    settings = settings or {}
    texts = {}
    if statement_text is not None:
        texts = dict(zip(statement_text.column("query_text_hash").to_pylist(), statement_text.column("text").to_pylist()))
    wanted = set(only) if only is not None else None
    srow = {r["statement_id"]: r for r in statements.to_pylist() if wanted is None or r["statement_id"] in wanted}
    kfuncs = ranked_kernel_functions(kernel_functions)  # only sources with samples enough to rank
    own_con = con is None
    if own_con:
        con = model_connection(statements, attribution, statement_io)
        con.register("node_sample", node_samples if node_samples is not None else empty_table(SCHEMAS["node_sample"]))
    inputs = inputs_from(con, only)
    classes = class_shares(con, only)
    queued = [sid for sid, (shares, _, _) in classes.items() if shares["run_queue"] >= MIN_RUN_QUEUE_SHARE]
    idle = _idle_cpus(con, queued, windows) if queued else {}
    if own_con:
        con.close()
    out: list[Advice] = []
    for sid, st in inputs.items():
        row = srow[sid]
        out.extend(_advise_one(st, classes[sid], row, texts, kfuncs.get(sid, []), platform, statements,
                               kernel_events, cpus or 2, settings, idle.get(sid), (node_parts or {}).get(sid)))
    return out


LOCK_WAKEUPS_SQL = """
    SELECT k.* FROM kernel_event k
    WHERE (k.event LIKE '%sched_waking' OR k.event LIKE '%sched_wakeup') AND k.target_pid IN (
        SELECT s.pid FROM statements s JOIN attribution a USING (statement_id)
        WHERE a.component = 'lock_wait' AND a.ns > 0)"""


def advise_capture(capture_dir, statement_ids: list[int]) -> dict[int, list[Advice]]:
    """Advice for a few statements of a correlated capture (the terminal's and the report's top ones),
    reading the rows they need rather than the whole capture.

    An execution under MIN_WALL_NS is too short to advise on; when its query id ran more often (an OLTP
    statement), the advice is over all its executions: times, requests, rows and kernel samples summed,
    the example execution standing for them. Otherwise over the execution itself, with its workers and
    remote parts, and, when it waited for a lock, the other backends' statements around the wait and the
    wake-ups that name the blocker."""
    cap = Capture(capture_dir)
    if not statement_ids or not cap.has("statement") or not cap.has("statement_attribution"):
        return {}
    manifest = cap.manifest()
    con = connect()
    for table in ("statement", "statement_attribution", "statement_kernel_function", "node_sample", "statement_text",
                  "kernel_event"):
        if cap.has(table):
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{cap.glob(table)}')")
        else:
            create_empty(con, table, "VIEW")
    con.execute(f"""
        CREATE TABLE example AS
        SELECT * FROM statement WHERE statement_id IN ({", ".join(str(int(i)) for i in statement_ids)})""")
    # each example stands for itself, or (too short) for all root executions of its query id
    con.execute(f"""
        CREATE TABLE member AS
        SELECT statement_id AS key, statement_id FROM example
        UNION
        SELECT e.statement_id, s.statement_id FROM example e JOIN statement s ON s.query_id = e.query_id
        WHERE e.end_ns - e.start_ns < {MIN_WALL_NS} AND s.parent_statement_id IS NULL""")
    con.execute(f"""
        CREATE TABLE statements AS
        WITH g AS (
            SELECT m.key, count(*) AS executions, sum(s.end_ns - s.start_ns)::BIGINT AS wall_ns,
                   sum(s.rows)::BIGINT AS rows, sum(s.write_bytes)::BIGINT AS write_bytes
            FROM member m JOIN statement s USING (statement_id) GROUP BY m.key),
        locked AS (  -- the single executions that waited for a lock
            SELECT e.node, e.start_ns, e.end_ns FROM example e JOIN g ON g.key = e.statement_id AND g.executions = 1
            JOIN statement_attribution a USING (statement_id)
            WHERE a.component = 'lock_wait' AND a.ns >= {MIN_LOCK_SHARE} * (e.end_ns - e.start_ns))
        SELECT e.* REPLACE (e.start_ns + g.wall_ns AS end_ns, g.rows AS rows, g.write_bytes AS write_bytes),
               g.executions
        FROM example e JOIN g ON g.key = e.statement_id
        UNION ALL BY NAME  -- the executions' parallel workers and remote parts, under their example
        SELECT w.* REPLACE (m.key AS parent_statement_id), 1 AS executions
        FROM statement w JOIN member m ON w.parent_statement_id = m.statement_id
        UNION ALL BY NAME  -- other backends' statements around a lock wait
        SELECT DISTINCT s.*, 1 AS executions FROM statement s JOIN locked l
            ON s.node = l.node AND s.start_ns < l.end_ns AND s.end_ns > l.start_ns - {BLOCKER_LOOKBACK_NS}
        WHERE s.statement_id NOT IN (SELECT statement_id FROM member)""")
    con.execute("""
        CREATE TABLE attribution AS
        SELECT any_value(a.node) AS node, m.key AS statement_id, any_value(a.query_id) AS query_id, a.component,
               sum(a.ns)::BIGINT AS ns, sum(a.from_workers_ns)::BIGINT AS from_workers_ns
        FROM statement_attribution a JOIN member m USING (statement_id) GROUP BY m.key, a.component""")
    if cap.has("statement_io"):  # the executions' requests summed, their workers' and remote parts' as they are
        io = f"read_parquet('{cap.glob('statement_io')}')"
        sums = ", ".join(f"sum({c})::BIGINT AS {c}" for c in ("seq_bytes", "seq_reqs", "random_reqs", "random_bytes",
                                                              "net_rx_bytes", "net_tx_bytes"))
        con.execute(f"""
            CREATE TABLE statement_io AS
            SELECT i.node, m.key AS statement_id, {sums}
            FROM {io} i JOIN member m USING (statement_id) GROUP BY i.node, m.key
            UNION ALL BY NAME
            SELECT i.* FROM {io} i JOIN statements s USING (statement_id)
            WHERE s.parent_statement_id IN (SELECT key FROM member)""")
    else:
        create_empty(con, "statement_io")
    con.execute("""
        CREATE TABLE kernel_function_of AS
        SELECT any_value(k.node) AS node, m.key AS statement_id, any_value(k.query_id) AS query_id, k.function,
               any_value(k.stack) AS stack, sum(k.samples)::BIGINT AS samples, sum(k.ns)::BIGINT AS ns,
               sum(k.ns) / sum(sum(k.ns)) OVER (PARTITION BY m.key, k.source) AS share, k.source
        FROM statement_kernel_function k JOIN member m USING (statement_id) GROUP BY m.key, k.source, k.function""")
    # the CPU samples overlapping the executions themselves tell whether CPUs stood idle
    con.execute("""
        CREATE TABLE windows AS
        SELECT m.key AS statement_id, s.node, s.start_ns, s.end_ns FROM member m JOIN statement s USING (statement_id)""")

    def arrow(sql: str) -> pa.Table:
        return con.execute(sql).to_arrow_table()
    advice = advise(arrow("SELECT * FROM statements"), arrow("SELECT * FROM attribution"),
                    arrow("SELECT * FROM statement_io"), arrow("SELECT * FROM kernel_function_of"),
                    arrow("SELECT * FROM statement_text"), manifest.get("calibration"),
                    # the wake-ups matter only to a lock wait: no scan of the kernel events without one
                    kernel_events=arrow(LOCK_WAKEUPS_SQL) if con.execute(
                        "SELECT count(*) FROM attribution WHERE component = 'lock_wait' AND ns > 0").fetchone()[0]
                    else None, cpus=manifest.get("cpus"),
                    settings=manifest.get("settings") or {}, node_samples=arrow("SELECT * FROM node_sample"),
                    only=statement_ids, con=con, windows="windows", node_parts=_node_parts(cap, statement_ids))
    con.close()
    out: dict[int, list[Advice]] = {}
    for a in advice:
        out.setdefault(a.statement_id, []).append(a)
    return out


def _node_parts(cap: Capture, statement_ids: list[int]) -> dict:
    """A cluster capture's statements' parts on the data nodes (none for a single server's capture)."""
    if not cap.has("statement_link"):
        return {}
    from mwinv.correlator.load import open_correlated
    from mwinv.correlator.nodes import node_parts

    db = open_correlated(cap.path)
    try:
        return {sid: parts for sid in statement_ids if (parts := node_parts(db, sid))}
    finally:
        db.con.close()


def _idle_cpus(con: duckdb.DuckDBPyConnection, statement_ids: list[int], windows: str = "statements") -> dict[int, float]:
    """The mean number of idle CPUs on each statement's node while it ran (idle and iowait time of the
    samples overlapping the statement, each weighted by its overlap). windows: a table of (statement_id,
    node, start_ns, end_ns), several rows for a statement that stands for several executions."""
    rows = con.execute(f"""
        WITH o AS (
            SELECT s.statement_id, n.cpu_idle_ns + coalesce(n.cpu_iowait_ns, 0) AS idle_ns, n.interval_ns,
                   least(n.ts_ns, s.end_ns) - greatest(n.ts_ns - n.interval_ns, s.start_ns) AS overlap_ns
            FROM {windows} s
            JOIN node_sample n ON n.node = s.node AND n.ts_ns > s.start_ns AND n.ts_ns - n.interval_ns < s.end_ns
            WHERE n.interval_ns > 0 AND n.cpu_idle_ns IS NOT NULL  -- the CPU rows (disk and net rows have none)
              AND s.statement_id IN ({", ".join(map(str, statement_ids))}))
        SELECT statement_id, sum(idle_ns * overlap_ns / interval_ns) / sum(overlap_ns) FROM o GROUP BY 1""").fetchall()
    return {sid: float(v) for sid, v in rows if v is not None}


def _advise_one(st: dict, cls: tuple[dict[str, float], str, float], row: dict, texts: dict[int, str],
                kfuncs: list[dict], platform: Platform | None,
                statements: pa.Table, kernel_events: pa.Table | None, cpus: int, settings: dict,
                idle_cpus: float | None, parts: list | None = None) -> list[Advice]:
    sid, qid, wall = st["statement_id"], st["query_id"], st["wall_ns"]
    a = st["attributed"]

    executions = row.get("executions") or 1  # > 1: the row stands for its query id's executions, summed
    over = f"over {executions:,} executions: " if executions > 1 else ""

    def adv(rule, advice, evidence, gain=None, basis="no model estimate"):
        return Advice(sid, qid, rule, advice, over + evidence, gain, basis)

    if not a or wall < MIN_WALL_NS:
        why = "no attribution rows" if not a else f"wall time {_ms(wall)} < {_ms(MIN_WALL_NS)}"
        return [adv("too-thin", "no advice: the data is too thin to tell what limits this statement",
                    why + "; the shares rest on too few events or samples")]
    shares, limit, explained = cls
    result: list[Advice] = []
    io = {k: sum(n[k] for n in st["nodes"]) for k in ("seq_bytes", "random_reqs", "random_bytes", "net_bytes")}
    shares_txt = f"cpu {_pct(shares['cpu'])}, disk_seq {_pct(shares['disk_seq'])}, " \
                 f"disk_random {_pct(shares['disk_random'])}, network {_pct(shares['network'])}"
    text = texts.get(row.get("query_text_hash")) or ""
    is_select = text.lstrip().lower().startswith(("select", "with"))

    # --- CPU
    if shares["cpu"] >= MIN_SHARE:
        ev = f"cpu {_pct(shares['cpu'])} of {_ms(wall)} (user {_ms(a.get('cpu_user', 0))}, sys {_ms(a.get('cpu_sys', 0))})"
        if executions > 1:
            per_call = wall / executions
            each = _ms(per_call) if per_call >= 1e6 else f"{per_call / 1e3:.1f} µs"
            result.append(adv("cpu.per_call", f"{executions:,} executions of {each} each on "
                              "average: too short for parallel query or JIT to pay off. Cut the calls or the work per "
                              "call: batch rows into fewer statements, cache what is read again and again, check the "
                              "plan (EXPLAIN (ANALYZE, BUFFERS)) for a narrower index or a covering one",
                              ev, None, "depends on how many calls or how much work per call goes away"))
        elif not st["from_workers_ns"]:
            k = float(cpus)
            result.append(adv("cpu.parallel",
                              f"let it run in parallel: raise max_parallel_workers_per_gather (to {cpus - 1} "
                              f"here, {cpus} CPUs) and check that the plan gets a Gather; lower "
                              "parallel_setup_cost/parallel_tuple_cost if the planner refuses",
                              ev + "; no time came from parallel workers",
                              _gain(st, platform, "cpu", k), f"model what-if CPU x{k:g} (ideal {cpus}-way parallelism)"))
        if executions == 1 and str(settings.get("jit", "")).lower() in ("off", "false", "0") and \
                shares["cpu"] >= 0.5 and wall >= 500e6:
            result.append(adv("cpu.jit", "try jit=on: expression-heavy scans (aggregates over many rows) "
                              "spend less CPU when compiled", ev + "; jit is off in this capture",
                              _gain(st, platform, "cpu", 1.3), "model what-if CPU x1.3 (typical JIT gain on "
                              "aggregation-heavy TPC-H queries; measure it)"))
        if is_select and (row.get("write_bytes") or 0) >= SPILL_BYTES:
            wb = row["write_bytes"]
            gain = round(2 * wb / platform.disk_rate_bps * 1e9) if platform else None
            result.append(adv("cpu.work_mem", "raise work_mem for this statement (SET LOCAL work_mem): its "
                              f"sorts/hashes spill {wb / 2**20:.1f} MiB to temporary files",
                              ev + f"; a read-only statement wrote {wb / 2**20:.1f} MiB (temporary files)",
                              gain, "writing and reading back the spilled bytes at the calibrated disk rate"))
        if limit == "cpu":
            result.append(adv("cpu.faster", "the statement is CPU-limited: a faster CPU or more nodes "
                              "(partitioning the scanned table) shorten it in proportion",
                              ev, _gain(st, platform, "cpu", 2.0), "model what-if CPU x2"))

    # --- disk, sequential
    if shares["disk_seq"] >= MIN_SHARE:
        ev = f"disk_seq {_pct(shares['disk_seq'])} of {_ms(wall)}; {io['seq_bytes'] / 2**20:.1f} MiB read sequentially"
        result.append(adv("disk_seq.bandwidth", "more sequential I/O bandwidth (faster storage, striping) "
                          "shortens this statement", ev, _gain(st, platform, "disk_rate", 2.0),
                          "model what-if disk rate x2"))
        rows = row.get("rows") or 0
        if io["seq_bytes"] and rows and io["seq_bytes"] / max(rows, 1) > 64 * 1024:
            result.append(adv("disk_seq.pruning", "the scan reads far more than it returns: partition the "
                              "table on the filtered column (range partitioning on dates) so that partition "
                              "pruning skips most of it, or add an index for the filter",
                              ev + f"; {io['seq_bytes'] / rows / 1024:.0f} KiB read per returned row",
                              _gain(st, platform, "disk_rate", 10.0), "model what-if disk rate x10 (reading a "
                              "tenth of the data)"))
        if io["seq_bytes"]:
            gain = round(io["seq_bytes"] / platform.disk_rate_bps * 1e9) if platform else None
            result.append(adv("disk_seq.memory", f"memory that holds the {io['seq_bytes'] / 2**20:.0f} MiB "
                              "working set (a larger memory limit, page cache, shared_buffers) removes the "
                              "sequential disk time of repeated runs", ev, gain,
                              "all of the model's t_seq"))

    # --- disk, random
    if shares["disk_random"] >= MIN_SHARE:
        ev = (f"disk_random {_pct(shares['disk_random'])} of {_ms(wall)}; {int(io['random_reqs'])} random requests "
              f"({io['random_bytes'] / 2**20:.1f} MiB)")
        result.append(adv("disk_random.index", "random heap reads: check the index used (EXPLAIN (ANALYZE, BUFFERS)) "
                          "and its correlation (pg_stats.correlation of the key); CLUSTER the table on that "
                          "index, or add a covering index (INCLUDE) for an index-only scan",
                          ev, _gain(st, platform, "rand_access", 0.1),
                          "model what-if random access time x0.1 (reads in key order become near-sequential)"))
        result.append(adv("disk_random.io_concurrency", "raise effective_io_concurrency (e.g. 32-256 on SSDs) "
                          "so bitmap heap scans prefetch; random reads then overlap",
                          ev, _gain(st, platform, "rand_access", 0.5), "model what-if random access time x0.5"))
        if io["random_bytes"]:
            gain = None
            if platform:
                base = estimate_components(st["nodes"], platform)
                gain = round(base["t_no_seq"] * 1e9)
            result.append(adv("disk_random.shared_buffers", f"shared_buffers (or memory) large enough for "
                              f"the {io['random_bytes'] / 2**20:.0f} MiB read at random keeps it cached",
                              ev, gain, "all of the model's t_no_seq"))

    # --- network
    if shares["network"] >= MIN_SHARE:
        ev = f"network {_pct(shares['network'])} of {_ms(wall)}; {io['net_bytes'] / 2**20:.2f} MiB sent+received"
        gain = _gain(st, platform, "link_rate", 10.0)
        model_net = estimate_components(st["nodes"], platform)["t_net"] * 1e9 if platform else None
        if model_net is not None and model_net < 0.5 * a.get("network", 0):
            result.append(adv("network.latency", "the network time is not bandwidth: the bytes would take "
                              f"{_ms(model_net)} at the link rate but the statement waited {_ms(a['network'])}; "
                              "fewer round trips help (larger fetch_size for postgres_fdw, batching), a faster "
                              "link does not (seed 000's Q3)", ev, gain, "model what-if link rate x10"))
        else:
            result.append(adv("network.bandwidth", "a faster link, or ship less data (push filters and "
                              "aggregates down to the nodes, co-locate joined partitions)", ev, gain,
                              "model what-if link rate x10"))

    # --- locks
    if shares["lock"] >= MIN_LOCK_SHARE:
        blocker = _blocking_statement(row, statements, kernel_events, texts)
        result.append(adv("lock.wait", f"lock waits: {blocker}. Shorten the blocking transaction, take "
                          "locks in one order, or use SKIP LOCKED / NOWAIT for queue-like access",
                          f"lock_wait {_ms(a.get('lock_wait', 0))} ({_pct(shares['lock'])} of {_ms(wall)})",
                          a.get("lock_wait", 0), "all of the lock wait"))

    # --- the data nodes (a cluster's coordinator statement)
    if shares.get("remote", 0) >= MIN_SHARE and parts:
        result += _remote_advice(adv, a, wall, parts, platform)

    # --- run queue
    if shares["run_queue"] >= MIN_RUN_QUEUE_SHARE:
        queued = f"the statement waited {_ms(a.get('run_queue', 0))} runnable but not running"
        evidence = f"run_queue {_pct(shares['run_queue'])} of {_ms(wall)}"
        if idle_cpus is not None:
            evidence += f"; {idle_cpus:.1f} of {cpus} CPUs idle on average meanwhile (node samples)"
        if idle_cpus is not None and idle_cpus >= IDLE_CPUS_NOT_SHORT:
            result.append(adv("run_queue.throttled", f"{queued} while the node had idle CPUs: not a shortage of "
                              f"CPUs. Backend pid {row['pid']} is held back: a CPU quota (cgroup cpu.cfs_quota_us "
                              "or cpu.max, a container's CPU limit; its cpu.stat counts nr_throttled and "
                              "throttled_time), CPU affinity (taskset, cpuset) or a low weight under contention "
                              f"(nice, cpu.shares). Look at /proc/{row['pid']}/cgroup and raise the limit",
                              evidence, a.get("run_queue", 0), "all of the run-queue wait"))
        else:
            result.append(adv("run_queue.oversubscription", f"{queued}: more busy processes than the {cpus} CPUs. "
                              "Reduce concurrency (connection pool size, max_parallel_workers) or add CPUs",
                              evidence, a.get("run_queue", 0), "all of the run-queue wait"))

    # --- kernel hot spots (seed 003)
    sys_ns = a.get("cpu_sys", 0)
    if sys_ns >= 0.05 * wall:
        for pattern, key, what, why in KERNEL_HOT_SPOTS:
            # shares are of one source's samples: summed per source, the source that sees most decides
            per_source: dict[str, list[dict]] = {}
            for k in kfuncs:
                if pattern.search(k["function"] or ""):
                    per_source.setdefault(k["source"], []).append(k)
            if not per_source:
                continue
            source, hits = max(per_source.items(), key=lambda kv: sum(k["share"] or 0 for k in kv[1]))
            share = sum(k["share"] or 0 for k in hits)
            if share >= 0.10:
                names = ", ".join(sorted({k["function"] for k in hits})[:4])
                result.append(adv(f"kernel.{key}", what + ". Why: " + why,
                                  f"{names}: {_pct(share)} of the statement's kernel time ({source}, "
                                  f"{sum(k['samples'] or 0 for k in hits)} samples; {_ms(sys_ns)} sys)",
                                  round(share * sys_ns), "upper bound: all of the hot spot's kernel time"))

    # --- nothing explains it (seed 000's query 8)
    if limit == "dbms-internal" or shares["unexplained"] >= 0.5:
        result.append(adv("not_allocated", f"no machine resource explains {_pct(shares['unexplained'])} of this "
                          "statement's time: it waited for something the trace does not see (client round "
                          "trips, sleeps, latches, IPC, a remote node). Look at pg_stat_activity wait events "
                          "(pg_wait_sampling), EXPLAIN ANALYZE and the client; such statements have a high "
                          "potential for tuning the application or the DBMS (seed 000)",
                          f"explained {_pct(explained)}; {shares_txt}", None,
                          "unknown: no resource to scale"))
    return result


def _remote_advice(adv, a: dict, wall: float, parts: list, platform: Platform | None) -> list[Advice]:
    """The coordinator waited for its data nodes: for the transfer over their links, for their work, or for
    round trips while they idled. A node's result is flushed after its FETCH's record ends, so a node
    sending over a slow link looks idle between its fetches: the bytes over the calibrated link rate
    tell that apart."""
    waited = a.get("remote_wait", 0)
    crit = next(p for p in parts if p.critical)
    fetches = sum(p.fetches for p in parts)
    ev = (f"remote_wait {_ms(waited)} of {_ms(wall)}; " + "; ".join(
        f"{p.node}{' (critical)' if p.critical else ''}: {p.fetches} fetches, {p.rows:,} rows, "
        f"{p.sent_bytes / 2**20:.2f} MiB, busy {_ms(p.execution_ns)}, idle {_ms(p.idle_ns)}, last fetch at "
        f"{_ms(p.last_end_ns)}" for p in parts))
    transfer = crit.sent_bytes / platform.link_rate_bps * 1e9 if platform and platform.link_rate_bps else 0
    if transfer >= 0.5 * waited:
        return [adv("remote.link", f"the wait is the transfer over node {crit.node}'s link ({crit.sent_bytes / 2**20:.2f} "
                    f"MiB at the calibrated {platform.link_rate_bps / 2**20:.2f} MiB/s = {_ms(transfer)}): a faster "
                    "link, or ship less (co-partition joined tables, group by the partition key so that aggregates "
                    "are pushed whole, select fewer columns)", ev, round(0.9 * transfer),
                    "90 % of the critical node's transfer time (a link 10x faster)")]
    if crit.execution_ns >= 0.5 * waited:
        return [adv("remote.node_work", f"the wait is node {crit.node}'s own work ({_busy_shares(crit)}): more "
                    "nodes, a scheme that spreads the scanned table wider, or what its breakdown names "
                    "(check the skew: the other nodes finished earlier)", ev, None,
                    "depends on how the critical node's work shrinks")]
    ends = sorted(p.last_end_ns for p in parts)
    serial = len(parts) > 1 and all(b - e >= 0.5 * (crit.execution_ns + crit.idle_ns) / len(parts)
                                    for e, b in zip(ends, ends[1:]))
    text = (f"the data nodes idled (critical node busy {_ms(crit.execution_ns)} of {_ms(waited)} waited) through "
            f"{fetches} fetch round trips: raise postgres_fdw's fetch_size (ALTER SERVER ... OPTIONS (SET "
            "fetch_size '10000')), and push work down: co-partition joined tables, group by the partition key "
            "(postgres_fdw pushes only whole aggregates; partial ones ship every row)")
    if serial:
        text += ("; the nodes worked one after the other: async_capable 'true' on the servers runs their scans "
                 "at once (only where an Append sits directly over the foreign scans; a nested loop rescans "
                 "them one by one)")
    return [adv("remote.round_trips", text, ev, None, "depends on the round-trip latency and the plan")]


def _busy_shares(part) -> str:
    busy = {c: v for c, v in part.components.items() if c != "client_wait" and v}
    total = sum(busy.values()) or 1
    return ", ".join(f"{c} {100 * v / total:.0f}%" for c, v in sorted(busy.items(), key=lambda kv: -kv[1])[:3])


def _named(r: dict, texts: dict[int, str]) -> str:
    """'statement 12 (query_id 34: UPDATE accounts SET …)': a statement as a DBA recognises it."""
    text = " ".join((texts.get(r.get("query_text_hash")) or "").split())
    text = text if len(text) <= 60 else text[:59] + "…"
    return f"statement {r['statement_id']} (query_id {r['query_id']}" + (f": {text})" if text else ")")


def _blocking_statement(row: dict, statements: pa.Table, kernel_events: pa.Table | None, texts: dict[int, str]) -> str:
    """Who held the lock: the backend that woke the waiter last (sched_waking, in the waker's context;
    else sched_wakeup, whose pid is the waker's only when both ran on one CPU), else the overlapping
    statement of another backend that ended last before the waiter went on. Wake-ups from other contexts
    (pid 0: interrupts, timers such as deadlock_timeout's) are not lock releases."""
    if (row.get("executions") or 1) > 1:
        return (f"summed over its {row['executions']:,} executions, whose blockers may differ: an execution of "
                f"{_ms(MIN_WALL_NS)} or more is advised on alone and names its own")
    start, end, pid, node = row["start_ns"], row["end_ns"], row["pid"], row["node"]
    all_rows = [r for r in statements.to_pylist() if r["node"] == node]
    backends = {r["pid"] for r in all_rows} - {pid}
    others = [r for r in all_rows if r["pid"] != pid and r["start_ns"] < end and r["end_ns"] > start - BLOCKER_LOOKBACK_NS]
    waker = None
    if kernel_events is not None and kernel_events.num_rows:
        wakes = [r for r in kernel_events.to_pylist()
                 if (r["event"] or "").endswith(("sched_waking", "sched_wakeup")) and r["target_pid"] == pid
                 and start <= r["ts_ns"] <= end
                 and r["pid"] in backends and r["node"] == node]
        if wakes:
            waker = max(wakes, key=lambda r: r["ts_ns"])
    if waker:
        theirs = [r for r in others if r["pid"] == waker["pid"]]
        # the lock was taken before this statement started to wait; it is released by a later statement
        # of the same transaction (COMMIT, ROLLBACK: PostgreSQL releases the locks just after the
        # statement's own end) or at the end of the holder's own
        before = [r for r in theirs if r["start_ns"] <= start]
        later = [r for r in theirs if start < r["start_ns"] <= waker["ts_ns"]]
        released = f"backend pid {waker['pid']} released it (woke it at +{(waker['ts_ns'] - start) / 1e6:.0f} ms"
        released += f", with its {_named(max(later, key=lambda r: r['start_ns']), texts)})" if later else ")"
        if before:
            b = max(before, key=lambda r: r["start_ns"])
            return (f"{released}; it was taken by its {_named(b, texts)} or an earlier one of the same transaction, "
                    "which held it until then")
        return f"{released}; none of its statements before this wait was captured"
    overlapping = [r for r in others if r["start_ns"] <= start]
    if overlapping:
        b = max(overlapping, key=lambda r: r["end_ns"])
        return (f"most likely {_named(b, texts)} of pid {b['pid']}, which started before and overlapped it "
                "(no wake-up by another backend to confirm)")
    return "the blocking statement was not captured (no other backend's statement overlaps the wait)"
