"""mwinv-sample: per-node and per-DBMS-pid counters from /proc at a fixed interval.

`node_sample` rows of one interval (ts_ns = end of the interval, CLOCK_MONOTONIC):
- `disk` and `net_iface` null: the node's CPU time split (user+nice, system+irq+softirq, iowait, idle);
- `disk` set: that disk's bytes and requests; `seq_reqs`/`nonseq_reqs` with `seq_source`
  'diskstats_merges' (requests merged into a neighbour = sequential, dispatched requests =
  non-sequential; no stride) — or, from a kernel trace, 'block_events' (a request starting where
  the previous one of the disk ended is sequential; avg_stride_sectors = mean jump), see
  `block_sequentiality`;
- `net_iface` set: that interface's bytes and packets.
`process_sample`: utime/stime (/proc/pid/stat), read/write bytes (/proc/pid/io), on-CPU and
run-queue wait time (/proc/pid/schedstat) of every DBMS pid, as deltas over the interval (a pid that
appears during the capture counts from its start).
`tcp_sample`: each TCP connection of a DBMS pid as the kernel accounts it (sock_diag, as `ss -ti`):
round trips (the least it measured, the smoothed one) and cumulative bytes and segments; `accepted`
where the local port is one the host listens on (the server's side of a client's connection). In
the sampler's own network namespace only."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mwinv.capture.columns import empty_table, table_from_rows
from mwinv.capture.tables import SCHEMAS, Capture
from mwinv.kernel_trace.tcp import socket_inodes, sockets

TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
MIN_INTERVAL_S = 0.01
INODES_S = 10.0


def read_cpu() -> tuple[int, int, int, int]:
    """(user, system, iowait, idle) ns of the whole node since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq = v[:7]
    return ((user + nice) * TICK_NS, (system + irq + softirq) * TICK_NS, iowait * TICK_NS, idle * TICK_NS)


def whole_disks() -> set[str]:
    """Disks, not partitions or loop/ram devices."""
    out = set()
    for d in Path("/sys/block").iterdir():
        if not d.name.startswith(("loop", "ram", "zram")):
            out.add(d.name)
    return out


def disk_names_by_dev() -> dict[str, str]:
    """'major,minor' -> device name (block events name devices by number)."""
    out = {}
    for d in Path("/sys/class/block").iterdir():
        try:
            out[(d / "dev").read_text().strip().replace(":", ",")] = d.name
        except OSError:
            continue
    return out


def read_disks(disks: set[str]) -> dict[str, tuple[int, ...]]:
    """name -> (read reqs, read merges, read bytes, write reqs, write merges, write bytes)."""
    out = {}
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if p[2] in disks:
                out[p[2]] = (int(p[3]), int(p[4]), int(p[5]) * 512, int(p[7]), int(p[8]), int(p[9]) * 512)
    return out


def read_net(net_pid: int | None = None) -> dict[str, tuple[int, int, int, int]]:
    """iface -> (rx bytes, rx packets, tx bytes, tx packets), of this process's network namespace or of
    net_pid's (a cluster node's namespace)."""
    out = {}
    with open(f"/proc/{net_pid}/net/dev" if net_pid else "/proc/net/dev") as f:
        for line in f.readlines()[2:]:
            name, _, rest = line.partition(":")
            v = rest.split()
            out[name.strip()] = (int(v[0]), int(v[1]), int(v[8]), int(v[9]))
    return out


