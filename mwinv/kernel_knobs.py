"""Kernel functions to kernel knobs ([Tanigawa]; docs/kernel-advice.md): families of kernel functions
seen in a statement's kernel hot spots (statement_kernel_function: perf cpu-clock samples while it ran in
the kernel, and the stacks it went to sleep with), each mapped to the settings that govern it, with
the knob's current value read from the host (read-only; root: a directory with the host's /proc and
/sys layout, "/" for the host itself).

A row belongs to the first family in FAMILIES whose pattern matches its function or a frame of its
example stack (so a huge-page clear under a THP fault counts as THP, not as a plain page fault). A
family's time is its on-CPU part (its share of the kernel samples times the statement's exact sys time)
plus its off-CPU part (the time slept in its paths): the two are disjoint, and their sum bounds what
changing the knob can save. NOT_MAPPED lists the functions this project's traces show that no kernel
knob governs, and why."""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mwinv.fmt import duration, pct
from mwinv.kernel_trace.functions import SOURCE_FUNCTION, SOURCE_GRAPH

if TYPE_CHECKING:
    from mwinv.rules import Advice, Evidence

# A family must hold this share of the statement's wall time: at 5 % the best a knob can do is 5 %, the
# noise of a rerun here (TPC-H Q1 at SF 0.1 varied by 4-6 % between warm runs)
MIN_FAMILY_SHARE = 0.05
WAIT_SOURCE = "sched-stack"  # the off-CPU source: its ns are time slept; perf samples on-CPU time
MEASURED_NS = frozenset({WAIT_SOURCE, SOURCE_GRAPH})   # sources whose ns are the time itself, not a sample
SOURCE_TEXT = {
    "perf-cpu-clock": "perf cpu-clock (sampled kernel stacks)",
    WAIT_SOURCE: "stacks at the switch that put it to sleep, weighted by the time slept",
    SOURCE_GRAPH: "the function tracer's call graph (exact calls and self time)",
    SOURCE_FUNCTION: "the function tracer (exact calls, untimed)",
}


@dataclass(frozen=True)
class Family:
    key: str  # the advice's rule is kernel.<key>
    pattern: re.Pattern  # matched against the function and each frame of its example stack, any source
    knobs: tuple[str, ...]  # host paths without the leading /; a * expands to every match
    advice: str  # what to change
    effect: str  # what it does to these functions, and what it costs
    wait: re.Pattern | None = None  # matched only in the off-CPU stacks (sleeping in that path)


def _re(*names: str) -> re.Pattern:
    return re.compile("|".join(names))


