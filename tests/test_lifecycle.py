"""Lifecycle (issue 29): signals during a stop never leave kernel tracing state behind and are acted on
promptly, a capture killed with -9 is finished by the next correlation, and an empty statement table is
said like a missing one."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mwinv.capture.tables import SCHEMAS, Capture, empty_table

BIN = Path(sys.executable).parent


def _cpu_stall_s() -> float:
    """Seconds some task of this machine has waited for a CPU (pressure stall information; 0 where the
    kernel has none)."""
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return 0.0
    return int(some.rsplit("total=", 1)[1]) / 1e6


def _started(proc: subprocess.Popen, line_start: str) -> list[str]:
    """Progress lines (stderr) up to the one beginning with line_start."""
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith(line_start):
            return lines
    raise AssertionError(f"no {line_start!r} line: {lines}")


def test_empty_statement_table_warns_like_a_missing_one(tmp_path):
    cap = Capture(tmp_path / "cap").create()
    missing = subprocess.run([BIN / "mwinv-correlate", str(cap.path)], capture_output=True, text=True)
    assert missing.returncode == 0 and "table statement: missing" in missing.stderr, missing.stderr
    cap.write_part("statement", empty_table(SCHEMAS["statement"]), node="db1")
    empty = subprocess.run([BIN / "mwinv-correlate", str(cap.path)], capture_output=True, text=True)
    assert empty.returncode == 0, empty.stderr
    assert "top 0 statements" in empty.stdout
    assert "warning: table statement: empty (1 parts, no rows)" in " ".join(empty.stderr.split()), empty.stderr



def test_sigterm_during_a_long_correlation_is_an_interrupt(tmp_path):
    """DuckDB ends a query a signal interrupted with a RuntimeError ("Query interrupted"): that was a
    traceback and exit 1; it is an interrupt, exit 130, within a second of CPU time (the whole correlation
    takes 80: counted in CPU, not elapsed, time, which a busy machine stretched past a second)."""
    import duckdb

    types = {"string": "VARCHAR", "int32": "INTEGER", "int64": "BIGINT", "bool": "BOOLEAN"}
    given = {"node": "'db1'", "pid": "1000 + range % 50", "statement_id": "range", "query_id": "range % 1000",
             "start_ns": "range * 1000", "end_ns": "range * 1000 + 700", "nesting_level": "0"}
    cols = ", ".join(f"CAST({given.get(f.name, 'NULL')} AS {types[str(f.type)]}) AS {f.name}"
                     for f in SCHEMAS["statement"])
    cap = Capture(tmp_path / "cap").create()
    # 5 million statements: 80 s of DuckDB queries on 2 cores
    cap.write_part("statement", duckdb.connect().execute(f"SELECT {cols} FROM range(5000000)").to_arrow_table())
    proc = subprocess.Popen([BIN / "mwinv-correlate", str(cap.path)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    with open(f"/proc/{proc.pid}/stat") as f:   # utime and stime, after the command's name
        cpu_at_signal = sum(map(int, f.read().rsplit(")", 1)[1].split()[11:13])) / os.sysconf("SC_CLK_TCK")
    proc.send_signal(signal.SIGTERM)
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    try:
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)   # its CPU time (communicate() would reap it unseen)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        watchdog.cancel()
    assert proc.returncode == 130 and "Traceback" not in err and "mwinv-correlate: interrupted" in err, err[-2000:]
    assert usage.ru_utime + usage.ru_stime - cpu_at_signal < 1, (usage, cpu_at_signal)
    lines = err.splitlines()   # the progress lines so far, then the one that says so
    assert lines[-1] == "mwinv-correlate: interrupted" and all(ln.strip() for ln in lines), err[-2000:]


SLOW_FINALIZER = """
import sys, time, click
from mwinv.cli.common import run_main

class Slow:
    def __del__(self):
        print("in a finalizer", flush=True)
        time.sleep(2)

@click.command()
def main():
    Slow()          # dropped at once: the SIGTERM lands in its __del__, as it did in Popen.__del__ in CI
    time.sleep(5)
    print("went on to the end", flush=True)

run_main(main, "slow")
"""


SLEEP_AFTER_A_STEP = """
import time, click
from mwinv.cli.common import progress_console, progress_logger, run_main

@click.command()
def main():
    progress_logger(progress_console())("attributing statement time")
    time.sleep(30)   # Python, not DuckDB: the signal is a KeyboardInterrupt here

