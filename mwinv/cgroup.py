"""cgroup v1 limits for a server's processes: memory (keeps the storage-hierarchy balance of a big
database at small scale), CPU quota and block I/O throttles (what-if checks)."""

from __future__ import annotations

import errno
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from mwinv.errors import MwinvError

CGROUP_V1_ROOT = Path("/sys/fs/cgroup")


def block_device_of(path: str | os.PathLike) -> str:
    """'major:minor' of the whole disk holding path (blkio throttles need the disk, not a partition)."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    sys_dev = Path(f"/sys/dev/block/{major}:{minor}")
    if (sys_dev / "partition").exists():
        parent = (sys_dev.resolve().parent / "dev").read_text().strip()
        return parent
    return f"{major}:{minor}"


# tries of a memory cap the kernel refuses as busy, each after the dirty pages were written back
MEMORY_CAP_TRIES = 5


@dataclass
class Cgroup:
    name: str
    memory_bytes: int | None = None
    cpu_fraction: float | None = None  # 0.5 = half of one CPU
    read_bps: dict[str, int] | None = None  # device 'maj:min' -> bytes/s
    write_bps: dict[str, int] | None = None
    read_iops: dict[str, int] | None = None  # device 'maj:min' -> read requests/s (a slow random-access disk)
    uncapped: tuple[str, ...] = ()  # controllers joined without a limit yet (set later: limit_*)

    def __post_init__(self) -> None:
        self.name = f"{self.name}-{uuid.uuid4().hex[:8]}"
        self._created: list[Path] = []

    def controllers(self) -> list[str]:
        c = []
        if self.memory_bytes is not None:
            c.append("memory")
        if self.cpu_fraction is not None:
            c.append("cpu")
        if self.read_bps or self.write_bps or self.read_iops:
            c.append("blkio")
        return c + [u for u in self.uncapped if u not in c]

    def path(self, controller: str) -> Path:
        return CGROUP_V1_ROOT / controller / "mwinv" / self.name

    def create(self) -> "Cgroup":
        for ctl in self.controllers():
            root = CGROUP_V1_ROOT / ctl
            if not (root / "tasks").exists():
                raise MwinvError(f"cgroup v1 controller {ctl!r} is not mounted at {root}")
            p = self.path(ctl)
            try:
                p.mkdir(parents=True, exist_ok=True)
            except PermissionError:
                raise MwinvError(f"no permission to create cgroup {p} (run as root)") from None
            self._created.append(p)
        if self.memory_bytes is not None:
            self._write("memory", "memory.limit_in_bytes", str(self.memory_bytes))
        if self.cpu_fraction is not None:
            period = 100_000
            self._write("cpu", "cpu.cfs_period_us", str(period))
            self._write("cpu", "cpu.cfs_quota_us", str(max(1000, int(period * self.cpu_fraction))))
        for dev, bps in (self.read_bps or {}).items():
            self._write("blkio", "blkio.throttle.read_bps_device", f"{dev} {bps}")
        for dev, bps in (self.write_bps or {}).items():
            self._write("blkio", "blkio.throttle.write_bps_device", f"{dev} {bps}")
        for dev, iops in (self.read_iops or {}).items():
            self._write("blkio", "blkio.throttle.read_iops_device", f"{dev} {iops}")
        return self

    def _write(self, ctl: str, file: str, value: str) -> None:
        target = self.path(ctl) / file
        try:
            target.write_text(value)
        except OSError as exc:
            raise MwinvError(f"cannot write {value!r} to {target}: {exc.strerror}") from None

    def limit_memory(self, memory_bytes: int) -> None:
        """Set (or change) the memory cap of a group made with a memory controller (memory_bytes=-1: none
        yet): the kernel reclaims page cache down to it; a cap below what the processes hold fails.
        The kernel gives up (EBUSY) after one reclaim pass that frees nothing; what was busy then may be
        free a moment later (a 160 MB cap right after a TPC-H SF 0.1 load failed once in CI), so the
        cap is tried again, after writing back dirty pages, before it is refused."""
        self.memory_bytes = memory_bytes
        target = self.path("memory") / "memory.limit_in_bytes"
        for attempt in range(MEMORY_CAP_TRIES):
            try:
                target.write_text(str(memory_bytes))
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise MwinvError(f"cannot write {memory_bytes!r} to {target}: {exc.strerror}") from None
            os.sync()
            time.sleep(0.1 * attempt)
        held = int((self.path("memory") / "memory.usage_in_bytes").read_text())
        raise MwinvError(f"cannot cap {self.path('memory')} at {memory_bytes >> 20} MiB: its processes hold "
                         f"{held >> 20} MiB that the kernel cannot reclaim (raise the cap)")

    def limit_cpu(self, fraction: float | None) -> None:
        """Set (or change, or lift with None) the CPU quota of a group made with a cpu controller."""
        self.cpu_fraction = fraction
        period = 100_000
        self._write("cpu", "cpu.cfs_period_us", str(period))
        self._write("cpu", "cpu.cfs_quota_us", str(max(1000, int(period * fraction))) if fraction else "-1")

    def limit_read(self, dev: str, bps: int | None) -> None:
        """Set (or change, or lift with None) the read rate on one device of a group with blkio."""
        self.read_bps = {**(self.read_bps or {}), dev: bps} if bps else {k: v for k, v in (self.read_bps or {}).items()
                                                                          if k != dev}
        self._write("blkio", "blkio.throttle.read_bps_device", f"{dev} {bps or 0}")   # 0 removes the rule

    def limits(self) -> dict:
        """The limits as the kernel holds them (what a run really had): CPUs, memory bytes, read bytes/s per
        device; None where there is none."""
        out: dict = {}
        ctl = self.controllers()
        if "cpu" in ctl:
            quota = int((self.path("cpu") / "cpu.cfs_quota_us").read_text())
            period = int((self.path("cpu") / "cpu.cfs_period_us").read_text())
            out["cpu"] = quota / period if quota > 0 else None
        if "memory" in ctl:
            mem = int((self.path("memory") / "memory.limit_in_bytes").read_text())
            out["memory_bytes"] = mem if mem < 2**62 else None
        if "blkio" in ctl:
            rules = (self.path("blkio") / "blkio.throttle.read_bps_device").read_text().split("\n")
            out["read_bps"] = {dev: int(bps) for dev, bps in (r.split() for r in rules if r.strip())} or None
        return out

    def exec_prefix(self) -> list[str]:
        """argv prefix that moves the shell into this cgroup, then execs the rest."""
        if not self._created:
            self.create()
        joins = " && ".join(f"echo $$ > {p}/cgroup.procs" for p in self._created)
        return ["sh", "-c", f'{joins} && exec "$@"', "mwinv-cgexec"]

    def add_pid(self, pid: int) -> None:
        for p in self._created:
            (p / "cgroup.procs").write_text(str(pid))

    def release_pid(self, pid: int) -> None:
        """Move pid back to the root group of each controller (to run it alternately capped and not)."""
        for ctl in self.controllers():
            (CGROUP_V1_ROOT / ctl / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        for p in self._created:
            remove_group(p)
        self._created = []


def remove_group(path: Path) -> str | None:
    """rmdir a cgroup, retrying for 2 s while its processes are still exiting: None once it is gone, else
    why it is left (the processes still in it)."""
    for _ in range(20):
        try:
            path.rmdir()
            return None
        except FileNotFoundError:
            return None
        except OSError as exc:
            error = exc.strerror
            time.sleep(0.1)
    try:
        pids = (path / "cgroup.procs").read_text().split()
    except OSError:
        pids = []
    if not pids:
        return error
    names = []
    for pid in pids[:3]:
        try:
            names.append(f"{Path(f'/proc/{pid}/comm').read_text().strip()} {pid}")
        except OSError:
            names.append(pid)
    more = f" and {len(pids) - 3} more" if len(pids) > 3 else ""
    return f"{len(pids)} process{'es' if len(pids) > 1 else ''} still in it ({', '.join(names)}{more})"


def remove_group_said(path: Path) -> str:
    """Remove the cgroup at path (there now): the line that says so, or that it is left and why."""
    why = remove_group(path)
    return f"cgroup {path} is left: {why}" if why else f"cgroup {path}"


def drop_page_cache() -> None:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except PermissionError:
        raise MwinvError("no permission to drop the page cache (/proc/sys/vm/drop_caches): run as root") from None
    except OSError as exc:
        raise MwinvError(f"cannot drop the page cache: {exc.strerror}") from None
