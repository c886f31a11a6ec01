"""The kernel-knob rules (mwinv/kernel_knobs.py) on recorded stacks: the statement_kernel_function rows of
a TPC-H demo capture (tests/golden/pg_tpch_demo.kernel.json, see SOURCES.md), through the normal advice
path; knob values read from a directory laid out as the host's /proc and /sys. No root, no server."""

import json
import lzma
import re
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from mwinv import kernel_knobs as kk
from mwinv.kernel_trace import functions as fn
from mwinv.capture.tables import SCHEMAS
from mwinv.correlator.advice import advise
from mwinv.options import AdviceOptions
from tests.test_rules import evidence

def golden(name: str) -> dict:
    return json.loads((Path(__file__).parent / "golden" / name).read_text())


GOLDEN = golden("pg_tpch_demo.kernel.json")
# pgbench TPC-B-like, then CREATE TABLE AS of 1.5 M rows (1.0 s, 439 ms sys) and a scan of it: the statements
# with a source the rules rank (>= 20 samples)
WRITES = golden("pg_pgbench_ctas.kernel.json")
CTAS = 1838793657182365696
READER = 1838793371172439061  # a parallel scan that slept 18.3 ms of its 161 ms in page-cache reads
SHMEM = 1838793371172439043  # 2.9 ms of 118 ms in shared-memory faults: below the bar
FAMILY = {f.key: f for f in kk.FAMILIES}


def golden_advice(data: dict):
    t = {k: pa.Table.from_pylist(data[k], schema=SCHEMAS[k])
         for k in ("statement", "statement_attribution", "statement_kernel_function")}
    return advise(t["statement"], t["statement_attribution"], kernel_functions=t["statement_kernel_function"],
                  options=AdviceOptions.from_manifest(data["manifest"]))


def test_recorded_stacks_through_the_advice_path():
    kernel = [a for a in golden_advice(GOLDEN) if a.rule.startswith("kernel.")]
    assert [(a.statement_id, a.rule) for a in kernel] == [(READER, "kernel.readahead")]
    a = kernel[0]
    assert re.match(r"folio_wait_bit_common: 11% of 1\d\d\.\d ms in the database \(18\.3 ms in 445 sleeps "
                    "from stacks at the switch that put it to sleep", a.evidence), a.evidence
    assert "<- folio_wait_bit_common <- filemap_get_pages <- filemap_read <-" in a.evidence
    assert a.expected_gain_ns == 18_305_871 and a.basis.startswith("upper bound: all of the family's 11%")
    assert "sampled stacks" in a.basis
    assert "/queue/read_ahead_kb = " in a.advice  # the host's own value


def test_the_shmem_faults_below_the_bar():
    rows = [r for r in GOLDEN["statement_kernel_function"]
            if r["statement_id"] == SHMEM and r["source"] == kk.WAIT_SOURCE]
    assert {kk.family_of(r).key for r in rows if kk.family_of(r)} == {"shmem_hugepages"}
    rule = kk.kernel_knob_rule(FAMILY["shmem_hugepages"])
    e = evidence(db_ns=118.1e6, ns={"cpu_sys": 47_500_000}, kernel_functions=rows)
    assert rule(e) is None  # 2.5 % of the time in the database
    fired = rule(replace(e, db_ns=40e6))  # the same sleeps in a statement of 40 ms: 7 %
    assert fired.rule == "kernel.shmem_hugepages" and "shmem_fault" in fired.evidence


def test_buffered_writes_have_no_knob():
    """The CTAS spent 41 % of its time in ext4's buffered write path (no kernel knob: NOT_MAPPED) and 2 % in
    page faults, below the bar: no kernel advice."""
    advice = golden_advice(WRITES)
    assert {a.statement_id for a in advice} >= {CTAS}
    assert [a for a in advice if a.rule.startswith("kernel.")] == []
    rows = [r for r in WRITES["statement_kernel_function"]
            if r["statement_id"] == CTAS and r["source"] != kk.WAIT_SOURCE]
    assert {kk.family_of(r).key for r in rows if kk.family_of(r)} == {"page_faults"}
    assert kk.not_mapped_reason("ext4_block_write_begin").startswith("a buffered write into the page cache")


@pytest.mark.parametrize("data", [GOLDEN, WRITES], ids=["tpch", "pgbench-ctas"])
def test_every_function_with_a_share_is_mapped_or_consciously_not(data):
    # a parallel worker has no attribution row of its own: its wall and sys time are its record's
    wall = {s["statement_id"]: s["end_ns"] - s["start_ns"] - s["client_wait_ns"] for s in data["statement"]}
    sys_ns = {s["statement_id"]: s["cpu_sys_ns"] for s in data["statement"]}
    seen = set()
    for r in data["statement_kernel_function"]:
        if kk.row_ns(r, sys_ns[r["statement_id"]]) >= 0.01 * wall[r["statement_id"]]:
            assert kk.family_of(r) or kk.not_mapped_reason(r["function"]), r
            seen.add(r["function"])
    assert len(seen) > 10


