"""Real kernel recording of a real PostgreSQL (root + tracefs), state restore after SIGTERM and
kill -9, and the sampler."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

from mwinv.capture.tables import Capture
from mwinv.errors import MwinvError
from mwinv.kernel_trace.tracefs import TRACEFS_CANDIDATES, our_uprobes

BIN = Path(sys.executable).parent


def our_instances(pid: int | None = None) -> list[str]:
    """The mwinv instances of process `pid` (default: this one). Another mwinv run on the machine (a second
    test suite, a user's capture) has its own, named by its pid: they must not count."""
    from mwinv.kernel_trace.tracefs import INSTANCE_RE

    root = next(r for r in TRACEFS_CANDIDATES if (r / "instances").is_dir())
    pid = os.getpid() if pid is None else pid
    return sorted(p.name for p in (root / "instances").iterdir()
                  if (m := INSTANCE_RE.match(p.name)) and int(m.group(1)) == pid)


def wait_for(cond, timeout_s: float = 60.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_capture_of_tpch_queries(tpch_pg, tmp_path):
    from mwinv.node_capture import NodeCapture
    from mwinv.options import CaptureOptions
    from mwinv.workloads import runner

    before = our_instances()
    t0 = time.monotonic_ns()
    with NodeCapture(tmp_path / "cap", CaptureOptions(stacks=True, sample_interval_s=0.2, node="db1"),
                     postmaster_pid=tpch_pg.postmaster_pid(), conninfo=tpch_pg.conninfo("tpch")) as cap:
        inside = our_instances()
        runs = runner.run_queries(tpch_pg, [1, 6])
        time.sleep(0.6)   # warm queries can take < 0.2 s: at least three sampling intervals
    t1 = time.monotonic_ns()
    # ours (the pid-filtered events', and the block completions' without the filter), and removed
    assert len(inside) == len(before) + 2 and our_instances() == before
    assert not [u for pid, u in our_uprobes(TRACEFS_CANDIDATES[0]) if pid == os.getpid()]
    c = Capture(tmp_path / "cap")
    m = c.manifest()["nodes"]["db1"]
    assert m["clock"] == "mono" and m["tracer"] in ("nop", "function") and "sched:sched_switch" in m["events"]
    assert m["function_tracer"]["ran"] == (m["tracer"] == "function")   # and why not, recorded
    ev = c.read("kernel_event")
    ts = ev["ts_ns"].to_pylist()
    # the trace clock is the DBMS side's clock: every event lies inside the capture's monotonic span
    assert t0 <= min(ts) and max(ts) <= t1
    procs = c.read("process").to_pylist()
    dbms = {p["pid"] for p in procs}
    roles = {p["role"] for p in procs}
    assert {"postmaster", "checkpointer", "backend"} <= roles
    # the pid filter: non-scheduler events all come from the DBMS's processes, except the block
    # completions, recorded without it (in whichever task an interrupt found: any process's I/O)
    other = pc.filter(ev, pc.invert(pc.or_(pc.starts_with(ev["event"], "sched_"),
                                           pc.equal(ev["event"], "block_rq_complete"))))
    assert other.num_rows > 0 and set(other["pid"].to_pylist()) <= dbms
    names = set(ev["event"].to_pylist())
    assert {"sched_switch", "sched_wakeup", "sys_enter_recvfrom", "sys_exit_sendto"} <= names
    # a backend sent each query's result inside the query's time (the client reads it after)
    backend = {p["pid"] for p in procs if p["role"] == "backend"}
    sends = pc.filter(ev, pc.equal(ev["event"], "sys_exit_sendto")).to_pylist()
    role_of = {p["pid"]: p["role"] for p in procs}
    for r in runs:
        near = [(s["pid"], role_of.get(s["pid"]), s["ts_ns"] - r.start_ns) for s in sends
                if r.start_ns - 10**9 <= s["ts_ns"] <= r.end_ns + 10**9]
        assert any(s["pid"] in backend and r.start_ns <= s["ts_ns"] <= r.end_ns for s in sends), (
            f"Q{r.query} ({(r.end_ns - r.start_ns) / 1e6:.0f} ms): sends within 1 s of it (pid, role, ms from its "
            f"start): {[(pid, role, round(dt / 1e6, 1)) for pid, role, dt in near]}")
    stacks = c.read("kernel_stack").to_pylist()
    assert any(s["frames"][:1] == ["__schedule"] for s in stacks)
    assert c.read("node_sample").num_rows > 0 and c.read("process_sample").num_rows > 0
    samples = c.read("process_sample").to_pylist()
    assert {s["pid"] for s in samples} & dbms and sum(s["run_ns"] for s in samples) > 0
    assert cap.summary["sampler"]["samples"] > 0


def test_sigterm_restores_state_and_keeps_the_capture(tmp_path):
    sleeper = subprocess.Popen(["sleep", "120"])
    try:
        out = tmp_path / "cap"
        proc = subprocess.Popen([BIN / "mwinv-trace", "capture", str(out), "--pid", str(sleeper.pid), "--stacks",
                                 "--interval", "0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started = []
        for line in proc.stderr:    # progress lines (stderr is not a terminal)
            started.append(line)
            if line.startswith("sampling every"):
                break
        assert started and started[-1].startswith("sampling every"), started
        assert our_instances(proc.pid)
        time.sleep(1)   # a few 0.1 s samples before the signal
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130 and "Traceback" not in err
        assert our_instances(proc.pid) == []
        assert (out / "manifest.json").exists() and Capture(out).has("node_sample")
        assert json.loads((out / "kernel" / os.uname().nodename / "recorder.json").read_text())["clock"] == "mono" \
            or any((out / "kernel").glob("*/recorder.json"))
    finally:
        sleeper.kill()


RECORDER_SCRIPT = """
import sys, time
from mwinv.kernel_trace.recorder import KernelRecorder, RecorderConfig
from mwinv.kernel_trace.tracefs import add_uprobe, tracefs_root
r = KernelRecorder(sys.argv[1], [int(sys.argv[2])], RecorderConfig()).start()
add_uprobe(tracefs_root(), r.uprobe_group, "mwinv_test_probe", sys.argv[3])
print(r.instance.name, flush=True)
time.sleep(600)
"""


def _probe_target() -> str:
    """A uprobe target nobody else uses: the entry point of /usr/bin/true."""
    from mwinv.kernel_trace.usdt import _file_offset, _load_segments

    out = subprocess.run(["readelf", "-hW", "/usr/bin/true"], capture_output=True, text=True).stdout
    entry = int(next(line.split()[-1] for line in out.splitlines() if "Entry point" in line), 16)
    return f"/usr/bin/true:0x{_file_offset(entry, _load_segments(Path('/usr/bin/true'))):x}"


def test_kill9_leftovers_are_cleaned_by_the_next_run(tmp_path):
    from mwinv.kernel_trace.recorder import KernelRecorder, RecorderConfig

    sleeper = subprocess.Popen(["sleep", "120"])
    try:
        rec = subprocess.Popen([sys.executable, "-c", RECORDER_SCRIPT, str(tmp_path / "k1"), str(sleeper.pid),
                                _probe_target()], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
        name = rec.stdout.readline().strip()
        assert name.startswith(f"mwinv-{rec.pid}-") and name in our_instances(rec.pid)
        root = TRACEFS_CANDIDATES[0]
        assert (rec.pid, f"mwinv_{rec.pid}_1/mwinv_test_probe") in our_uprobes(root)
        rec.kill()                      # kill -9: no clean-up ran
        rec.wait()
        wait_for(lambda: not Path(f"/proc/{rec.pid}").exists() or
                 Path(f"/proc/{rec.pid}/stat").read_text().split(") ")[1][0] == "Z", 30)
        assert (root / "instances" / name).is_dir()   # left behind...
        nxt = KernelRecorder(tmp_path / "k2", [sleeper.pid], RecorderConfig()).start()
        try:
            assert f"instance {name}" in nxt.removed_stale   # ...and cleaned by the next run
            assert not (root / "instances" / name).exists()
            assert not [u for pid, u in our_uprobes(root) if pid == rec.pid]
        finally:
            nxt.stop()
        # the killed run's pages are still readable: assemble them into a trace.dat
        from mwinv.kernel_trace.recorder import assemble

        assert assemble(tmp_path / "k1", tmp_path / "k1" / "trace.dat").stat().st_size > 0
    finally:
        sleeper.kill()


def test_missing_pid_and_events_are_clear_errors(tmp_path):
    from mwinv.kernel_trace.recorder import KernelRecorder, RecorderConfig
    from mwinv.kernel_trace.usdt import ProbeSet
    from mwinv.node_capture import NodeCapture

    with pytest.raises(MwinvError, match="pid 999999: no such process"):
        NodeCapture(tmp_path / "c", postmaster_pid=999999)
    before = our_instances()
    with pytest.raises(MwinvError, match="none of the requested events exists"):
        KernelRecorder(tmp_path / "k", [os.getpid()], RecorderConfig(events=["nosuch:event"])).start()
    assert our_instances() == before
    # an engine's probes whose library is not installed: said, and the rest is recorded
    missing = ProbeSet("nosuch", "nosuch", {"x__start": "nosuch_start"}, library="lib/nosuch.so")
    rec = KernelRecorder(tmp_path / "k3", [os.getpid()], RecorderConfig(probes=(missing,))).start()
    try:
        assert rec.skipped["uprobe:nosuch"].endswith("lib/nosuch.so: not installed") and rec.enabled
    finally:
        rec.stop()


def _function_tracer_allowed(root: Path) -> bool:
    """Whether this kernel lets an instance run the function tracer: the test's own instance, asked directly."""
    from mwinv.kernel_trace.tracefs import Instance

    inst = Instance.create(root)
    try:
        fd = os.open(inst.path / "current_tracer", os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, b"function")
            return True
        except PermissionError:
            return False
        finally:
            os.close(fd)
    finally:
        inst.remove()


def test_the_function_tracer_where_allowed_else_why_not(tmp_path):
    """The recorder runs the function tracer in its own instance on the kernel-knob families' functions where
    the kernel allows it; this kernel refuses it (EPERM, as `mwinv-trace check` says), which the recorder
    records with the file that refused it, perf's samples standing alone (and `mwinv-trace check` says the
    same); the kernel-knob advice on the recorded TPC-H stacks (tests/golden/pg_tpch_demo.kernel.json) then
    says its figures are sampled stacks, and why. The top level of tracefs is not touched."""
    from mwinv import kernel_knobs as kk
    from mwinv.kernel_trace.perf import perf_available
    from mwinv.kernel_trace.recorder import KernelRecorder, RecorderConfig
    from tests.test_kernel_knobs import GOLDEN, golden_advice

    root = next(r for r in TRACEFS_CANDIDATES if (r / "instances").is_dir())
    allowed = _function_tracer_allowed(root)
    top, before = (root / "current_tracer").read_text(), our_instances()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        rec = KernelRecorder(tmp_path / "k", [sleeper.pid], RecorderConfig(stacks=True)).start()
        time.sleep(0.3)
        summary = rec.stop()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert our_instances() == before and (root / "current_tracer").read_text() == top
    ft = summary["function_tracer"]
    assert summary["perf"] == perf_available()
    # `mwinv-trace check` tries it as the recorder does, and says the same
    check = subprocess.run([BIN / "mwinv-trace", "check"], capture_output=True, text=True, timeout=60)
    assert json.loads(check.stdout)["function_tracer"] == ("function" if allowed else f"none ({ft['why_not']})")
    if allowed:   # a kernel that allows it: the families' functions, traced
        assert ft["ran"] and summary["tracer"] == "function" and set(ft["filter"]) <= set(kk.traced_functions())
        return
    assert ft == {"ran": False, "why_not": "EPERM (Operation not permitted, writing set_ftrace_filter)",
                  "filter": kk.traced_functions()}
    assert summary["tracer"] == "nop" and summary["skipped"]["tracer:function"] == f"function tracer refused: {ft['why_not']}"
    data = dict(GOLDEN, manifest={**GOLDEN["manifest"], "nodes": {"demo": {"function_tracer": ft}}})
    [advice] = [a for a in golden_advice(data) if a.rule.startswith("kernel.")]
    assert advice.basis.endswith("; sampled stacks (function tracer not allowed here: EPERM (Operation not "
                                 "permitted, writing set_ftrace_filter))"), advice.basis


def test_sampler_cli(tmp_path):
    proc = subprocess.run([BIN / "mwinv-sample", str(tmp_path / "s"), "--pid", str(os.getpid()), "--interval", "0.05",
                           "--", "sleep", "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "own CPU" in proc.stderr
    c = Capture(tmp_path / "s")
    ns = c.read("node_sample").to_pylist()
    cpu_rows = [r for r in ns if r["disk"] is None and r["net_iface"] is None]
    assert cpu_rows and all(r["cpu_user_ns"] + r["cpu_sys_ns"] + r["cpu_idle_ns"] + r["cpu_iowait_ns"] >= 0 for r in cpu_rows)
    assert any(r["net_iface"] == "lo" for r in ns)
    assert all(r["seq_source"] == "diskstats_merges" for r in ns if r["disk"])
    assert os.getpid() in {r["pid"] for r in c.read("process_sample").to_pylist()}   # and its children
    bad = subprocess.run([BIN / "mwinv-sample", str(tmp_path / "t"), "--interval", "0.001"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip() == "mwinv-sample: error: --interval 0.001: must be >= 0.01 s"