FAMILIES: tuple[Family, ...] = (
    Family("transparent_hugepage",
           _re(r"\bcompact_zone", "isolate_migratepages", "try_to_compact_pages", "__alloc_pages_direct_compact",
               "khugepaged", "collapse_huge_page", "clear_huge_page", "folio_zero_user",
               "do_huge_pmd_anonymous_page", "__do_huge_pmd_anonymous_page"),
           ("sys/kernel/mm/transparent_hugepage/enabled", "sys/kernel/mm/transparent_hugepage/defrag",
            "proc/sys/vm/compaction_proactiveness"),
           "set transparent_hugepage/enabled and defrag to madvise (or never), and give the DBMS explicit "
           "huge pages for its shared memory (vm.nr_hugepages; PostgreSQL huge_pages=on)",
           "THP faults clear 2 MiB at a time and, with defrag=always, compact memory in the faulting task "
           "(direct compaction); madvise leaves huge pages to those who ask, explicit huge pages are "
           "reserved once at start"),
    Family("numa_balancing",
           _re("task_numa_fault", "task_numa_work", "change_prot_numa", "change_protection_range",
               "do_numa_page", "migrate_misplaced", "numa_migrate", r"\bmigrate_pages"),
           ("proc/sys/kernel/numa_balancing", "sys/kernel/debug/sched/numa_balancing/scan_delay_ms"),
           "turn automatic NUMA balancing off (sysctl kernel.numa_balancing=0) or bind the server to one "
           "node (numactl --cpunodebind --membind)",
           "NUMA balancing unmaps pages to catch hinting faults, then migrates them; shared buffers touched "
           "from every node move back and forth ([Tanigawa]: 80 % of a TPC-H query's kernel time)"),
    Family("sched_migration_cost",
           _re("find_busiest_group", r"\bload_balance", "sched_balance_", "update_sd_lb_stats", "newidle_balance",
               "select_task_rq_fair", "migrate_task", "active_load_balance", "detach_tasks"),
           ("sys/kernel/debug/sched/migration_cost_ns", "proc/sys/kernel/sched_migration_cost_ns",
            "proc/sys/kernel/sched_autogroup_enabled"),
           "raise the scheduler's migration cost (/sys/kernel/debug/sched/migration_cost_ns on kernels >= "
           "5.13, sysctl kernel.sched_migration_cost_ns before), e.g. 0.5 ms -> 5 ms; with autogroup on, "
           "backends started from one session share one group's weight",
           "a task that ran within the migration cost counts as cache-hot and is not pulled to another "
           "CPU, so load balancing searches less ([Tanigawa]: find_busiest_group 30 % of an INSERT's "
           "kernel time, 20 % fewer checks under TPC-C); idle CPUs may then wait longer for work"),
    Family("dirty_writeback",
           # not balance_dirty_pages_ratelimited: each buffered write's cheap check, throttling or not
           _re("balance_dirty_pages(?!_ratelimited)", "wb_wait_for_completion", "folio_wait_writeback",
               "wait_on_page_writeback", "writeback_sb_inodes", r"\bwb_writeback"),
           ("proc/sys/vm/dirty_ratio", "proc/sys/vm/dirty_background_ratio", "proc/sys/vm/dirty_bytes",
            "proc/sys/vm/dirty_background_bytes"),
           "start background writeback earlier and bound dirty memory: vm.dirty_background_bytes (e.g. "
           "64 MB) and vm.dirty_bytes (e.g. 256 MB) instead of the ratios",
           "a writer past the dirty limit is throttled in balance_dirty_pages until writeback catches up; "
           "lower limits flush in the background sooner and in smaller bursts, at the cost of absorbing "
           "less of a write burst"),
    Family("readahead",
           _re("page_cache_ra_", "ondemand_readahead", "force_page_cache_ra", "page_cache_sync_ra",
               "page_cache_async_ra", r"\bread_pages"),
           ("sys/block/*/queue/read_ahead_kb",),
           "below 1 MiB (128 KiB is the default), raise the data disk's readahead for scans (echo 1024 > "
           "/sys/block/<dev>/queue/read_ahead_kb, or blockdev --setra 2048 /dev/<dev>: 512-byte sectors); at "
           "1 MiB or more the wait is the disk's bandwidth (see the disk advice); lower it for random reads",
           "a read that finds its pages not yet in the page cache waits for the disk; a larger readahead "
           "window reads further ahead of a sequential scan (fewer, larger requests), but wastes reads "
           "and cache on random access",
           wait=_re("filemap_get_pages", "filemap_fault", "filemap_read")),
    Family("discard",
           _re("blkdev_issue_discard", "__blkdev_issue_discard", "ext4_discard", "xfs_discard"),
           ("proc/mounts",),
           "mount the data file system without the discard option and trim periodically instead "
           "(fstrim.timer)",
           "the discard mount option trims freed blocks synchronously, in the task that freed them "
           "(truncate, DROP, VACUUM's file truncation)"),
    Family("shmem_hugepages",
           _re("shmem_fault", "shmem_get_folio"),
           ("sys/kernel/mm/transparent_hugepage/shmem_enabled", "proc/sys/vm/nr_hugepages"),
           "back the DBMS's shared memory with huge pages: explicit ones (vm.nr_hugepages, PostgreSQL "
           "huge_pages=on), or transparent_hugepage/shmem_enabled=advise",
           "each first touch of a 4 KiB page of the shared memory (shared_buffers) faults in the backend; "
           "2 MiB pages fault 512 times less often and cut TLB misses; explicit ones are reserved at start"),
    Family("page_faults",
           _re(r"\bclear_page", "do_anonymous_page", r"handle_mm_fault", "exc_page_fault", "do_page_fault",
               "filemap_map_pages", "next_uptodate_folio", "do_fault_around"),
           ("sys/kernel/mm/transparent_hugepage/enabled", "proc/sys/vm/nr_hugepages"),
           "fewer, larger pages: explicit huge pages for the shared memory (vm.nr_hugepages, huge_pages=on); "
           "for private memory (work_mem, sorts), transparent_hugepage/enabled=always",
           "page faults map (and clear) memory 4 KiB at a time; huge pages take 512 times fewer faults"),
)