def fake_host(tmp_path: Path) -> Path:
    files = {
        "proc/sys/vm/dirty_ratio": "20\n", "proc/sys/vm/dirty_background_ratio": "10\n",
        "proc/sys/vm/dirty_bytes": "0\n", "proc/sys/vm/dirty_background_bytes": "0\n",
        "proc/sys/kernel/numa_balancing": "1\n", "proc/sys/kernel/sched_autogroup_enabled": "1\n",
        "sys/kernel/mm/transparent_hugepage/enabled": "[always] madvise never\n",
        "sys/kernel/mm/transparent_hugepage/defrag": "always defer defer+madvise [madvise] never\n",
        "sys/block/vda/queue/read_ahead_kb": "128\n", "sys/block/loop0/queue/read_ahead_kb": "128\n",
        "proc/mounts": "/dev/vda1 / ext4 rw,relatime 0 0\n/dev/vdb /data ext4 rw,discard,noatime 0 0\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "sys/block/vda/device").mkdir()  # a disk; loop0 has no device
    return tmp_path


def test_knob_values_read_from_the_host_layout(tmp_path):
    root = fake_host(tmp_path)
    assert kk.knob_values(FAMILY["readahead"], root) == [("/sys/block/vda/queue/read_ahead_kb", "128")]
    assert kk.knob_values(FAMILY["transparent_hugepage"], root) == [
        ("/sys/kernel/mm/transparent_hugepage/enabled", "always"),
        ("/sys/kernel/mm/transparent_hugepage/defrag", "madvise"),
        ("/proc/sys/vm/compaction_proactiveness", "unknown (absent on this kernel)")]
    assert kk.knob_values(FAMILY["sched_migration_cost"], root) == [
        ("/sys/kernel/debug/sched/migration_cost_ns", "unknown (debugfs not mounted, not read)"),
        ("/proc/sys/kernel/sched_migration_cost_ns", "unknown (absent on this kernel)"),
        ("/proc/sys/kernel/sched_autogroup_enabled", "1")]
    (root / "sys/kernel/debug/sched").mkdir(parents=True)
    (root / "sys/kernel/debug/sched/migration_cost_ns").write_text("500000\n")
    assert kk.knob_values(FAMILY["sched_migration_cost"], root)[0] == \
        ("/sys/kernel/debug/sched/migration_cost_ns", "500000")
    assert kk.knob_values(FAMILY["discard"], root) == [("/proc/mounts", "discard on /data (ext4, /dev/vdb)")]


def test_recorded_reader_with_the_fake_host(tmp_path):
    rows = [r for r in GOLDEN["statement_kernel_function"] if r["statement_id"] == READER]
    e = evidence(db_ns=161.4e6, ns={"cpu_sys": 29_300_000}, kernel_functions=rows)
    a = kk.kernel_knob_rule(FAMILY["readahead"], fake_host(tmp_path))(e)
    assert "Now: /sys/block/vda/queue/read_ahead_kb = 128. Effect:" in a.advice
    assert a.evidence.startswith("folio_wait_bit_common: 11% of 161.4 ms in the database (18.3 ms in 445 sleeps")


# one kernel function per family, as the kernel names it (6.x), and the frame that decides in a stack
@pytest.mark.parametrize("key,function,stack", [
    ("transparent_hugepage", "clear_page_erms", "clear_page_erms <- folio_zero_user <- __do_huge_pmd_anonymous_page"),
    ("numa_balancing", "change_protection_range", "change_protection_range <- change_prot_numa <- task_numa_work"),
    ("sched_migration_cost", "update_sd_lb_stats", "update_sd_lb_stats <- sched_balance_find_src_group"),
    ("dirty_writeback", "balance_dirty_pages", "__schedule <- schedule <- io_schedule_timeout <- balance_dirty_pages"),
    ("readahead", "page_cache_ra_unbounded", "page_cache_ra_unbounded <- filemap_get_pages"),
    ("discard", "blkdev_issue_discard", "blkdev_issue_discard <- ext4_free_blocks"),
    ("page_faults", "clear_page_erms", "clear_page_erms <- do_anonymous_page <- __handle_mm_fault"),
])
def test_each_family_on_cpu(key, function, stack):
    rule = kk.kernel_knob_rule(FAMILY[key])
    rows = [{"function": function, "stack": stack, "source": "perf-cpu-clock", "share": 0.3, "samples": 30, "ns": 0},
            {"function": "unrelated_fn", "stack": "unrelated_fn", "source": "perf-cpu-clock", "share": 0.7,
             "samples": 70, "ns": 0}]
    a = rule(evidence(ns={"cpu_sys": 500_000_000}, kernel_functions=rows))  # 30 % of 500 ms sys, 1 s wall
    assert a.rule == f"kernel.{key}" and a.expected_gain_ns == 150_000_000
    assert a.evidence.startswith(f"{function}: 15% of 1,000.0 ms in the database (150.0 ms in 30 samples from perf")
    assert rule(evidence(ns={"cpu_sys": 100_000_000}, kernel_functions=rows)) is None  # 3 % of the time in the database


GLUSTER = golden("pg_glusterfs_cell.kernel.json")
FUSE_READER = 1838815113967547398  # d1's scan: 5.3 ms of its 13.7 ms in page-cache reads of its GlusterFS mount


def test_a_fuse_scan_is_advised_the_mounts_readahead_not_the_disks():
    """A data node whose tables are on GlusterFS (the storage experiment's cell, see SOURCES.md): its page-cache
    reads are FUSE requests, read ahead on the mount's own bdi; the local disk's read_ahead_kb does not
    govern them."""
    kernel = [a for a in golden_advice(GLUSTER) if a.rule == "kernel.readahead"]
    assert [a.statement_id for a in kernel] == [FUSE_READER]
    a = kernel[0]
    mount = GLUSTER["manifest"]["storage"]["data_nodes"]["d1"]["mount"]
    assert f"reads d1's tables through its glusterfs FUSE mount ({mount})" in a.advice, a.advice
    assert "/sys/class/bdi/<the mount's device>/read_ahead_kb = unknown (not recorded)" in a.advice
    assert "performance.read-ahead" in a.advice and "max_read=131072" in a.advice
    assert "/sys/block" not in a.advice and "/queue/read_ahead_kb" not in a.advice
    # a capture of now records the mount's bdi, its value and options when the back-end is set up
    storage = dict(GLUSTER["manifest"]["storage"])
    storage["data_nodes"] = {"d1": {**storage["data_nodes"]["d1"], "bdi": "0:61", "read_ahead_kb": 128,
                                    "fuse_options": "rw,user_id=0,group_id=0,allow_other,max_read=131072"}}
    got = golden_advice({**GLUSTER, "manifest": {**GLUSTER["manifest"], "storage": storage}})
    a = next(a for a in got if a.rule == "kernel.readahead")
    assert ("/sys/class/bdi/0:61/read_ahead_kb = 128, mount options rw,user_id=0,group_id=0,allow_other,"
            "max_read=131072 (read at set-up)") in a.advice
    # without the record (tables on the local disk) the disk's readahead, as before
    local = {**GLUSTER, "manifest": {**GLUSTER["manifest"], "storage": {}}}
    assert "/queue/read_ahead_kb = " in next(a for a in golden_advice(local) if a.rule == "kernel.readahead").advice


def _perf_tools_section(name: str, command: str) -> list[str]:
    """One run's output in a perf-tools example file (tests/golden/ftrace_function, see SOURCES.md): the lines
    from its command to its ^C."""
    path = Path(__file__).parent / "golden" / "ftrace_function" / name
    text = (lzma.open(path, "rt") if name.endswith(".xz") else open(path)).read().splitlines()
    start = text.index(command)
    return text[start:text.index("^C", start)]


def test_function_graph_entries_give_exact_calls_and_times():
    """A real function_graph trace (funcgraph -Htp 5363 vfs_read: a bash shell reading "hello" from its tty,
    Linux 3.x on Xen): 4 reads traced whole, and one whose opening line came before the trace (its 19 s
    sleep between commands), which counts with its inclusive time and no self time."""
    lines = _perf_tools_section("perf-tools_funcgraph_example.txt.xz", "# ./funcgraph -Htp 5363 vfs_read")
    got = fn.graph_times(lines)
    vfs = got["vfs_read"]
    assert (vfs.calls, vfs.unmatched) == (5, 1)
    # 19,354,058 us for the read before the trace began, 100-200 ms for each keystroke after it
    assert vfs.incl_ns == 19_985_170_300 and 19_354_058_000 < vfs.incl_ns - 4 * 100_000_000
    # a close whose opening line is missing ("} /* ldsem_down_read */" under tty_ldisc_ref_wait) is its
    # caller's child: 0.637 us - 0.080 us of the caller's own
    first = fn.graph_times(lines[:lines.index(next(ln for ln in lines if "tty_ldisc_ref_wait() {" in ln)) + 3])
    assert first["ldsem_down_read"].unmatched == 1 and first["tty_ldisc_ref_wait"].self_ns == 557
    # select_task_rq_fair's first call, by hand: 2.060 us less its 5 leaves' 0.308 us
    at = lines.index(next(ln for ln in lines if "select_task_rq_fair() {" in ln))
    one = fn.graph_times(lines[at:at + 7])
    assert (one["select_task_rq_fair"].calls, one["select_task_rq_fair"].self_ns) == (1, 1752)
    assert (one["idle_cpu"].calls, one["idle_cpu"].incl_ns) == (2, 143)
    assert got["select_task_rq_fair"].callers == {"try_to_wake_up": 5}


def test_function_tracer_entries_give_exact_calls_per_caller():
    """The function tracer's lines (functrace, Linux 3.2 and 3.16 formats, with and without the flags
    column): calls per function and caller; the example's funccount tables and prose are not entries."""
    path = Path(__file__).parent / "golden" / "ftrace_function" / "perf-tools_functrace_example.txt"
    got = fn.function_counts(path.read_text().splitlines())
    assert {f: (s.calls, dict(s.callers)) for f, s in got.items()} == {
        "do_nanosleep": (15, {"hrtimer_nanosleep": 15}), "ext3_release_file": (3, {"__fput": 3}),
        "ext3_discard_reservation": (2, {"ext3_release_file": 2}), "ext3_ioctl": (2, {"file_ioctl": 2}),
        "ext4_create": (15, {"vfs_create": 15})}
    rows = fn.kernel_function_rows(got, fn.SOURCE_FUNCTION)
    assert {(r["function"], r["samples"], r["ns"]) for r in rows if r["function"] == "ext4_create"} == \
        {("ext4_create", 15, None)}


def test_function_graph_rows_feed_the_kernel_knob_rules():
    """The on-CPU graph (funcgraph -Ctp 25285 vfs_read): the scheduler's wake-up placement (select_task_rq_fair
    and the idle/load checks under it) is the sched_migration_cost family, its time the exact self time of
    its 16 calls, 4.4 us of the 190 us traced: below the bar there, advised in a statement of 60 us."""
    lines = _perf_tools_section("perf-tools_funcgraph_example.txt.xz", "# ./funcgraph -Ctp 25285 vfs_read")
    rows = [dict(r, node="n1", statement_id=7) for r in fn.kernel_function_rows(fn.graph_times(lines), fn.SOURCE_GRAPH)]
    fam = [r for r in rows if kk.family_of(r) is FAMILY["sched_migration_cost"]]
    assert sorted((r["function"], r["samples"], r["ns"]) for r in fam) == [
        ("cpus_share_cache", 2, 117), ("idle_cpu", 8, 588), ("select_task_rq_fair", 2, 3508),
        ("source_load", 2, 111), ("target_load", 2, 118)]
    traced = sum(r["ns"] for r in rows)
    rule = kk.kernel_knob_rule(FAMILY["sched_migration_cost"])
    assert traced == 189_957 and rule(evidence(db_ns=traced, kernel_functions=rows)) is None
    a = rule(evidence(db_ns=60_000, kernel_functions=rows))
    assert a.expected_gain_ns == 4442 and a.basis.endswith("exact calls and times from the function tracer")
    assert "4.4 µs in 16 calls from the function tracer's call graph (exact calls and self time)" in a.evidence, \
        a.evidence


HOT_SPOT_INPUTS = {
    "kernel_function_call": "node VARCHAR, ts_ns BIGINT, cpu INT, pid INT, function VARCHAR, parent VARCHAR",
    "cpu_sample": "node VARCHAR, ts_ns BIGINT, cpu INT, pid INT, stack_id BIGINT, kernel BOOLEAN",
    "seg_off_stack": "node VARCHAR, statement_id BIGINT, stack_id BIGINT, segments BIGINT, ns BIGINT",
    "stack_frame": "node VARCHAR, stack_id BIGINT, frames VARCHAR[], useful VARCHAR[]",
    # a statement of 1000-2000 ns with a nested one in 1500-1800, and another at 3000-4000, on pid 10
    "statement_clean": "node VARCHAR, statement_id BIGINT, query_id BIGINT, pid INT, start_ns BIGINT, "
                       "end_ns BIGINT, nesting_level INT"}


def hot_spots(**rows: list[tuple]) -> list[tuple]:
    """statement_kernel_function built by the SQL modules from these inputs' rows (tuples per table)."""
    import duckdb

    from mwinv.correlator import modules
    from mwinv.correlator.load import CaptureDB

    con = duckdb.connect()
    rows.setdefault("statement_clean", [("demo", 1, 42, 10, 1000, 2000, 0), ("demo", 2, 43, 10, 1500, 1800, 1),
                                        ("demo", 3, 44, 10, 3000, 4000, 0)])
    for t, cols in HOT_SPOT_INPUTS.items():   # table names and columns: the constants above
        con.execute(f"CREATE TABLE {t} ({cols})")
        if t in rows:
            con.executemany(f"INSERT INTO {t} VALUES ({', '.join('?' * len(rows[t][0]))})", rows[t])
    run = modules.Modules(CaptureDB(None, con, set()), set(HOT_SPOT_INPUTS), {"perf_period_ns": 10_101_010})
    run.build("statement_kernel_function")
    return con.execute("SELECT statement_id, query_id, function, stack, samples, ns, share, source "
                       "FROM statement_kernel_function ORDER BY ALL").fetchall()


def test_function_tracer_calls_are_counted_per_statement_and_feed_the_rules():
    """The function tracer's entries (kernel_function_call, as the trace.dat decoder writes them where the
    kernel allows the tracer) counted per statement by the SQL modules: a call counts for the top-level
    statement running on its pid at the time, its most frequent caller is the example; through the
    readahead rule beside the recorded stacks of a parallel scan (READER), its rows are exact calls, and the
    basis says the time still comes from sampled stacks."""
    # three calls from the sync path and one from the async one in statement 1 (one while a nested statement
    # ran, one after it: the top-level one's), one after it, one of another pid, and one in statement 3
    ra = "page_cache_ra_unbounded"
    got = hot_spots(kernel_function_call=[("demo", 1100, 0, 10, ra, "page_cache_sync_ra"),
                                          ("demo", 1600, 0, 10, ra, "page_cache_sync_ra"),
                                          ("demo", 1900, 1, 10, ra, "page_cache_sync_ra"),
                                          ("demo", 1300, 0, 10, ra, "page_cache_async_ra"),
                                          ("demo", 2500, 0, 10, ra, "page_cache_sync_ra"),
                                          ("demo", 1200, 1, 11, ra, "page_cache_sync_ra"),
                                          ("demo", 3500, 1, 10, "select_task_rq_fair", "try_to_wake_up")])
    assert got == [(1, 42, "page_cache_ra_unbounded", "page_cache_ra_unbounded <- page_cache_sync_ra", 4, None,
                    None, fn.SOURCE_FUNCTION),
                   (3, 44, "select_task_rq_fair", "select_task_rq_fair <- try_to_wake_up", 1, None, None,
                    fn.SOURCE_FUNCTION)]
    calls = [dict(zip(("statement_id", "query_id", "function", "stack", "samples", "ns", "share", "source"), got[0]),
                  node="demo")]
    reader = [r for r in GOLDEN["statement_kernel_function"] if r["statement_id"] == READER]
    rule = kk.kernel_knob_rule(FAMILY["readahead"])
    a = rule(evidence(db_ns=161e6, ns={"cpu_sys": 30_000_000}, kernel_functions=reader + calls))
    assert "4 calls from the function tracer (exact calls, untimed)" in a.evidence, a.evidence
    assert a.basis.endswith("; exact calls from the function tracer, times from sampled stacks"), a.basis
    assert a.expected_gain_ns == rule(evidence(db_ns=161e6, ns={"cpu_sys": 30_000_000},
                                               kernel_functions=reader)).expected_gain_ns   # untimed: no time added


def test_perf_samples_after_a_nested_statement_count_for_its_parent():
    """perf's kernel samples on a pid while its top-level statement ran count for that statement, also while
    and after a nested statement ran in it (a PL/pgSQL function's query): the join once took the nested one
    as the latest start and dropped every sample from its start to the parent's end."""
    stack = ["page_cache_ra_unbounded", "page_cache_sync_ra", "filemap_read"]
    got = hot_spots(cpu_sample=[("demo", 1100, 0, 10, 5, True), ("demo", 1600, 0, 10, 5, True),
                                ("demo", 1900, 1, 10, 5, True), ("demo", 1950, 1, 10, 5, False),
                                ("demo", 2500, 0, 10, 5, True)],
                    stack_frame=[("demo", 5, stack, stack)])
    assert got == [(1, 42, "page_cache_ra_unbounded",
                    "page_cache_ra_unbounded <- page_cache_sync_ra <- filemap_read", 3, 3 * 10_101_010, 1.0,
                    "perf-cpu-clock")]
