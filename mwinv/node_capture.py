"""One capture on one node: the kernel recording, the sampler and the DBMS's statements (the PostgreSQL
extension's, or its own probes'), all into one capture directory with its manifest. The DBMS's kernel
side (its processes' roles, its probes) comes from its engine (mwinv/engines/<engine>/kernel.py).

    with NodeCapture("out/run1", CaptureOptions(stacks=True), postmaster_pid=server.postmaster_pid(),
                     conninfo=...) as cap:
        run_workload()
    # cap.summary: what was recorded, parsed and skipped

or `record_capture(...)`, which also waits for --duration, Ctrl-C or a command to exit."""

from __future__ import annotations

import fcntl
import json
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

import mwinv
from mwinv import privfile
from mwinv.capture.tables import Capture
from mwinv.engines import Engine
from mwinv.engines.postgresql.kernel import POSTGRESQL
from mwinv.errors import MwinvError, is_disk_full
from mwinv.kernel_trace.parse import parse_trace
from mwinv.kernel_trace.perf import perf_to_capture
from mwinv.kernel_trace.recorder import OWNER, KernelRecorder, RecorderConfig, assemble, default_events, descendants
from mwinv.kernel_trace.sampler import Sampler, block_sequentiality
from mwinv.kernel_trace.tracefs import pid_alive, tracefs_root
from mwinv.options import CaptureOptions

WATCH_S = 0.2           # how often a capture checks that its server still runs
# server settings the advice reads from the manifest
RESTART_WAIT_S = 60.0   # how long a capture with a data directory waits for its server to come back
INTERRUPTED = "the capture was interrupted: the next mwinv-correlate parses its raw kernel pages"
# in a node's manifest from when its recorder starts until its trace is parsed
UNPARSED = "kernel trace not parsed yet: kernel/{}/ holds it (the next mwinv-correlate parses it)"


def _software_versions(postmaster_pid: int | None) -> dict:
    out = {"mwinv": getattr(mwinv, "__version__", "0.1.0"), "kernel": platform.release(),
           "python": platform.python_version()}
    if postmaster_pid:
        try:
            exe = os.readlink(f"/proc/{postmaster_pid}/exe")
            out["dbms"] = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    if shutil.which("perf"):
        out["perf"] = subprocess.run(["perf", "--version"], capture_output=True, text=True).stdout.strip()
    return out