# What the traces of this project's workloads show that no kernel knob governs (tests check that each
# function with a real share there is in FAMILIES or here)
NOT_MAPPED: tuple[tuple[re.Pattern, str], ...] = (
    (_re("do_epoll_wait", "ep_poll"), "the DBMS's latch waits (PostgreSQL: pg_sleep, a parallel leader, the "
                                      "client socket): its wait events say what for"),
    (_re("futex"), "the DBMS's own locks (LWLocks on POSIX semaphores): lock_wait in the attribution"),
    (_re("rwsem_down_(read|write)_slowpath", "down_(read|write)"),
     "a file's or an address space's lock held by another task (two backends extending one file)"),
    (_re("copy_to_iter", "copy_from_iter", "copy_folio_from_iter", "copy_user", "rep_movs"),
     "copying data between the page cache and the DBMS's buffers: the DBMS's buffer size, not a kernel knob"),
    (_re("finish_task_switch", "_raw_spin_unlock", "pv_queued_spin_unlock", "irqentry_exit", "handle_softirqs"),
     "where interrupts are re-enabled: the sample names the end of a switch or an interrupt, not a cause"),
    (_re("xas_load", "filemap_get_read_batch", "folio_add_file_rmap", "__x64_sys_pread64", "pte_mkwrite",
         "lock_mm_and_find_vma", "up_read", "unwind_get_return_address", "rcu_cblist", "__x86_indirect_thunk"),
     "page cache lookups, syscall entry, stack unwinding: the work itself, too spread to tune"),
    (_re("ftrace_", "trace_event_buffer", "ring_buffer_", "rb_commit", "uprobe", "process_fetch_insn", "read_tsc",
         "ktime_get_mono_fast_ns"),
     "the capture's own cost: the syscall events and the DBMS probes it records (docs/overhead.md)"),
    (_re("vsnprintf", "format_decode", r"^number$", "seq_read", "proc_single_show", "do_io_accounting",
         "getrusage"),
     "the mwinv extension reading its backend's /proc/self/io and rusage per statement (docs/overhead.md)"),
    (_re("do_syscall_64", "entry_SYSCALL", "__check_object_size", "__virt_addr_valid", "_copy_from_user",
         "memcpy", "mtree_load", "fdget", r"^schedule$", "poll_schedule_timeout", "do_select"),
     "syscall entry and exit, argument copies, a wait in select/poll for the client: no kernel knob"),
    (_re("ext4_", "__es_insert_extent", "generic_perform_write", "block_commit_write", "create_empty_buffers",
         "filemap_add_folio", "folio_batch_move_lru", "folio_lruvec_lock", "mem_cgroup", "filemap_get_entry",
         "balance_dirty_pages_ratelimited"),
     "a buffered write into the page cache (ext4 delayed allocation, memory cgroup charge): the write "
     "itself; fewer or direct writes are the DBMS's settings; throttling, when it comes, is dirty_writeback"),
    (_re("bit_wait_io", "__folio_lock", "folio_wait_bit_common", "wait_for_completion_io"),
     "waiting for an I/O: the family is named by the caller in the stack (readahead, a shmem fault, a "
     "discard), else a metadata read (inode, directory) no knob governs"),
)


# A FUSE mount's page-cache reads (a node's tables on sshfs or GlusterFS: mwinv/cluster/storage.py) read
# ahead on the mount's own bdi, which FUSE names after the mount's device (0:N), not on a disk's
FUSE_READAHEAD = (
    "the scan reads {node}'s tables through its {kind} FUSE mount ({mount}), whose readahead is the mount's own "
    "bdi, not a disk's (the local disk's read_ahead_kb does not govern these reads): below 1 MiB raise "
    "/sys/class/bdi/{bdi}/read_ahead_kb (echo 1024 > it; FUSE starts it at 128 KiB at most, lowered to what the "
    "daemon's max_readahead allows)")
