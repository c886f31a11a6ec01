"""Record the kernel events of a DBMS's processes into our own trace instance.

Why not trace-cmd: on this kernel `trace-cmd record` is refused (it writes ftrace_enabled), the
`-d --no-filter -B` form records but did not apply the pid filter and leaves the instance behind.
So mwinv drives tracefs itself: an instance `mwinv-<pid>-<rand>` with `set_event_pid` (the
postmaster and its children, `options/event-fork`, re-read every second), the `mono` clock, and one
reader thread per CPU copying whole ring-buffer pages from `per_cpu/cpuN/trace_pipe_raw` into
files; at the end the pages are assembled into a version-6 trace.dat (readable by `trace-cmd
report` too). Kernel stacks come from the `stacktrace` trigger on the events that explain waits,
and CPU hot spots from `perf record -g`, with exact calls of the kernel-knob families' functions from the
function tracer where the kernel allows it in an instance (docs/kernel-advice.md)."""

from __future__ import annotations

import errno
import json
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mwinv import privfile
from mwinv.errors import MwinvError
from mwinv.kernel_knobs import traced_functions
from mwinv.kernel_trace import perf as perf_mod
from mwinv.kernel_trace.tracedat import write_tracedat
from mwinv.kernel_trace.tracefs import Instance, TracefsError, add_uprobe, clean_stale, new_uprobe_group, remove_uprobe, tracefs_root
from mwinv.kernel_trace.usdt import ProbeSet, string_fetcharg, uprobe_target, usdt_probes
from mwinv.signals import held

# sched_waking runs in the waker's context; sched_wakeup, for a task woken on another CPU, runs there in
# the interrupt that queued it (pid 0): only sched_waking names who released a lock.
SCHED_EVENTS = ["sched:sched_switch", "sched:sched_waking", "sched:sched_wakeup", "sched:sched_wakeup_new",
                "sched:sched_process_fork", "sched:sched_process_exit"]
# block_bio_queue runs in the submitting task's context (the backend, also for its readahead), where
# block_rq_issue may run in a kworker (blk-throttle dispatch, plugging) and completions in interrupts.
# Pages a task brings into the page cache are added in its own context even when blk-throttle
# dispatches the bios later from a kworker: the reliable owner (and file offset) of every read.
BLOCK_EVENTS = ["block:block_bio_queue", "block:block_rq_issue", "block:block_rq_complete",
                "filemap:mm_filemap_add_to_page_cache"]
# Completions run in interrupts, on whichever task the CPU was running: a pid-filtered instance kept 245
# of the 5,746 completions of a cold InnoDB scan's requests. They are recorded in an instance of their
# own without the pid filter (every request of the machine completes there); the correlator pairs them
# with the DBMS's own requests (correlator/sql/disk_request.sql).
UNFILTERED_EVENTS = ["block:block_rq_complete"]
# The syscalls a DBMS waits in (all raw_syscalls cost 26 % of pgbench TPS here: only these).
WAIT_SYSCALLS = ["pread64", "pwrite64", "read", "write", "preadv", "pwritev", "fsync", "fdatasync",
                 "sync_file_range", "recvfrom", "sendto", "recvmsg", "sendmsg", "epoll_wait",
                 "epoll_pwait", "futex", "semop", "semtimedop", "select", "poll"]
NET_EVENTS = ["sock:sock_recv_length", "sock:sock_send_length", "net:net_dev_xmit", "net:netif_receive_skb"]
PAGE_FAULT_EVENTS = ["exceptions:page_fault_user"]
# stacks on the events that explain a wait: a task blocking, a disk request being issued
STACK_TRIGGERS = {"sched:sched_switch": "prev_state & 3", "block:block_rq_issue": ""}

