"""Kernel hot spots where the function tracer is not allowed: `perf record -g -e cpu-clock` of the
DBMS's pids on CLOCK_MONOTONIC, converted to `cpu_sample` + `kernel_stack` rows."""

from __future__ import annotations

import ctypes
import os
import re
import select
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from mwinv import privfile
from mwinv.capture.tables import SCHEMAS, Capture
from mwinv.errors import MwinvError
from mwinv.kernel_trace.decode import stack_id_of

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # perf must not outlive a recorder that was killed with -9
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Perf:
    """A running `perf record`; with a control pipe (--control), its sampling switched on and off."""
    proc: subprocess.Popen
    ctl: int | None = None   # our end of perf's control pipe: 'enable' / 'disable'
    ack: int | None = None   # our end of its acknowledgements

    def switch(self, on: bool, timeout_s: float = 2.0) -> None:
        """Sampling on or off, acknowledged by perf (a disabled event takes no samples and costs nothing)."""
        if self.ctl is None:
            raise MwinvError("perf runs without a control pipe: its sampling cannot be switched")
        os.write(self.ctl, b"enable\n" if on else b"disable\n")
        ready, _, _ = select.select([self.ack], [], [], timeout_s)
        if not ready or not os.read(self.ack, 64).startswith(b"ack"):
            raise MwinvError(f"perf did not acknowledge '{'enable' if on else 'disable'}' in {timeout_s:g} s")


def start_perf(out: Path, freq_hz: int = 99, control: bool = False) -> Perf:
    """Sample all CPUs (with `-p`, perf does not follow the backends a postmaster forks later);
    perf_to_capture keeps only the DBMS's pids. control: sampling can be switched off and on
    (Perf.switch; a duty-cycled capture samples in its windows only)."""
    perf = shutil.which("perf")
    if not perf:
        raise MwinvError("perf is not installed (package linux-perf, scripts/deps.sh)")
    cmd = [perf, "record", "-q", "-g", "-e", "cpu-clock", "-F", str(freq_hz), "-k", "CLOCK_MONOTONIC",
           "-a", "-o", str(out)]
    for old in (out, out.with_suffix(".log")):   # an earlier capture's, its samples in cpu_sample already
        old.unlink(missing_ok=True)
    privfile.create(out).close()   # private: perf truncates it and keeps its mode
    log = privfile.create(out.with_suffix(".log"), binary=False)
    theirs: list[int] = []
    ours: list[int | None] = [None, None]
    if control:
        ctl_r, ours[0] = os.pipe()
        ours[1], ack_w = os.pipe()
        cmd += ["--control", f"fd:{ctl_r},{ack_w}"]
        theirs = [ctl_r, ack_w]
    try:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
                                pass_fds=theirs)
    except BaseException:
        for fd in ours:
            if fd is not None:
                os.close(fd)
        raise
    finally:
        for fd in theirs:   # perf's ends, now perf's own
            os.close(fd)
    return Perf(proc, *ours)


def stop_perf(perf: Perf, timeout_s: float = 30) -> None:
    proc = perf.proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for fd in (perf.ctl, perf.ack):
        if fd is not None:
            os.close(fd)
    perf.ctl = perf.ack = None


_HEAD = re.compile(r"^\s*(?P<comm>.*?)\s+(?P<pid>\d+)/(?P<tid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<sec>\d+)\.(?P<frac>\d+):")
_FRAME = re.compile(r"^\s+(?P<addr>[0-9a-f]+)\s+(?P<sym>.*?)\s+\((?P<dso>[^)]*)\)\s*$")


def iter_perf_samples(script_output: Iterator[str]) -> Iterator[tuple[int, int, int, list[str], bool]]:
    """(ts_ns, cpu, tid, kernel frames, in kernel) per sample of `perf script` text."""
    head = None
    frames: list[str] = []
    in_kernel = False
    for line in script_output:
        m = _HEAD.match(line)
        if m:
            if head:
                yield (*head, frames, in_kernel)
            head = (int(m["sec"]) * 1_000_000_000 + int(m["frac"].ljust(9, "0")[:9]), int(m["cpu"]), int(m["tid"]))
            frames, in_kernel = [], False
            continue
        f = _FRAME.match(line)
        if f and head:
            is_kernel = f["dso"].startswith("[kernel")
            if not frames and is_kernel:
                in_kernel = True
            if is_kernel:
                frames.append(f["sym"].split("+0x")[0])
    if head:
        yield (*head, frames, in_kernel)


def perf_to_capture(perf_data: Path, capture: Capture, node: str, pids: set[int]) -> int:
    """Convert the samples of `pids` in perf.data into cpu_sample and kernel_stack parts; returns
    the number of samples kept."""
    if not perf_data.exists() or perf_data.stat().st_size == 0:
        return 0
    proc = subprocess.Popen(["perf", "script", "-i", str(perf_data), "-F", "comm,pid,tid,cpu,time,ip,sym,dso",
                             "--ns"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    samples = {k: [] for k in SCHEMAS["cpu_sample"].names}
    stacks: dict[int, list[str]] = {}
    for ts, cpu, tid, frames, in_kernel in iter_perf_samples(proc.stdout):
        if tid not in pids:
            continue
        sid = None
        if frames:
            sid = stack_id_of("\n".join(frames).encode())
            stacks.setdefault(sid, frames)
        for k, v in (("node", node), ("ts_ns", ts), ("cpu", cpu), ("pid", tid), ("stack_id", sid), ("kernel", in_kernel)):
            samples[k].append(v)
    proc.wait()
    if samples["ts_ns"]:
        capture.write_part("cpu_sample", pa.Table.from_pydict(samples, schema=SCHEMAS["cpu_sample"]), node=node)
    if stacks:
        capture.write_part("kernel_stack", pa.Table.from_pydict(
            {"node": [node] * len(stacks), "stack_id": list(stacks), "frames": list(stacks.values())},
            schema=SCHEMAS["kernel_stack"]), node=node)
    return len(samples["ts_ns"])


def perf_available() -> bool:
    return shutil.which("perf") is not None and os.geteuid() == 0