FUSE_REQUESTS = {
    "sshfs": "; each request is at most the mount's max_read, and sshfs reads over one SSH connection unless "
             "-o max_conns=N",
    "glusterfs": "; the GlusterFS client mounts with max_read=131072 (128 KiB requests) and reads ahead itself "
                 "where the volume sets performance.read-ahead on (performance.read-ahead-page-count, 1-16)",
}
FUSE_EFFECT = ("a larger window keeps more FUSE read requests in flight, each served over the link by the file "
               "system's daemons (on GlusterFS, the bricks of more shards at once), but wastes reads and cache on "
               "random access")


def fuse_node(storage: dict, nodes) -> tuple[str, dict] | None:
    """The first of `nodes` whose tables the storage back-end's record puts on a FUSE mount, with its record."""
    data = storage.get("data_nodes") or {}
    return next(((n, data[n]) for n in sorted(n for n in nodes if n)
                 if n in data and data[n].get("relations")), None)


def fuse_readahead(storage: dict, node: str, rec: dict) -> tuple[str, str]:
    """The readahead advice for a scan of a FUSE mount, and the knobs' values as recorded when it was set up."""
    kind = storage.get("kind") or storage.get("backend", "FUSE")
    bdi = rec.get("bdi") or "<the mount's device>"
    advice = FUSE_READAHEAD.format(node=node, kind=kind, mount=rec.get("mount") or "?", bdi=bdi)
    advice += FUSE_REQUESTS.get(kind, "")
    value = rec.get("read_ahead_kb")
    now = (f"/sys/class/bdi/{bdi}/read_ahead_kb = {value if value is not None else 'unknown (not recorded)'}"
           + (f", mount options {rec['fuse_options']}" if rec.get("fuse_options") else "") + " (read at set-up)")
    return advice, now


def family_of(row: dict) -> Family | None:
    """The family of one statement_kernel_function row: the first in FAMILIES matching it."""
    frames = [row.get("function") or "", *(row.get("stack") or "").split(" <- ")]
    for fam in FAMILIES:
        pats = [fam.pattern] + ([fam.wait] if fam.wait is not None and row.get("source") == WAIT_SOURCE else [])
        if any(p.search(f) for p in pats for f in frames if f):
            return fam
    return None


def not_mapped_reason(function: str) -> str | None:
    return next((why for pat, why in NOT_MAPPED if pat.search(function)), None)


def _read(path: Path) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(4096).strip()
    except OSError:
        return None


def knob_values(family: Family, root: str | os.PathLike = "/") -> list[tuple[str, str]]:
    """(host path, current value) per knob of the family, read under root; the value "unknown (...)"
    where it cannot be read. sysfs choices ("always [madvise] never") give the one in brackets;
    block devices: only those backed by a device (no loop, zram); /proc/mounts: the mounts with
    discard."""
    root = Path(root)
    out: list[tuple[str, str]] = []
    for knob in family.knobs:
        if knob == "proc/mounts":
            text = _read(root / knob)
            if text is None:
                out.append(("/proc/mounts", "unknown (unreadable)"))
                continue
            hits = [f"{m[1]} ({m[2]}, {m[0]})" for m in (line.split() for line in text.splitlines())
                    if len(m) > 3 and "discard" in m[3].split(",")]
            out.append(("/proc/mounts", "discard on " + ", ".join(hits) if hits else "no mount with discard"))
            continue
        paths = sorted(glob.glob(str(root / knob))) if "*" in knob else [str(root / knob)]
        if knob.startswith("sys/block/"):
            paths = [p for p in paths if (Path(p).parents[1] / "device").exists()]
        for p in paths or [str(root / knob)]:
            shown = "/" + os.path.relpath(p, root)
            value = _read(Path(p))
            if value is None:
                unmounted = "/debug/" in shown and not (root / "sys/kernel/debug/sched").is_dir()
                why = ("debugfs not mounted, not read" if unmounted
                       else "absent on this kernel" if not os.path.lexists(p) else "unreadable")
                out.append((shown, f"unknown ({why})"))
            else:
                chosen = re.search(r"\[([^]]+)\]", value)
                out.append((shown, chosen.group(1) if chosen else value))
    return out


def row_ns(r: dict, sys_ns: float) -> float:
    """A row's time: the wait source's time slept and the function graph's self time as they are, perf's
    samples as their share of the statement's exact sys time; the untimed function tracer: none."""
    if r["source"] in MEASURED_NS:
        return r.get("ns") or 0
    return 0 if r["source"] == SOURCE_FUNCTION else (r.get("share") or 0) * sys_ns