def read_pid(pid: int) -> tuple[int, int, int, int, int, int] | None:
    """(utime ns, stime ns, read bytes, write bytes, run ns, run-queue wait ns) of a live pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()
        rb = wb = 0
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    rb = int(line.split()[1])
                elif line.startswith("write_bytes:"):
                    wb = int(line.split()[1])
        with open(f"/proc/{pid}/schedstat") as f:
            run, wait, _ = f.read().split()
    except (OSError, ValueError, IndexError):
        return None
    return (int(st[11]) * TICK_NS, int(st[12]) * TICK_NS, rb, wb, int(run), int(wait))


@dataclass
class SamplerStats:
    samples: int = 0
    cpu_s: float = 0.0         # the sampler thread's own CPU time
    wall_s: float = 0.0

    @property
    def cpu_share(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s else 0.0


class Sampler:
    """A thread sampling every `interval_s` into `capture` (parts flushed every `flush_s`)."""

    def __init__(self, capture: Capture, node: str, pids: Callable[[], list[int]] | None = None,
                 interval_s: float = 1.0, flush_s: float = 10.0, pid_refresh_s: float = 1.0,
                 net_pid: int | None = None):
        if interval_s < MIN_INTERVAL_S:
            raise ValueError(f"interval {interval_s} s is below the minimum {MIN_INTERVAL_S} s")
        self.capture, self.node, self.pids_fn = capture, node, pids
        self.interval_ns = int(interval_s * 1e9)
        self.flush_s, self.pid_refresh_s = flush_s, pid_refresh_s
        self.net_pid = net_pid
        self.stats = SamplerStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._node_rows: list[dict] = []
        self._proc_rows: list[dict] = []
        self._tcp_rows: list[dict] = []
        self._inodes: dict[int, tuple[set[int], float]] = {}   # pid: its sockets' inodes, when read
        self.error: BaseException | None = None

    def start(self) -> "Sampler":
        self._thread = threading.Thread(target=self._run, name="mwinv-sample", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> SamplerStats:
        self._stop.set()
        if self._thread:
            self._thread.join(30)
        self._flush()
        if self.error:
            raise self.error
        return self.stats

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:   # surfaced by stop()
            self.error = exc

    def _loop(self) -> None:
        cpu0, wall0 = time.thread_time(), time.monotonic()
        disks = whole_disks()
        pids: list[int] = self.pids_fn() if self.pids_fn else []
        pids_at = time.monotonic()
        prev_t = time.monotonic_ns()
        prev_cpu, prev_disk, prev_net = read_cpu(), read_disks(disks), read_net(self.net_pid)
        prev_pid = {p: v for p in pids if (v := read_pid(p))}
        last_flush = time.monotonic()
        next_t = prev_t + self.interval_ns
        while not self._stop.wait(max(0, next_t - time.monotonic_ns()) / 1e9):
            now = time.monotonic_ns()
            next_t += self.interval_ns
            if next_t < now:   # fell behind (a loaded machine): skip rather than burst
                next_t = now + self.interval_ns
            dt = now - prev_t
            cpu, disk, net = read_cpu(), read_disks(disks), read_net(self.net_pid)
            base = {"node": self.node, "ts_ns": now, "interval_ns": dt}
            d = [a - b for a, b in zip(cpu, prev_cpu)]
            self._node_rows.append({**base, "cpu_user_ns": d[0], "cpu_sys_ns": d[1], "cpu_iowait_ns": d[2],
                                    "cpu_idle_ns": d[3]})
            for name, v in disk.items():
                p = prev_disk.get(name, v)
                rr, rm, rb, wr, wm, wb = (a - b for a, b in zip(v, p))
                self._node_rows.append({**base, "disk": name, "read_bytes": rb, "write_bytes": wb,
                                        "read_reqs": rr, "write_reqs": wr, "seq_reqs": rm + wm,
                                        "nonseq_reqs": rr + wr, "seq_source": "diskstats_merges"})
            for name, v in net.items():
                p = prev_net.get(name, v)
                rxb, rxp, txb, txp = (a - b for a, b in zip(v, p))
                self._node_rows.append({**base, "net_iface": name, "net_rx_bytes": rxb, "net_rx_packets": rxp,
                                        "net_tx_bytes": txb, "net_tx_packets": txp})
            if self.pids_fn and time.monotonic() - pids_at >= self.pid_refresh_s:
                pids, pids_at = self.pids_fn(), time.monotonic()
            cur_pid = {}
            for pid in pids:
                v = read_pid(pid)
                if v is None:
                    continue
                cur_pid[pid] = v
                p = prev_pid.get(pid, (0,) * 6)   # new during the capture: counts from its start
                ut, stime, rb, wb, run, wait = (a - b for a, b in zip(v, p))
                self._proc_rows.append({"node": self.node, "pid": pid, "ts_ns": now, "interval_ns": dt,
                                        "utime_ns": ut, "stime_ns": stime, "read_bytes": rb, "write_bytes": wb,
                                        "run_ns": run, "runqueue_wait_ns": wait})
            if self.net_pid is None and cur_pid:
                self._sample_tcp(now, cur_pid)
            prev_t, prev_cpu, prev_disk, prev_net, prev_pid = now, cpu, disk, net, cur_pid
            self.stats.samples += 1
            if time.monotonic() - last_flush >= self.flush_s:
                self._flush()
                last_flush = time.monotonic()
            self.stats.cpu_s = time.thread_time() - cpu0
            self.stats.wall_s = time.monotonic() - wall0
        self.stats.cpu_s = time.thread_time() - cpu0
        self.stats.wall_s = time.monotonic() - wall0

    def _sample_tcp(self, now: int, pids) -> None:
        # a pid's sockets read again every INODES_S only (a backend keeps its client's for its life):
        # /proc/<pid>/fd of 50 pids took 1 ms, sock_diag's dump 0.3 ms
        t = time.monotonic()
        for pid in pids:
            if pid not in self._inodes or t - self._inodes[pid][1] >= INODES_S:
                self._inodes[pid] = (socket_inodes(pid), t)
        self._inodes = {pid: v for pid, v in self._inodes.items() if pid in pids}
        if not any(v[0] for v in self._inodes.values()):
            return
        try:
            socks = sockets()
        except OSError:   # sock_diag refused (a kernel without it): no tcp_sample
            return
        listening = {s.local_port for s in socks.values() if s.listening}
        for pid in pids:
            for inode in self._inodes[pid][0]:
                s = socks.get(inode)
                if s is None or s.listening:
                    continue
                self._tcp_rows.append({
                    "node": self.node, "pid": pid, "ts_ns": now, "local": s.local, "peer": s.peer,
                    "accepted": s.local_port in listening, "srtt_ns": s.srtt_ns, "rttvar_ns": s.rttvar_ns,
                    "min_rtt_ns": s.min_rtt_ns, "bytes_acked": s.bytes_acked, "bytes_received": s.bytes_received,
                    "segs_out": s.segs_out, "segs_in": s.segs_in, "retrans": s.retrans})

    def _flush(self) -> None:
        if self._node_rows:
            self.capture.write_part("node_sample", self._node_rows, node=self.node)
            self._node_rows = []
        if self._proc_rows:
            self.capture.write_part("process_sample", self._proc_rows, node=self.node)
            self._proc_rows = []
        if self._tcp_rows:
            self.capture.write_part("tcp_sample", self._tcp_rows, node=self.node)
            self._tcp_rows = []


def block_sequentiality(kernel_event: pa.Table, node: str, interval_ns: int) -> pa.Table:
    """node_sample rows (seq_source 'block_events') from block_rq_issue events: per disk and
    interval, requests that start where the previous request of the disk ended are sequential;
    avg_stride_sectors is the mean absolute jump between consecutive requests."""
    ev = kernel_event.filter(pc.equal(kernel_event["event"], "block_rq_issue"))
    if ev.num_rows == 0:
        return empty_table(SCHEMAS["node_sample"])
    names = disk_names_by_dev()
    rows = []
    devs = ev["dev"].to_numpy(zero_copy_only=False)
    for dev in np.unique(devs.astype(str)):
        sel = devs == dev
        ts = ev["ts_ns"].to_numpy()[sel]
        order = np.argsort(ts, kind="stable")
        ts = ts[order]
        sector = ev["sector"].to_numpy(zero_copy_only=False)[sel][order].astype(np.int64)
        nbytes = ev["nr_bytes"].to_numpy(zero_copy_only=False)[sel][order].astype(np.int64)
        rwbs = ev["rwbs"].to_numpy(zero_copy_only=False)[sel][order].astype(str)
        prev_end = np.roll(sector + nbytes // 512, 1)
        stride = np.abs(sector - prev_end)
        seq = stride == 0
        seq[0], stride[0] = False, 0
        is_read = np.char.find(rwbs, "R") >= 0
        is_write = np.char.find(rwbs, "W") >= 0
        bins = ts // interval_ns
        for b in np.unique(bins):
            m = bins == b
            rows.append({"node": node, "ts_ns": int((b + 1) * interval_ns), "interval_ns": interval_ns,
                         "disk": names.get(dev, dev), "read_reqs": int(is_read[m].sum()),
                         "write_reqs": int(is_write[m].sum()),
                         "read_bytes": int(nbytes[m & is_read].sum()), "write_bytes": int(nbytes[m & is_write].sum()),
                         "seq_reqs": int(seq[m].sum()), "nonseq_reqs": int((~seq[m]).sum()),
                         "avg_stride_sectors": float(stride[m].mean()), "seq_source": "block_events"})
    return table_from_rows(rows, SCHEMAS["node_sample"])