# A kernel event costs the CPU it fires on ~0.35 us of work elsewhere (pgbench -S on 2 cores lost 3.6 % of its
# throughput per 100,000 events/s, docs/overhead.md): 50,000 events/s per CPU is ~4 %, the OLTP goal of 5 %
# with the statements' own cost. The rate is averaged over BUDGET_AVERAGE_S of traced time (a TPC-H
# query's burst of reads is not a load), at once when it is OVERLOAD times the budget.
DEFAULT_EVENT_BUDGET = 50_000
BUDGET_AVERAGE_S = 5.0
OVERLOAD = 4
MIN_DUTY = 0.01
UP_MARGIN = 0.8   # trace more again only when the budget holds with this margin (no flapping)
# The recording process's pid, in the output directory while it records: raw pages without a live owner
# are a killed capture's, for the next correlation to parse (node_capture.recover_kernel)
OWNER = "recording.pid"
# Statements whose median is longer than this share of a window keep every event: a window covers few
# of them whole, and one it does not cover has no kernel side at all (TPC-H's long queries)
LONG_STATEMENT = 0.1

def default_events(page_faults: bool = False) -> list[str]:
    sys = [f"syscalls:sys_{d}_{name}" for name in WAIT_SYSCALLS for d in ("enter", "exit")]
    return SCHED_EVENTS + BLOCK_EVENTS + sys + NET_EVENTS + (PAGE_FAULT_EVENTS if page_faults else [])


def start_function_tracer(inst: Instance, pids: list[int]) -> dict:
    """The function tracer in `inst`, on the kernel-knob families' functions only and on `pids` (and their
    children: function-fork), where the kernel allows it; its entries go into the instance's buffer with
    the events (kernel_function_call once parsed). Returns the manifest's record: whether it runs, else
    why not (the errno and the file that refused it: EPERM at set_ftrace_filter here), and the globs."""
    globs = traced_functions()
    matched: list[str] = []
    step = "set_ftrace_filter"
    try:
        for g in globs:   # a glob no function of this kernel matches is refused (EINVAL): the others stay
            try:
                inst.write(step, g + "\n", append=True)
                matched.append(g)
            except TracefsError as exc:
                if exc.errno != errno.EINVAL:
                    raise
        if not matched:
            return {"ran": False, "why_not": f"none of the {len(globs)} functions of the kernel-knob families "
                                             "is traceable here", "filter": globs}
        for step, value in (("set_ftrace_pid", " ".join(map(str, pids))), ("options/function-fork", "1"),
                            ("current_tracer", "function")):
            inst.write(step, value)
    except TracefsError as exc:
        why = f"{errno.errorcode.get(exc.errno, exc.errno)} ({os.strerror(exc.errno)}, writing {step})"
        return {"ran": False, "why_not": why, "filter": globs}
    return {"ran": True, "why_not": None, "filter": matched}


def descendants(root_pid: int) -> list[int]:
    """root_pid and all its descendants (threads' tids included), from /proc."""
    children: dict[int, list[int]] = {}
    for d in os.scandir("/proc"):
        if not d.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d.name}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root_pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    # /proc lists processes only: the other threads of each (mariadbd's connection threads) are its tasks
    threads = []
    for p in out:
        try:
            threads += [int(t.name) for t in os.scandir(f"/proc/{p}/task") if int(t.name) != p]
        except OSError:
            continue
    return out + threads


def children(pid: int) -> list[int]:
    """The live children of pid's threads (/proc/pid/task/*/children), [] if it is gone."""
    out: list[int] = []
    try:
        for task in os.scandir(f"/proc/{pid}/task"):
            out.extend(int(c) for c in Path(task.path, "children").read_text().split())
    except OSError:
        pass
    return out