def family_time(e: Evidence, rows: list[dict]) -> dict[str, tuple[float, int]]:
    """Per source, the family's time in ns (row_ns) and its sample (or sleep) count."""
    out: dict[str, tuple[float, int]] = {}
    sys_ns = e.ns.get("cpu_sys", 0)
    for r in rows:
        ns = row_ns(r, sys_ns)
        t, n = out.get(r["source"], (0.0, 0))
        out[r["source"]] = (t + ns, n + (r.get("samples") or 0))
    return out


def traced_functions() -> list[str]:
    """The families' on-CPU functions as set_ftrace_filter globs: the function tracer counts these only (the
    rest stays with perf's samples). A pattern matches anywhere in a name, as `*name*` does; `\\b` anchors
    its start; a negative lookahead (balance_dirty_pages, not _ratelimited) ends the name there."""
    out = []
    for fam in FAMILIES:
        for alt in fam.pattern.pattern.split("|"):
            name, ends = re.subn(r"\(\?!.*?\)$", "", alt)
            out.append((name[2:] if name.startswith(r"\b") else "*" + name) + ("" if ends else "*"))
    return list(dict.fromkeys(out))


def figures_basis(per_source: dict, tracer: dict[str, str], node: str | None) -> str:
    """Where a family's figures come from: the function tracer's exact counts (and the graph's times) where
    it ran, else the sampled stacks and why (tracer: per node, why the function tracer did not run, "" where
    it ran; a capture that did not record it says nothing)."""
    if SOURCE_GRAPH in per_source:
        return "exact calls and times from the function tracer"
    if SOURCE_FUNCTION in per_source:
        return "exact calls from the function tracer, times from sampled stacks"
    whys = {tracer[node]} if node in tracer else set(tracer.values())
    why = whys.pop() if len(whys) == 1 else None
    if why is None:
        return "sampled stacks (no function tracer counts)"
    if why == "":
        return "sampled stacks (the function tracer ran and counted none of these functions)"
    return f"sampled stacks (function tracer not allowed here: {why})"


def kernel_knob_rule(family: Family, root: str | os.PathLike = "/"):
    """The rule for one family: it fires when the family's time holds MIN_FAMILY_SHARE of the statement's
    time in the database; its expected gain is that time, an upper bound (the knob removes at most all of it)."""
    def rule(e: Evidence) -> Advice | None:
        rows = [k for k in e.kernel_functions if family_of(k) is family]
        if not rows or not e.db_ns:
            return None
        per_source = family_time(e, rows)
        total = sum(t for t, _ in per_source.values())
        if total < MIN_FAMILY_SHARE * e.db_ns:
            return None
        top = max(rows, key=lambda r: row_ns(r, e.ns.get("cpu_sys", 0)))  # its stack is the example
        names = ", ".join(sorted({r["function"] for r in rows})[:4])
        unit = {WAIT_SOURCE: "sleeps", SOURCE_GRAPH: "calls", SOURCE_FUNCTION: "calls"}
        parts = "; ".join(f"{duration(t)} in {n:,} {unit.get(src, 'samples')} from {SOURCE_TEXT.get(src, src)}"
                          for src, (t, n) in sorted(per_source.items()))
        fuse = fuse_node(e.storage, [top.get("node")]) if family.key == "readahead" else None
        if fuse:
            what, knobs = fuse_readahead(e.storage, *fuse)
            effect = FUSE_EFFECT
        else:
            what, effect = family.advice, family.effect
            knobs = ", ".join(f"{path} = {value}" for path, value in knob_values(family, root))
        return e.advice(
            f"kernel.{family.key}", f"{what}. Now: {knobs}. Effect: {effect}",
            f"{names}: {pct(total / e.db_ns)} of {e.in_db()} ({parts}); stack: {top.get('stack') or '-'}",
            round(total), f"upper bound: all of the family's {pct(total / e.db_ns)} of the time in the database; "
                          + figures_basis(per_source, e.function_tracer, top.get("node")))
    rule.__name__ = f"kernel_{family.key}"
    return rule


KERNEL_RULES = [kernel_knob_rule(f) for f in FAMILIES]