def wall_minus_mono() -> dict:
    """CLOCK_REALTIME minus CLOCK_MONOTONIC now: the realtime reading set against the middle of two
    monotonic ones, the tightest of 5 (its error is half their gap). Sources on the wall clock (an
    Oracle trace's timestamps) are placed on the capture's clock with it."""
    best = None
    for _ in range(5):
        t0 = time.monotonic_ns()
        w = time.time_ns()
        t1 = time.monotonic_ns()
        if best is None or t1 - t0 < best[2]:
            best = (w - (t0 + t1) // 2, (t0 + t1) // 2, t1 - t0)
    return {"offset_ns": best[0], "at_ns": best[1], "error_ns": (best[2] + 1) // 2}


class NodeCapture:
    """Kernel trace + samples (+ statements) of one DBMS on this node, into `capture_dir`.

    trace: True (fail when tracing is impossible), False, or "auto" (skip it, stating why)."""

    def __init__(self, capture_dir: str | os.PathLike, options: CaptureOptions | None = None, *,
                 postmaster_pid: int | None = None, conninfo: str | None = None, pids: list[int] | None = None,
                 data_dir: str | os.PathLike | None = None, engine: Engine = POSTGRESQL,
                 progress: Callable[[str], None] | None = None):
        """What to capture: the server (postmaster_pid, found from conninfo when not given; or another
        DBMS's pids), its data directory (a restart is followed through it) and its engine; how: options."""
        self.options = opt = options or CaptureOptions()
        if postmaster_pid is None and not pids:
            if engine.server_pid is None:
                raise MwinvError(f"{engine.name}: give the server's pids")
            postmaster_pid = engine.server_pid(conninfo)
        if postmaster_pid is not None and not pid_alive(postmaster_pid):
            raise MwinvError(f"pid {postmaster_pid}: no such process")
        self.capture = Capture(capture_dir)
        self.node = opt.node
        self.engine = engine
        self.postmaster_pid = postmaster_pid
        self.pids = pids or [postmaster_pid]
        self.conninfo = conninfo
        self.data_dir = Path(data_dir) if data_dir else None
        self.restarts: list[dict] = []
        self._gone_since: int | None = None
        self.events = list(opt.events) if opt.events else default_events(opt.page_faults)
        self.progress = progress or (lambda s: None)
        self.recorder: KernelRecorder | None = None
        self.sampler: Sampler | None = None
        self.drainer = None
        self.from_probes = False
        self.summary: dict = {"skipped": {}}
        self._started = False

    def _record_settings(self) -> None:
        """The server's settings the advice weighs (jit, parallel workers, memory) and the CPUs it may use,
        into the manifest: without them cpu.jit never spoke and the CPU count was the analysing host's."""
        if self.postmaster_pid:
            try:
                self.capture.update_manifest(cpus=len(os.sched_getaffinity(self.postmaster_pid)))
            except OSError:
                pass
        if not self.conninfo or self.engine.settings is None:
            return
        settings, why = self.engine.settings(self.conninfo)
        if why:
            self.summary["skipped"]["settings"] = why
            return
        self.capture.update_manifest(settings=settings)

    def _statement_reader(self, since_ns: int):
        """The engine's statement reader, else (None, why)."""
        if self.engine.statement_reader is None:
            return None, f"{self.engine.name}: no statement reader in the node capture"
        if not self.conninfo:
            return None, "no conninfo"
        return self.engine.statement_reader(self.conninfo, self.capture, self.node, since_ns=since_ns)

    def server_check(self) -> str | None:
        """Why the capture should end now (its server stopped for good), else None. With a data directory
        a new postmaster of the same server is followed from then on, and the gap goes into the manifest;
        one that does not come back within RESTART_WAIT_S ends the capture."""
        if not self.postmaster_pid or pid_alive(self.postmaster_pid):
            return None
        now = time.monotonic_ns()
        if self._gone_since is None:
            self._gone_since = now
            self.progress(f"postmaster {self.postmaster_pid} exited")
        new = self._new_postmaster()
        if new:
            self._follow_postmaster(new, now)
            return None
        if self.data_dir and now - self._gone_since < RESTART_WAIT_S * 1e9:
            return None
        return (f"the server stopped (postmaster {self.postmaster_pid} exited"
                + (f", no new one in {self.data_dir} within {RESTART_WAIT_S:g} s" if self.data_dir else "")
                + "): the capture ended with everything recorded so far")

    def _new_postmaster(self) -> int | None:
        """A new server of the same data directory (the engine's server_pid_of), if one runs."""
        if not self.data_dir or self.engine.server_pid_of is None:
            return None
        pid = self.engine.server_pid_of(self.data_dir)
        return pid if pid and pid != self.postmaster_pid and pid_alive(pid) else None

    def _follow_postmaster(self, new: int, now: int) -> None:
        gap = {"postmaster_pid_before": self.postmaster_pid, "gone_ns": self._gone_since,
               "postmaster_pid_after": new, "back_ns": now}
        self.restarts.append(gap)
        self.progress(f"server restarted: following postmaster {new}")
        self.postmaster_pid, self._gone_since = new, None
        self.pids = [new]
        if self.recorder is not None:
            self.recorder.follow(new)
        self._update_node({"restarts": self.restarts})

    def _other_netns_pid(self) -> int | None:
        """The postmaster, when it runs in another network namespace (a cluster node): its interfaces
        are the node's, sampled through /proc/<pid>/net/dev."""
        try:
            if self.postmaster_pid and os.readlink(f"/proc/{self.postmaster_pid}/ns/net") != \
                    os.readlink("/proc/self/ns/net"):
                return self.postmaster_pid
        except OSError:
            pass
        return None

    def _median_wall_ns(self) -> int | None:
        """The median of the statements the drainer last read; while none has ended since the capture
        began, that time (a query of TPC-H's may still run): None without statements."""
        if self.drainer is None:
            return None
        median = self.drainer.median_wall_ns
        if median is None:
            return time.monotonic_ns() - self.drainer.since_ns if self.drainer.since_ns else None
        return median

    def _pids_now(self) -> list[int]:
        if self.postmaster_pid:
            return descendants(self.postmaster_pid)
        return [p for p in self.pids if pid_alive(p)]

    def start(self) -> "NodeCapture":
        opt, skipped = self.options, self.summary["skipped"]
        self.capture.create(capture_kind="node", clock_source="mono")
        node_info = {"clock": "mono", "kernel": " ".join(os.uname()[:3]), "postmaster_pid": self.postmaster_pid,
                     "engine": self.engine.name, "sample_interval_s": opt.sample_interval_s if opt.sample else None,
                     "software": _software_versions(self.postmaster_pid), "start_ns": time.monotonic_ns(),
                     "wall_minus_mono_start": wall_minus_mono()}
        self._update_node(node_info)
        self._record_settings()
        self._started = True
        try:
            if opt.statements:
                self.drainer, why = self._statement_reader(node_info["start_ns"])
                if not self.drainer:
                    skipped["statements"] = why
            # the statements first: an event budget weighs how long they last (the recorder's first
            # decision came before the drainer's first drain, and saw none)
            if self.drainer:
                self.drainer.start()
                sql_only = getattr(self.drainer, "sql_only", None)   # PostgreSQL's drainer says how it reads
                if sql_only is not None:
                    how = f"through SQL: {sql_only}" if sql_only else "from the server's ring, mapped"
                    if getattr(self.drainer, "spooling", False):
                        how += ", spooled raw and converted when the capture ends"
                    self.progress(f"statements read {how}")
                    self._update_node({"statement_reader": how})
            # without a reader, the engine's own query probes give the statements (degraded mode)
            self.from_probes = bool(opt.statements and opt.trace and self.postmaster_pid and not self.drainer
                                    and self.engine.statements_from_probes)
            if opt.trace:
                try:
                    if opt.trace == "auto":
                        tracefs_root()
                    probes = self.engine.probes("usdt" if self.from_probes else "extension")
                    config = RecorderConfig(events=self.events, stacks=opt.stacks, probes=probes, duty=opt.duty,
                                            window_s=opt.window_s, event_budget=opt.event_budget)
                    self.recorder = KernelRecorder(self.capture.path / "kernel" / self.node, self._pids_now(),
                                                   config, follow_pid=self.postmaster_pid, notice=self.progress,
                                                   statement_wall=self._median_wall_ns).start()
                    self.progress(f"tracing {len(self.recorder.procs)} pids in {self.recorder.instance.name}")
                    self._update_node({"kernel_unparsed": UNPARSED.format(self.node)})   # while there is room
                except MwinvError as exc:
                    if opt.trace != "auto":
                        raise
                    self.recorder = None
                    skipped["kernel_trace"] = str(exc)
            if opt.sample:
                self.sampler = Sampler(self.capture, self.node, self._pids_now, opt.sample_interval_s,
                                       net_pid=self._other_netns_pid()).start()
                self.progress(f"sampling every {opt.sample_interval_s:g} s")
        except BaseException:
            self.stop()
            raise
        return self

    def halt(self) -> None:
        """The kernel's tracing state restored (Ctrl-C and SIGTERM wait until it is); the rest stops in stop()."""
        if self.recorder is not None:
            self.recorder.halt()

    def stop(self, finish: bool = True) -> dict:
        """Stop everything (state restored first), then parse the trace into the tables (finish=False, an
        interrupted capture: not now, that is the next correlation's, recover_kernel)."""
        if not self._started:
            return self.summary
        self._started = False
        self.halt()   # first: a signal during the slower steps below must find nothing left to restore
        errors = []
        for what, part in (("statements", self.drainer), ("sampler", self.sampler), ("kernel", self.recorder)):
            if part is None:
                continue
            try:
                if what == "statements" and getattr(part, "spooling", False):
                    self.progress("converting the statement records spooled during the capture")
                result = part.stop(assemble_trace=finish) if what == "kernel" else part.stop()
                if what == "statements":
                    self.summary["statements_before_capture"] = part.before_capture
                    if part.began_full:
                        self._update_node({"statements_since_ns": part.since_ns})
                    if part.dropped:
                        self.summary["statements_dropped"] = part.dropped
                if what == "sampler":
                    self.summary["sampler"] = {"samples": result.samples, "cpu_s": round(result.cpu_s, 3),
                                               "cpu_share": round(result.cpu_share, 5)}
                elif what == "kernel":
                    self.summary["recorder"] = result
            except Exception as exc:
                errors.append(f"{what}: {exc}")
        if self.summary.get("statements_dropped"):
            self._update_node({"statements_lost": f"{self.summary['statements_dropped']:,} statement records "
                               "dropped: the extension's ring was full (raise mwinv.buffer_size)"})
        if self.recorder is not None and "recorder" in self.summary and not finish:
            self.summary["skipped"]["kernel_parse"] = INTERRUPTED
        elif self.recorder is not None and "recorder" in self.summary:
            self._parse()
            if self.from_probes:
                self.summary["statements_from_probes"] = self.engine.statements_from_probes(self.capture, self.node)
                self.summary["skipped"].pop("statements", None)
                self._update_node({"statements": self.engine.probe_source, "statements_lost": self.engine.probe_lost})
        self.summary["errors"] = errors
        rec = self.summary.get("recorder", {})
        # what the recorder kept going past (a duty cycle that stopped, a pid not followed)
        said = {"kernel_errors": "kernel recorder: " + "; ".join(rec["errors"])} if rec.get("errors") else {}
        self._update_node({
            **said,
            "end_ns": time.monotonic_ns(), "wall_minus_mono_end": wall_minus_mono(),
            "tracer": rec.get("tracer", "none"), "events": rec.get("events", []),
            "function_tracer": rec.get("function_tracer"),
            "stacks": self.options.stacks, "perf_samples": self.summary.get("perf_samples", 0),
            "duty": rec.get("duty"), "event_budget": rec.get("event_budget"),
            "duty_changes": rec.get("duty_changes", []),
            "pids": rec.get("pids", self._pids_now() if self.postmaster_pid and pid_alive(self.postmaster_pid) else []),
            "skipped": {**self.summary["skipped"], **rec.get("skipped", {})},
            "sample_interval_s": self.options.sample_interval_s if self.options.sample else None,
            "seq_source": "block_events" if self.recorder else "diskstats_merges"})
        if errors:
            raise MwinvError("; ".join(errors))
        return self.summary

    def _update_node(self, info: dict) -> None:
        """Merge `info` into manifest["nodes"][node] (update_manifest merges one level only)."""
        nodes = self.capture.manifest().get("nodes", {})
        self.capture.update_manifest(nodes={self.node: {**nodes.get(self.node, {}), **info}})

    def _parse(self) -> None:
        self.progress("parsing the kernel trace")
        done = parse_kernel(self.capture, self.node, self.engine.role, self.options.sample_interval_s,
                            self.summary["recorder"].get("windows") or [])
        if "trace_tail" in done:
            self.summary["skipped"]["trace_tail"] = done.pop("trace_tail")
        self.summary.update(done)
        # a trace cut short stays as it is: its tail is what to look at
        kept = "keep" if "trace_tail" in self.summary["skipped"] else self.options.keep_trace
        retain_trace(self.capture.path / "kernel" / self.node, kept)
        self._update_node({"kernel_unparsed": None, "trace_kept": kept})

    def __enter__(self) -> "NodeCapture":
        return self.start()

    def __exit__(self, exc_type, *_) -> None:
        self.stop(finish=exc_type is not KeyboardInterrupt)


def parse_kernel(capture: Capture, node: str, role, sample_interval_s: float, windows: list,
                 wait: bool = True) -> dict | None:
    """Parse what a node's recorder assembled in kernel/<node>/ into the capture's tables (events, stacks,
    processes, traced windows, the disk's sequentiality, perf's CPU samples); returns the summary's
    entries: parse, parse_unfiltered, perf_samples, and trace_tail (a fault that cut the trace short).
    All or nothing: the tables are written aside and moved in when complete, so a parse cut short (a
    full disk, a second signal) adds no rows and the next correlation parses again (recover_kernel).
    wait=False: None at once if another process is parsing it."""
    kdir = capture.path / "kernel" / node
    with privfile.append(kdir / ".parse.lock") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return None
        staged = Capture(kdir / "parsed")
        shutil.rmtree(staged.path, ignore_errors=True)   # what a parse cut short left
        try:
            out = _parse_kernel(staged, kdir, node, role, sample_interval_s, windows)
            capture.take_parts(staged)
        finally:
            shutil.rmtree(staged.path, ignore_errors=True)   # and the room it took
        return out


def _parse_kernel(capture: Capture, kdir: Path, node: str, role, sample_interval_s: float, windows: list) -> dict:
    res = parse_trace(kdir / "trace.dat", capture, node, procs_file=kdir / "procs.json", role=role)
    out: dict = {"parse": res.__dict__}
    if (kdir / "unfiltered.dat").exists():   # block completions, from every task's context
        out["parse_unfiltered"] = parse_trace(kdir / "unfiltered.dat", capture, node, processes=False).__dict__
    if windows:
        capture.write_part("trace_window", [{"node": node, "lo": lo, "hi": hi} for lo, hi in windows], node=node)
    if res.fault:
        out["trace_tail"] = res.fault
    seq = block_sequentiality(capture.read("kernel_event"), node, int(sample_interval_s * 1e9))
    if seq.num_rows:
        capture.write_part("node_sample", seq, node=node)
    if (kdir / "perf.data").exists():
        pids = {p["pid"] for p in capture.read("process").to_pylist() if p["node"] == node}
        out["perf_samples"] = perf_to_capture(kdir / "perf.data", capture, node, pids)
    return out


def retain_trace(kdir: Path, keep: str) -> None:
    """The raw traces of a node, parsed whole: kept, compressed into <name>.zst (streamed; `zstd -d`
    restores it) or removed (options.KEEP_TRACE). A compression that fails (a full disk) keeps the raw
    trace and removes its half-written copy."""
    import pyarrow as pa

    for raw in (kdir / "trace.dat", kdir / "unfiltered.dat"):
        if keep == "keep" or not raw.exists():
            continue
        if keep == "zstd":
            packed = raw.with_name(raw.name + ".zst")
            try:
                with open(raw, "rb") as src, privfile.create(packed) as f, \
                        pa.CompressedOutputStream(pa.PythonFile(f, mode="w"), "zstd") as out:
                    while block := src.read(16 << 20):
                        out.write(block)
            except BaseException as exc:
                packed.unlink(missing_ok=True)
                if isinstance(exc, OSError) and is_disk_full(exc):
                    raise MwinvError(f"no space left on device compressing {raw} (kept as it is)") from None
                raise
        raw.unlink()


def recover_kernel(capture: Capture, progress: Callable[[str], None] | None = None) -> None:
    """Assemble and parse the raw kernel pages a capture that did not stop left in kernel/<node>/ (killed,
    or interrupted). What could not be parsed, and what a killed recorder did not record, go into the
    node's manifest (kernel_unparsed, kernel_recovered), which the correlation warns of. The pages of a
    recorder still running are left alone."""
    from mwinv.engines.mariadb.kernel import MARIADB

    for kdir in sorted(capture.path.glob("kernel/*/formats.json")):
        kdir, node = kdir.parent, kdir.parent.name
        info = capture.manifest().get("nodes", {}).get(node, {})
        raw = any(kdir.glob("cpu*.raw"))
        # assembled, but its parse failed (a full disk) or was cut short (a second signal)
        assembled = not raw and (kdir / "trace.dat").exists() and info.get("kernel_unparsed") == UNPARSED.format(node)
        if not raw and not assembled:
            continue
        try:
            owner = int((kdir / OWNER).read_text())
            if owner != os.getpid() and pid_alive(owner):
                continue
        except (OSError, ValueError):
            pass
        killed = not (kdir / "recorder.json").exists()
        try:
            rec = {} if killed else json.loads((kdir / "recorder.json").read_text())
            if raw:
                if progress:
                    progress(f"assembling the kernel pages node {node}'s capture left unparsed")
                assemble(kdir, kdir / "trace.dat")
                if (kdir / "unfiltered" / "formats.json").exists():
                    assemble(kdir / "unfiltered", kdir / "unfiltered.dat")
        except (MwinvError, OSError, ValueError) as exc:
            capture.update_manifest(nodes={node: {**info, "kernel_unparsed": (
                f"kernel trace not parsed: {kdir} holds the raw pages of a capture that did not stop ({exc})")}})
            continue
        engine = MARIADB if info.get("engine") == MARIADB.name else POSTGRESQL
        if progress:
            progress(f"parsing node {node}'s kernel trace")
        done = parse_kernel(capture, node, engine.role, info.get("sample_interval_s") or 1.0, rec.get("windows") or [],
                            wait=False)
        if done is None:   # its capture is parsing it now
            continue
        info = {k: v for k, v in capture.manifest().get("nodes", {}).get(node, {}).items() if k != "kernel_unparsed"}
        info["skipped"] = {k: v for k, v in (info.get("skipped") or {}).items() if k != "kernel_parse"}
        if "trace_tail" in done:
            info["skipped"]["trace_tail"] = done["trace_tail"]
        if killed:
            info["kernel_recovered"] = ("kernel trace parsed from the raw pages of a capture that did not stop "
                                        "(killed, or interrupted again): its processes' roles and traced windows "
                                        "were not recorded")
        elif assembled:
            info["kernel_recovered"] = (f"kernel trace parse interrupted or failed when the capture stopped: "
                                        f"parsed afterwards from kernel/{node}/trace.dat")
        capture.update_manifest(nodes={node: info})


def wait_for_end(duration_s: float | None = None, command: list[str] | None = None,
                 check: Callable[[], str | None] | None = None) -> tuple[int | None, str | None]:
    """Block until `duration_s` passed, `command` exited, `check()` names a reason to end (checked every
    WATCH_S), or Ctrl-C/SIGTERM (the command is then terminated too). Returns (the command's status,
    the check's reason)."""
    proc = None
    deadline = time.monotonic() + duration_s if duration_s is not None else None
    try:
        if command:
            try:
                proc = subprocess.Popen(command)
            except OSError as exc:
                raise MwinvError(f"{command[0]}: cannot run: {exc.strerror}") from None
        while deadline is None or time.monotonic() < deadline:
            step = WATCH_S if deadline is None else max(0.0, min(WATCH_S, deadline - time.monotonic()))
            if proc is not None:
                try:
                    return proc.wait(timeout=step), None
                except subprocess.TimeoutExpired:
                    pass
            else:
                time.sleep(step)
            if check and (reason := check()):
                return None, reason
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    return None, None


def record_capture(capture_dir: str | os.PathLike, options: CaptureOptions | None = None, *,
                   duration_s: float | None = None, command: list[str] | None = None,
                   postmaster_pid: int | None = None, conninfo: str | None = None, pids: list[int] | None = None,
                   data_dir: str | os.PathLike | None = None, progress: Callable[[str], None] | None = None) -> dict:
    """Capture until `duration_s` passed, `command` exited, the server stopped for good, or Ctrl-C/SIGTERM;
    returns the summary. The command's exit status is in summary['command_rc'], why the capture ended
    early in summary['ended']."""
    cap = NodeCapture(capture_dir, options, postmaster_pid=postmaster_pid, conninfo=conninfo, pids=pids,
                      data_dir=data_dir, progress=progress)
    cap.start()
    rc = ended = None
    try:
        rc, ended = wait_for_end(duration_s, command, cap.server_check)
    finally:
        summary = cap.stop()
    summary["command_rc"], summary["ended"] = rc, ended
    summary["restarts"] = cap.restarts
    return summary