def proc_info(pid: int) -> dict | None:
    """comm, ppid, cmdline and start time (ns since boot) of a live pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None
    comm = stat[stat.index("(") + 1:stat.rindex(")")]
    rest = stat.rsplit(")", 1)[1].split()
    return {"comm": comm, "ppid": int(rest[1]), "cmdline": cmdline,
            "start_ns": int(rest[19]) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")}


@dataclass
class RecorderConfig:
    events: list[str] = field(default_factory=default_events)
    stacks: bool = False                 # kernel stacks on wait events + CPU hot spots
    buffer_kb: int = 8192                # per CPU
    poll_interval_s: float = 0.2
    follow_interval_s: float = 1.0       # full /proc scan for the DBMS's descendants
    children_interval_s: float = 0.05    # the postmaster's direct children (a short connection's backend)
    perf_freq_hz: int = 99
    probes: tuple[ProbeSet, ...] = ()    # the DBMS's USDT probes to attach (its engine's Engine.probes)
    duty: float = 1.0                    # share of the time traced: windows of window_s, events off between
    window_s: float = 1.0
    event_budget: float | None = None    # events/s per CPU over which fewer windows are traced (None: no limit)


def duty_change_text(change: dict, budget: float) -> str:
    """One of the budget's decisions (an entry of the recorder's duty_changes) in words."""
    said = f"kernel events at {change['events_per_s_per_cpu']:,}/s per CPU"
    if "statement_median_ms" in change:
        return (f"{said}, over the budget of {budget:,.0f}, but the statements last "
                f"{change['statement_median_ms']:,} ms (median), too long for windows: every event kept "
                "(--duty to trade them)")
    if change["duty"] < 1:
        return f"{said}, over the budget of {budget:,.0f}: traced one window in {round(1 / change['duty'])}"
    return f"{said}, within the budget of {budget:,.0f}: traced throughout"


class KernelRecorder:
    """start() / stop(): records into `out_dir` (trace.dat, procs.json, perf.data, recorder.json)."""

    def __init__(self, out_dir: str | os.PathLike, pids: list[int], config: RecorderConfig | None = None,
                 follow_pid: int | None = None, notice: Callable[[str], None] | None = None,
                 statement_wall: Callable[[], int | None] | None = None):
        self.out = Path(out_dir)
        self.pids = list(pids)
        self.follow_pid = follow_pid if follow_pid is not None else (pids[0] if pids else None)
        self.cfg = config or RecorderConfig()
        self.instance: Instance | None = None
        self.unfiltered: Instance | None = None   # UNFILTERED_EVENTS, beside the pid-filtered instance
        self.uprobes: list[str] = []
        self.uprobe_group = new_uprobe_group()
        self.enabled: list[str] = []
        self.skipped: dict[str, str] = {}
        self.tracer = "nop"
        self.function_tracer: dict | None = None   # whether it ran, why not (the manifest's record)
        self.perf = None
        self.procs: dict[int, dict] = {}
        self._gone: set[int] = set()
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._reading = False   # the per-CPU readers were started: there are pages to assemble
        self._halted = False
        self._errors: list[str] = []
        self.windows: list[list[int | None]] = []   # [on, off] on the trace's clock: when events were all on
        self.off: list[list[int | None]] = []       # [off, on]: when they were all off (switching takes time)
        self._pid_lock = threading.Lock()   # set_event_pid and the on/off state of the events
        self.triggers: dict[str, str] = {}   # trigger file -> the stack trigger written to it
        self._events_on = True
        self.duty = self.cfg.duty
        self.duty_changes: list[dict] = []   # the budget's decisions: when, at which rate, to which duty
        self.notice = notice or (lambda line: None)
        self.statement_wall = statement_wall or (lambda: None)   # median ns of the statements just read
        if self.cfg.event_budget is not None and self.cfg.event_budget <= 0:
            raise MwinvError(f"event budget {self.cfg.event_budget:g}/s per CPU: more than 0 (or none)")
        if not 0 < self.cfg.duty <= 1 or self.cfg.window_s <= 0:
            raise MwinvError(f"duty cycle {self.cfg.duty:g} of {self.cfg.window_s:g} s windows: "
                             "a share in (0, 1] and windows of more than 0 s")

    # ------------------------------------------------------------ start
    def start(self) -> "KernelRecorder":
        root = tracefs_root()
        self.removed_stale = clean_stale(root)
        privfile.make_dir(self.out)
        _own(self.out)
        self.instance = inst = Instance.create(root)
        try:
            self._configure(root, inst)
        except BaseException:
            with held():
                self._teardown()
            raise
        return self

    def _configure(self, root: Path, inst: Instance) -> None:
        inst.write("tracing_on", "0")
        inst.write("trace_clock", "mono")     # = Python time.monotonic_ns() = the DBMS side's clock
        inst.write("buffer_size_kb", str(self.cfg.buffer_kb))
        inst.write("options/event-fork", "1")
        self._follow()
        for probe_set in self.cfg.probes:
            self._add_probes(root, probe_set)
        unfiltered = [ev for ev in self.cfg.events if ev in UNFILTERED_EVENTS]
        filtered = [ev for ev in self.cfg.events if ev not in UNFILTERED_EVENTS]
        self._enable(inst, filtered + [f"{u.split('/')[0]}:{u.split('/')[1]}" for u in self.uprobes])
        if not self.enabled:
            raise MwinvError(f"{inst.path}: none of the requested events exists in this kernel")
        if self.cfg.stacks:
            self._stacks(inst)
        self._event_formats(root, self.enabled, self.out)
        ncpu = os.cpu_count() or 1
        self._reading = True
        sources = [(inst, self.out, "trace")]
        if unfiltered:
            self.unfiltered = Instance.create(root)
            self.unfiltered.write("tracing_on", "0")
            self.unfiltered.write("trace_clock", "mono")
            self.unfiltered.write("buffer_size_kb", str(max(1024, self.cfg.buffer_kb // 8)))
            events = self._enable(self.unfiltered, unfiltered)
            privfile.make_dir(self.out / "unfiltered")
            self._event_formats(root, events, self.out / "unfiltered")
            self.unfiltered.write("tracing_on", "1")
            sources.append((self.unfiltered, self.out / "unfiltered", "unfiltered"))
        for c in range(ncpu):
            for instance, out, label in sources:
                t = threading.Thread(target=self._read_cpu, args=(instance, c, out / f"cpu{c}.raw"),
                                     name=f"mwinv-{label}-cpu{c}", daemon=True)
                t.start()
                self._threads.append(t)
        f = threading.Thread(target=self._follow_loop, name="mwinv-trace-follow", daemon=True)
        f.start()
        self._threads.append(f)
        cycled = self.cfg.duty < 1 or bool(self.cfg.event_budget)   # events may be switched off
        if self.cfg.stacks and perf_mod.perf_available() and self.pids:
            self.perf = perf_mod.start_perf(self.out / "perf.data", self.cfg.perf_freq_hz, control=cycled)
            if cycled:
                # sampling before the first window opens: `perf record -a -g` took ~0.4 s to start on a
                # busy host, and a 0.4 s first window had no sample; its acknowledgement says it samples
                self.perf.switch(True, timeout_s=10)
        inst.write("tracing_on", "1")
        self.windows.append([time.monotonic_ns(), None])
        if cycled:
            d = threading.Thread(target=self._duty_loop, name="mwinv-trace-duty", daemon=True)
            d.start()
            self._threads.append(d)

    def _stacks(self, inst: Instance) -> None:
        """Stack triggers on the wait events; the function tracer per pid where the kernel allows."""
        for ev, cond in STACK_TRIGGERS.items():
            if ev not in self.enabled:
                continue
            trig = f"events/{ev.replace(':', '/')}/trigger"
            text = "stacktrace" + (f" if {cond}" if cond else "")
            try:
                inst.write(trig, text)
            except MwinvError:
                text = "stacktrace"                 # older kernels: no `&` in trigger filters
                inst.write(trig, text)
            self.triggers[trig] = text
        self.function_tracer = ft = start_function_tracer(inst, self.pids)
        if ft["ran"]:
            self.tracer = "function"
        else:   # perf's samples stand alone
            self.skipped["tracer:function"] = f"function tracer refused: {ft['why_not']}"

    def _dbms_binary(self) -> Path | None:
        """The executable of the traced pids (the DBMS's)."""
        for pid in self.pids:
            try:
                return Path(os.readlink(f"/proc/{pid}/exe"))
            except OSError:
                continue
        return None

    def _add_probes(self, root: Path, probe_set: ProbeSet) -> None:
        """A uprobe for each probe of the set (at each of its sites, or its last one when not per_site); what
        cannot be attached goes to `skipped` under the set's name."""
        exe = self._dbms_binary()
        if exe is None or not exe.exists():
            self.skipped[f"uprobe:{probe_set.what}"] = "the DBMS binary is not readable"
            return
        path = exe if probe_set.library is None else exe.parent.parent / probe_set.library
        if not path.exists():
            self.skipped[f"uprobe:{probe_set.what}"] = f"{path}: not installed"
            return
        try:
            probes = usdt_probes(path, provider=probe_set.provider)
        except MwinvError as exc:
            self.skipped[f"uprobe:{probe_set.what}"] = str(exc)
            return
        if not probe_set.per_site:   # the last site of each probe
            probes = list({p.name: p for p in probes}.values())
        seen: dict[str, int] = {}
        for probe in probes:
            event = probe_set.events.get(probe.name)
            if event is None:
                continue
            n = seen[event] = seen.get(event, 0) + 1
            target, args = uprobe_target(path, probe, list(probe_set.args))
            if event in probe_set.text_events and probe.args and (text := string_fetcharg(probe.args[0])):
                args = f"query={text}"
            name = f"{event}_{n}" if probe_set.per_site else event
            try:
                self.uprobes.append(add_uprobe(root, self.uprobe_group, name, target, args))
            except MwinvError as exc:
                self.skipped[f"uprobe:{name}"] = str(exc)

    def _enable(self, inst: Instance, events: list[str]) -> list[str]:
        """Enable what the kernel has of `events` (the rest is said in `skipped`); returns those enabled."""
        enabled = []
        for ev in events:
            if not inst.has_event(ev):
                self.skipped[ev] = "not in this kernel"
                continue
            try:
                inst.write(f"events/{ev.replace(':', '/')}/enable", "1")
                enabled.append(ev)
            except MwinvError as exc:
                self.skipped[ev] = str(exc).rsplit(": ", 1)[-1]
        self.enabled += enabled
        return enabled

    @staticmethod
    def _event_formats(root: Path, events: list[str], out_dir: Path) -> None:
        """formats.json in out_dir: what assemble() needs, also for a crashed run's pages."""
        out = [("ftrace", p.read_text()) for p in sorted((root / "events/ftrace").glob("*/format"))]
        for ev in events:
            system, name = ev.split(":")
            out.append((system, (root / "events" / system / name / "format").read_text()))
        privfile.write(out_dir / "formats.json", json.dumps(out))

    # ------------------------------------------------------------ running
    def _follow(self, full: bool = True) -> None:
        """Read new DBMS processes from /proc and add them to set_event_pid (event-fork catches
        most; this catches the rest). full: all descendants, else the followed pid's children only
        (one small file: cheap enough to read often, so a backend living < 1 s is still read)."""
        pids = set(self.pids)
        if self.follow_pid:
            pids.update(descendants(self.follow_pid) if full else children(self.follow_pid))
        new = sorted(p for p in pids if p not in self.procs)
        root = self.procs.get(self.follow_pid, {}).get("cmdline")
        for p in new:
            if info := proc_info(p):
                self.procs[p] = info
        # a child read right after its fork still shows the postmaster's command line: read it again
        # once it has set its process title (that title names its role; see parse.process_rows for
        # one that exits first)
        for p, info in list(self.procs.items()):
            if p != self.follow_pid and root and info["cmdline"] == root and p not in self._gone:
                fresh = proc_info(p)
                if fresh is None:
                    self._gone.add(p)   # exited untitled: not read again on every pass
                self.procs[p] = fresh or info
        live_new = [p for p in new if p in self.procs]
        with self._pid_lock:
            if live_new and self._events_on:   # off: the next window writes them all
                self._add_event_pid(*live_new)

    def follow(self, postmaster_pid: int) -> None:
        """Trace a new postmaster (the server restarted) and its children from now on: the follow loop's
        next pass (every children_interval_s) adds them to set_event_pid."""
        self.pids.append(postmaster_pid)
        self.follow_pid = postmaster_pid

    def _follow_loop(self) -> None:
        last_full = time.monotonic()
        while not self._stop.wait(self.cfg.children_interval_s):
            full = time.monotonic() - last_full >= self.cfg.follow_interval_s
            if full:
                last_full = time.monotonic()
            try:
                self._follow(full)
            except Exception as exc:   # keep recording; report at stop
                self._errors.append(f"following pids: {exc}")

    def _duty_loop(self) -> None:
        """Events on for window_s, off for window_s * (1 / duty - 1), and so on (_cycle). A failure ends
        the cycling, said at stop (the node's kernel_errors), and leaves the events on: the rest of the
        capture one window, not none."""
        try:
            self._cycle()
        except Exception as exc:   # a defect: reported, not a thread ended in silence
            self._errors.append(f"duty cycle stopped: {exc!r}")
            if not self._stop.is_set() and not self._events_on and self._switch_events("1"):
                self.windows.append([time.monotonic_ns(), None])

    def _cycle(self) -> None:
        """Off means disabled, not just unrecorded: an enabled tracepoint costs every task that passes it,
        filtered out or not (docs/overhead.md), a disabled one a not-taken branch. With an event budget
        the duty follows the rate the windows see (1 while it is within the budget: events on throughout)."""
        seen: list[tuple[float, int]] = []   # (seconds on, events) of the recent windows, newest last
        while True:
            t0, n0 = time.monotonic(), self._events_so_far() if self.cfg.event_budget else 0
            if self._stop.wait(self.cfg.window_s):
                return
            if self.cfg.event_budget:
                seen.append((time.monotonic() - t0, self._events_so_far() - n0))
                while sum(t for t, _ in seen[1:]) >= BUDGET_AVERAGE_S:
                    seen.pop(0)
                self._follow_budget(seen)
            if self.duty >= 1:
                continue   # one long window
            self.windows[-1][1] = time.monotonic_ns()
            if not self._switch_events("0"):
                return
            off = [time.monotonic_ns(), None]
            self.off.append(off)
            if self._stop.wait(self.cfg.window_s * (1 / self.duty - 1)):
                return
            off[1] = time.monotonic_ns()
            if not self._switch_events("1"):
                return
            self.windows.append([time.monotonic_ns(), None])

    def _events_so_far(self) -> int:
        """Events the instance's buffers took (read, unread, overwritten or dropped), all CPUs."""
        n = 0
        for stats in self.instance.path.glob("per_cpu/cpu*/stats"):
            for line in stats.read_text().splitlines():
                key, _, value = line.partition(":")
                if key in ("entries", "overrun", "read events", "dropped events"):
                    n += int(value)
        return n

    def _follow_budget(self, seen: list[tuple[float, int]]) -> None:
        """Set the duty from the rate while traced: one window in k, k the smallest that keeps the mean
        rate within the budget; recorded and said, never a silent change."""
        secs = sum(t for t, _ in seen)
        rate = sum(n for _, n in seen) / secs / (os.cpu_count() or 1)   # per CPU, while traced
        budget = self.cfg.event_budget
        if secs < BUDGET_AVERAGE_S and rate < OVERLOAD * budget:
            return
        want = min(self.cfg.duty, max(MIN_DUTY, 1 / math.ceil(rate / budget)))
        if want == self.duty or (want > self.duty and rate * want > UP_MARGIN * budget):
            return
        wall = self.statement_wall()
        if want < self.duty and wall is not None and wall > LONG_STATEMENT * self.cfg.window_s * 1e9:
            # too long for windows: few would be traced whole, and the rest would have no kernel side
            if not self.duty_changes or "statement_median_ms" not in self.duty_changes[-1]:
                self.duty_changes.append({"at_ns": time.monotonic_ns(), "events_per_s_per_cpu": round(rate),
                                          "duty": self.duty, "statement_median_ms": round(wall / 1e6, 1)})
                self.notice(duty_change_text(self.duty_changes[-1], budget))
            return
        self.duty = want
        self.duty_changes.append({"at_ns": time.monotonic_ns(), "events_per_s_per_cpu": round(rate),
                                  "duty": want})
        self.notice(duty_change_text(self.duty_changes[-1], budget) + " from now on")

    def _switch_events(self, on: str) -> bool:
        """Every enabled event (and the function tracer, where the kernel allows it) on or off, and the
        pid filter with them: while set_event_pid lists pids the kernel keeps its own probes on the
        scheduler's tracepoints to follow them, enabled events or not (with the events off but the
        filter kept, 1 s in 10 cost 12 % of pgbench -S's throughput, the statements alone 5 %)."""
        try:
            with self._pid_lock:
                if on == "1":
                    self.instance.write("set_event_pid", "")   # truncated, then the live pids
                    # a copy: _follow adds processes meanwhile (iterating the dict itself ended the
                    # cycling when one came: a 600 s capture's windows stopped after 39 s)
                    for pid in list(self.procs):
                        if pid not in self._gone:
                            self._add_event_pid(pid)
                for ev in self.enabled:
                    self.instance.write(f"events/{ev.replace(':', '/')}/enable", on)
                if self.unfiltered is not None:   # the whole machine's completions: off with the rest
                    self.unfiltered.write("tracing_on", on)
                # an event with a trigger is only soft-disabled: its tracepoint stays on for the trigger
                # (stacks 1 s in 10 cost 22 % of pgbench -S with the triggers kept)
                for trig, text in self.triggers.items():
                    self.instance.write(trig, text if on == "1" else f"!{text}")
                if self.tracer == "function":
                    self.instance.write("current_tracer", "function" if on == "1" else "nop")
                if self.perf is not None:   # CPU samples in the windows only, as the events
                    self.perf.switch(on == "1")
                if on == "0":
                    self.instance.write("set_event_pid", "")
                self._events_on = on == "1"
        except MwinvError as exc:   # the instance is being removed (stop) or the kernel refused
            self._errors.append(f"duty cycle: {exc}")
            return False
        return True

    def _add_event_pid(self, *pids: int) -> None:
        try:
            self.instance.write("set_event_pid", " ".join(map(str, pids)), append=True)
            if self.tracer == "function":   # function-fork follows forks; this the rest, as for the events
                self.instance.write("set_ftrace_pid", " ".join(map(str, pids)), append=True)
        except MwinvError as exc:
            if "No such process" not in str(exc):
                raise

    def _read_cpu(self, instance: Instance, cpu: int, dest: Path) -> None:
        """Move full ring-buffer pages into the CPU's file with splice (through a pipe, no copy into
        Python, up to 16 pages a call), as trace-cmd does; the last, partial pages with read()."""
        src = instance.path / f"per_cpu/cpu{cpu}/trace_pipe_raw"
        page = os.sysconf("SC_PAGE_SIZE")
        try:
            fd = os.open(src, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            self._errors.append(f"{src}: {exc.strerror}")
            return
        pipe_r, pipe_w = os.pipe()
        try:
            with privfile.create(dest) as out:
                draining = False
                while True:
                    moved = self._splice_pages(fd, pipe_r, pipe_w, out.fileno(), 16 * page, src)
                    if moved is None:
                        return
                    if moved:
                        continue
                    if draining:
                        self._read_rest(fd, out, page, src)
                        return
                    if self._stop.wait(self.cfg.poll_interval_s):
                        draining = True   # tracing is off: move what is left, then stop
        except MwinvError as exc:   # a name taken already (a killed capture's file): said, not written over
            self._errors.append(str(exc))
        finally:
            for f in (fd, pipe_r, pipe_w):
                os.close(f)

    def _splice_pages(self, fd: int, pipe_r: int, pipe_w: int, out: int, size: int, src: Path) -> int | None:
        """Bytes moved from the ring buffer to `out` (0: no full page yet; None: an error, recorded)."""
        try:
            n = os.splice(fd, pipe_w, size, flags=os.SPLICE_F_NONBLOCK | os.SPLICE_F_MOVE)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EINTR):
                return 0
            self._errors.append(f"{src}: {exc.strerror}")
            return None
        left = n
        while left:
            left -= os.splice(pipe_r, out, left, flags=os.SPLICE_F_MOVE)
        return n

    def _read_rest(self, fd: int, out, page: int, src: Path) -> None:
        """The pages splice leaves behind (not yet full), one read() each."""
        while True:
            try:
                data = os.read(fd, page)
            except OSError as exc:
                if exc.errno != errno.EAGAIN:
                    self._errors.append(f"{src}: {exc.strerror}")
                return
            if not data:
                return
            out.write(data)

    # ------------------------------------------------------------ stop
    def halt(self) -> None:
        """Tracing off, the readers done and the tracing state restored (idempotent); Ctrl-C and SIGTERM
        wait until it is. The pages stay in the raw files until stop() assembles them."""
        with held():
            if self._halted:
                return
            self._halted = True
            try:
                self._stop_reading()
            finally:
                self._teardown()

    def _stop_reading(self) -> None:
        end = time.monotonic_ns()
        for inst in (self.instance, self.unfiltered):
            if inst and inst.path.exists():
                try:
                    inst.write("tracing_on", "0")
                except MwinvError as exc:
                    self._errors.append(str(exc))
        self._stop.set()
        for t in self._threads:
            t.join(30)
        for w in self.windows:   # the window open when tracing stopped
            w[1] = w[1] or end
        self.windows = [w for w in self.windows if w[0] < w[1]]
        try:
            self._follow()     # processes that started since the last pass
        except Exception as exc:
            self._errors.append(f"following pids: {exc}")

    def stop(self, assemble_trace: bool = True) -> dict:
        """Stop, restore the tracing state, write trace.dat (assemble_trace=False: the raw pages are left
        to the next correlation); returns the recorder's summary."""
        self.halt()
        trace = self.out / "trace.dat"
        if self._reading and assemble_trace:
            assemble(self.out, trace)
        if self.unfiltered is not None and assemble_trace:
            assemble(self.out / "unfiltered", self.out / "unfiltered.dat")
        (self.out / OWNER).unlink(missing_ok=True)
        privfile.write(self.out / "procs.json", json.dumps(self.procs))
        summary = {"trace": str(trace), "instance": self.instance.name if self.instance else None,
                   "events": self.enabled, "skipped": self.skipped, "tracer": self.tracer,
                   "function_tracer": self.function_tracer,
                   "unfiltered": str(self.out / "unfiltered.dat") if self.unfiltered else None,
                   "stacks": self.cfg.stacks, "perf": self.perf is not None, "uprobes": self.uprobes,
                   "pids": sorted(self.procs), "errors": self._errors, "clock": "mono",
                   "duty": self.cfg.duty, "event_budget": self.cfg.event_budget,
                   "duty_changes": self.duty_changes, "windows": self.windows,
                   "off": [w for w in self.off if w[1] is not None]}
        privfile.write(self.out / "recorder.json", json.dumps(summary, indent=2))
        return summary

    def _teardown(self) -> None:
        """Restore everything we changed (idempotent; runs on errors, Ctrl-C and SIGTERM too)."""
        if self.perf is not None:
            perf_mod.stop_perf(self.perf)
        self._stop.set()
        for t in self._threads:
            t.join(5)
        if self.instance is not None:
            try:
                self.instance.write("current_tracer", "nop")
            except MwinvError:
                pass
        for inst in (self.instance, self.unfiltered):
            if inst is None:
                continue
            try:
                inst.remove(list(self.triggers) if inst is self.instance else [])   # the only triggers we set
            except (MwinvError, OSError) as exc:   # what follows (our uprobes) is removed all the same
                self._errors.append(str(exc))
        root = self.instance.root if self.instance else None
        while self.uprobes and root:
            name = self.uprobes.pop()
            try:
                remove_uprobe(root, name)
            except MwinvError as exc:
                self._errors.append(str(exc))

    def __enter__(self) -> "KernelRecorder":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _own(out: Path) -> None:
    (out / OWNER).unlink(missing_ok=True)   # a finished or killed run's
    fd = os.open(out / OWNER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))


def assemble(raw_dir: Path, out: Path) -> Path:
    """Build trace.dat from the cpuN.raw page files and formats.json a recording left in raw_dir."""
    formats = [tuple(x) for x in json.loads((raw_dir / "formats.json").read_text())]
    cpu_files = sorted(raw_dir.glob("cpu*.raw"), key=lambda p: int(p.stem[3:]))
    page = os.sysconf("SC_PAGE_SIZE")
    for p in cpu_files:   # a page cut short by a crash is dropped, whole pages stay
        size = p.stat().st_size
        if size % page:
            os.truncate(p, size - size % page)
    root = tracefs_root()
    try:
        kallsyms = Path("/proc/kallsyms").read_bytes()
        cmdlines = (root / "saved_cmdlines").read_bytes()
    except OSError:
        kallsyms, cmdlines = b"", b""
    headers = {tag: (root / "events" / tag).read_bytes() for tag in ("header_page", "header_event")}
    write_tracedat(out, headers, formats, cpu_files, "[mono]\n", kallsyms, cmdlines,
                   " ".join(os.uname()[:3]), page)
    for p in cpu_files:
        p.unlink()
    return out