run_main(main, "slow")
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupt_is_one_line_after_the_progress(sig):
    """An interrupt raised in Python code (not inside a DuckDB query) went through click, which printed an
    empty line between the last progress line and "interrupted"."""
    proc = subprocess.Popen([sys.executable, "-c", SLEEP_AFTER_A_STEP], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    first = proc.stderr.readline()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "attributing statement time" in first, (first, err)
    assert err == "slow: interrupted\n", err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_in_a_finalizer_still_interrupts(sig):
    """Python drops an exception raised in a finalizer: a SIGTERM that landed in subprocess.Popen.__del__
    let an experiment run on to exit 0 once. The signal is sent again and the run is interrupted."""
    proc = subprocess.Popen([sys.executable, "-c", SLOW_FINALIZER], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline() == "in a finalizer\n"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "went on" not in out and err.strip().endswith("slow: interrupted"), (out, err)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_exit_does_not_leave_the_spill_directory(sig, tmp_path):
    """A correlation done: its DuckDB session directory in the capture is removed at exit, and a signal
    landing in that removal cut it short (the directory stayed, exit 0, nothing said). 5,000 files put
    in the directory make the removal long enough to stop the process inside it and signal it there."""
    shutil.copytree(Path(__file__).parent / "golden" / "pg_small_capture", tmp_path / "cap")
    proc = subprocess.Popen([BIN / "mwinv-correlate", tmp_path / "cap"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (spill := list((tmp_path / "cap").glob(".duckdb-spill-*"))) and time.monotonic() < deadline:
            time.sleep(0.002)
        proc.send_signal(signal.SIGSTOP)
        assert spill, "no spill directory in the capture"
        for i in range(5000):
            os.close(os.open(spill[0] / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o600))
        proc.send_signal(signal.SIGCONT)
        while spill[0].exists() and len(os.listdir(spill[0])) > 4950 and time.monotonic() < deadline:
            time.sleep(0.001)
        proc.send_signal(signal.SIGSTOP)   # inside the removal: the signal is taken there once it goes on
        assert len(os.listdir(spill[0])) > 500, "the removal was over before the signal"
        proc.send_signal(sig)
        proc.send_signal(signal.SIGCONT)
        err = proc.communicate(timeout=30)[1]
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0 and "Traceback" not in err and not spill[0].exists(), err[-2000:]


def test_kill9_capture_is_finished_by_the_next_correlation(tpch_pg, tmp_path):
    """The statements come back from the spool, and the kernel events from the raw per-CPU pages: the
    statements' time is attributed, not all `not_allocated`."""
    from mwinv.workloads import runner

    out = tmp_path / "cap"
    proc = subprocess.Popen([BIN / "mwinv-trace", "capture", str(out), "--conninfo", tpch_pg.conninfo("tpch"),
                             "--interval", "0.2"], stderr=subprocess.PIPE, text=True)
    try:
        _started(proc, "sampling every")
        for _ in range(3):
            runner.run_queries(tpch_pg, [1, 6])
        time.sleep(1)   # the readers move whole pages every 0.1 s: the last partial page of each CPU is lost
    finally:
        proc.kill()
        proc.wait()
    assert list((out / "kernel").glob("*/cpu*.raw")) and not Capture(out).has("kernel_event")
    r = subprocess.run([BIN / "mwinv-correlate", str(out), "--format", "json", "--top-sql", "20"],
                       capture_output=True, text=True)
    subprocess.run([BIN / "mwinv-trace", "clean"], capture_output=True)   # the killed run's trace instances
    assert r.returncode == 0, r.stderr
    said = " ".join(r.stderr.split())
    assert "kernel trace parsed from the raw pages of a capture that did not stop" in said, r.stderr
    assert Capture(out).has("kernel_event") and not list((out / "kernel").glob("*/cpu*.raw"))
    rows = {s["text"]: s for s in json.loads(r.stdout)}
    for q in (1, 6):
        from mwinv.workloads import tpch

        s = next(v for t, v in rows.items() if t.strip().rstrip(";") == tpch.query_sql(q).strip().rstrip(";"))
        assert s["calls"] >= 3
        # its CPU time is seen (before the fix, every statement was 100 % not allocated)
        assert s["components"]["cpu_user"] + s["components"]["cpu_sys"] > 0.3 * s["total_ns"], (q, s["components"])


def _instances_and_uprobes(pid: int) -> tuple[list[str], list[str]]:
    from mwinv.kernel_trace.tracefs import INSTANCE_RE, our_uprobes, tracefs_root

    root = tracefs_root()
    return ([p.name for p in (root / "instances").iterdir() if (m := INSTANCE_RE.match(p.name)) and int(m[1]) == pid],
            [u for owner, u in our_uprobes(root) if owner == pid])


def test_an_interrupted_capture_leaves_its_parse_to_the_next_correlation(tpch_pg, tmp_path):
    """Ctrl-C in a `with NodeCapture` block: the stop restores the tracing state and does not parse (the
    run is abandoned: it is what made an experiment's SIGTERM wait); the next correlation parses it all."""
    from mwinv.correlator.pipeline import correlate, top_statements
    from mwinv.node_capture import NodeCapture
    from mwinv.options import CaptureOptions
    from mwinv.workloads import runner

    out = tmp_path / "cap"
    with pytest.raises(KeyboardInterrupt):
        with NodeCapture(out, CaptureOptions(node="db1"), postmaster_pid=tpch_pg.postmaster_pid(),
                         conninfo=tpch_pg.conninfo("tpch")):
            runner.run_queries(tpch_pg, [1, 6, 1, 6])
            raise KeyboardInterrupt
    assert _instances_and_uprobes(os.getpid()) == ([], [])
    assert not Capture(out).has("kernel_event") and list((out / "kernel" / "db1").glob("cpu*.raw"))
    db = correlate(out)
    assert not [w for w in db.warnings if "kernel" in w], db.warnings
    assert Capture(out).has("kernel_event") and Capture(out).has("process")
    assert "kernel_parse" not in Capture(out).manifest()["nodes"]["db1"]["skipped"]
    cpu = [s.components["cpu_user"] + s.components["cpu_sys"] for s in top_statements(db, n=2)]
    assert len(cpu) == 2 and min(cpu) > 0


def test_a_second_sigterm_while_a_capture_stops(tpch_pg, tmp_path):
    """mwinv-trace capture: the second SIGTERM comes while the first one's stop runs; the trace instances
    and uprobes go all the same, and what the stop did not finish is said by the next correlation."""
    out = tmp_path / "cap"
    proc = subprocess.Popen([BIN / "mwinv-trace", "capture", str(out), "--conninfo", tpch_pg.conninfo("tpch"),
                             "--stacks"], stderr=subprocess.PIPE, text=True)
    try:
        _started(proc, "sampling every")
        assert all(_instances_and_uprobes(proc.pid))
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1]
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert _instances_and_uprobes(proc.pid) == ([], [])
    r = subprocess.run([BIN / "mwinv-correlate", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert re.search(r"warning: node \S+: kernel trace (parsed from the raw pages|parse interrupted)",
                     " ".join(r.stderr.split())), r.stderr


def test_two_sigterms_while_an_experiment_captures_its_load(tmp_path):
    """SIGTERM during the measured load, and another while the cluster capture stops: every node's trace
    instances and uprobes are gone, so is the cluster, and the run ends within 2 s (with the parse of
    every node's trace first it took 4.3 s at SF 0.1, 32 s at SF 1, and the second SIGTERM cut the
    clean-up short): no node's trace is parsed, and the time it takes is bounded."""
    from mwinv.cluster.net import leftovers

    (tmp_path / "plan.toml").write_text('name = "sig"\nscale = 0.01\nqueries = [1, 9, 18, 21]\nrepetitions = 20\n'
                                        '[factors]\nnodes = [2]\nscheme = ["1-part"]\n')
    before = leftovers()
    proc = subprocess.Popen([BIN / "mwinv", "experiment", "run", str(tmp_path / "plan.toml"), "-o",
                             str(tmp_path / "out")], stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if "capture of node d2" in line:
                break
        time.sleep(2)
        ours = set(leftovers()[0]) - set(before[0])   # this run's cluster's namespaces (not another run's)
        instances, uprobes = _instances_and_uprobes(proc.pid)
        assert len(ours) == 3 and len(instances) == 6 and uprobes, (instances, uprobes)   # two per node
        t0, stall0 = time.monotonic(), _cpu_stall_s()
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=120)[1]
        took, stall = time.monotonic() - t0, _cpu_stall_s() - stall0
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err[-3000:]
    assert _instances_and_uprobes(proc.pid) == ([], [])
    assert ours.isdisjoint(leftovers()[0]), err[-3000:]
    (capture,) = [Capture(c) for c in (tmp_path / "out" / "cells").glob("*/capture")]
    nodes = capture.manifest()["nodes"]
    assert len(nodes) == 3 and all(n.get("kernel_unparsed") for n in nodes.values()), nodes
    assert not capture.has("kernel_event")
    # the clean-up waits for servers and namespaces: the time tasks of this machine waited for a CPU
    # meanwhile is the load's, not the run's
    assert took < 4 + stall, f"{took:.1f} s, {stall:.1f} s of it with tasks waiting for a CPU"
