"""Kernel settings an experiment varies (docs/experiments.md#kernel-settings): a whitelist of knobs by
name, each written, read back and compared, and restored after the cell, after a failure and after
SIGTERM. Before the first write the old values go into a record in mwinv's private directory
(serverdir.settings_dir()), so `mwinv clean` restores them after a kill -9; it re-resolves the knobs
by name through the whitelist, never writes to a path a file names.

    with KernelSettings({"vm.dirty_background_ratio": 5}).apply() as ks:
        ks.in_force()   # {"vm.dirty_background_ratio": {"path": ..., "value": "5", "before": "10", ...}}

Names: sysctls as `sysctl` writes them (vm.dirty_ratio), thp.<file> (/sys/kernel/mm/transparent_hugepage),
block.<attribute> (the queue of the disk holding mwinv's servers) or block.<dev>.<attribute>, and
sched.<file> (the scheduler's debugfs tunables, where debugfs is mounted: mwinv does not mount it).
On a one-host cluster every knob here applies to every node: the sysctls, THP and sched tunables are
the host's, and the nodes' data directories share one disk."""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from mwinv import serverdir
from mwinv.errors import MwinvError
from mwinv.signals import held

SYSCTLS = frozenset({
    "vm.dirty_ratio", "vm.dirty_background_ratio", "vm.dirty_bytes", "vm.dirty_background_bytes",
    "vm.dirty_expire_centisecs", "vm.dirty_writeback_centisecs", "vm.swappiness", "vm.vfs_cache_pressure",
    "vm.compaction_proactiveness", "vm.nr_hugepages", "vm.zone_reclaim_mode", "kernel.numa_balancing",
    "kernel.sched_autogroup_enabled", "kernel.sched_migration_cost_ns", "kernel.sched_cfs_bandwidth_slice_us",
})
THP = frozenset({"enabled", "defrag", "shmem_enabled", "khugepaged/defrag", "khugepaged/scan_sleep_millisecs"})
BLOCK = frozenset({"read_ahead_kb", "nr_requests", "scheduler", "nomerges", "rq_affinity", "max_sectors_kb"})
SCHED = frozenset({"migration_cost_ns", "nr_migrate", "base_slice_ns", "latency_ns", "min_granularity_ns",
                   "wakeup_granularity_ns", "tunable_scaling", "numa_balancing/scan_delay_ms",
                   "numa_balancing/scan_period_min_ms", "numa_balancing/scan_period_max_ms"})
DEBUGFS_SCHED = Path("/sys/kernel/debug/sched")
# writing one of a pair zeroes the other (the kernel keeps one limit): restoring a 0 restores the partner
PARTNER = {"vm.dirty_bytes": "vm.dirty_ratio", "vm.dirty_ratio": "vm.dirty_bytes",
           "vm.dirty_background_bytes": "vm.dirty_background_ratio",
           "vm.dirty_background_ratio": "vm.dirty_background_bytes"}
VALUE_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
DEV_RE = re.compile(r"[a-z][a-z0-9]{0,31}")
HOST = "host (every node of this one-host cluster)"


@dataclass(frozen=True)
class Knob:
    name: str
    path: Path
    scope: str


def knob_names() -> str:
    return ("sysctl names (" + ", ".join(sorted(SYSCTLS)) + "), thp.<" + "|".join(sorted(THP)) + ">, block.[<dev>.]<"
            + "|".join(sorted(BLOCK)) + ">, sched.<" + "|".join(sorted(SCHED)) + ">")


def _data_disk() -> str:
    """The disk holding mwinv's servers (every node's data directory)."""
    dev = os.stat(serverdir.servers_dir()).st_dev
    sys_dev = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").resolve()
    return (sys_dev.parent if (sys_dev / "partition").exists() else sys_dev).name


def locate(name: str, dev: str | None = None) -> Knob:
    """The whitelisted knob `name` (a block attribute without a device: of `dev`, else the data disk);
    an unknown name is a one-line error. Its file is not checked: knob() does."""
    kind, _, rest = name.partition(".")
    if name in SYSCTLS:
        return Knob(name, Path("/proc/sys") / name.replace(".", "/"), HOST)
    if kind == "thp" and rest in THP:
        return Knob(name, Path("/sys/kernel/mm/transparent_hugepage") / rest, HOST)
    if kind == "sched" and rest in SCHED:
        return Knob(name, DEBUGFS_SCHED / rest, HOST)
    if kind == "block" and (rest in BLOCK or rest.partition(".")[2] in BLOCK):
        dev, attr = rest.split(".") if "." in rest else (dev or _data_disk(), rest)
        if not DEV_RE.fullmatch(dev):
            raise MwinvError(f"{name}: {dev!r} is not a block device's name")
        return Knob(name, Path(f"/sys/block/{dev}/queue/{attr}"), f"device {dev} (every node's data directory is on it)")
    raise MwinvError(f"{name}: not a kernel setting mwinv knows (one of {knob_names()})")


def knob(name: str) -> Knob:
    """The whitelisted knob `name`, its file checked to exist; else a one-line error saying why."""
    k = locate(name)
    if k.path.is_relative_to(DEBUGFS_SCHED) and not DEBUGFS_SCHED.is_dir():
        raise MwinvError(f"{name}: debugfs is not mounted at /sys/kernel/debug (mwinv does not mount it)")
    if k.path.parts[:3] == ("/", "sys", "block") and not k.path.parents[1].is_dir():
        raise MwinvError(f"{name}: no block device {k.path.parts[3]!r} (/sys/block)")
    if not k.path.exists():
        raise MwinvError(f"{name}: {k.path} is absent on this kernel")
    return k


def read(path: Path) -> str:
    """A knob's value; of sysfs choices ("always [madvise] never") the chosen one."""
    text = path.read_text().strip()
    chosen = re.search(r"\[([^]]+)\]", text)
    return chosen.group(1) if chosen else " ".join(text.split())


def _write(name: str, path: Path, value: str) -> None:
    try:   # files of /proc/sys and /sys: root's, made by the kernel (nothing a user could plant)
        path.write_text(value)
    except OSError as exc:
        raise MwinvError(f"{name} = {value}: the kernel refuses it ({exc.strerror})") from None


def flatten(level: dict, prefix: str = "") -> dict:
    """A plan's level as knob names: TOML reads {vm.dirty_ratio = 5} as {"vm": {"dirty_ratio": 5}}."""
    out = {}
    for k, v in level.items():
        out.update(flatten(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def settings_text(settings: dict) -> str:
    """A level as its results and labels show it: "vm.dirty_ratio=5,block.read_ahead_kb=4096", or "default"."""
    return ",".join(f"{k}={v}" for k, v in settings.items()) or "default"


def value_text(value, name: str = "") -> str:
    """A level's value as written to the kernel: an integer, or a word (madvise, mq-deadline)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not VALUE_RE.fullmatch(str(value)):
        raise MwinvError(f"{name} = {value!r}: not a kernel setting's value (an integer or a word)")
    return str(value)


class KernelSettings:
    """Settings applied together (one cell's), restored together."""

    def __init__(self, settings: dict):
        self.settings = {name: value_text(v, name) for name, v in settings.items()}
        self.knobs = [knob(name) for name in self.settings]
        self.applied: list[dict] = []
        self.record: Path | None = None

    def apply(self) -> "KernelSettings":
        """Read each knob's value, record it, write the new one and read it back; a refused value or one
        the kernel holds otherwise (read_ahead_kb rounds to pages) restores what was written and raises."""
        if not self.knobs:
            return self
        with _settings_lock() as where:
            olds = []
            for k in self.knobs:
                partner = knob(PARTNER[k.name]) if k.name in PARTNER else None
                olds.append({"knob": k.name, "paths": [str(k.path)] + ([str(partner.path)] if partner else []),
                             "before": read(k.path), "partner_before": read(partner.path) if partner else None})
            _refuse_if_held({p for o in olds for p in o["paths"]}, where)
            self.record = where / f"{os.getpid()}-{secrets.token_hex(4)}.json"
            serverdir.write_record(self.record, {"owner": serverdir.owner_stamp(), "settings": olds}, exclusive=True)
        try:
            for k, old in zip(self.knobs, olds):
                value = self.settings[k.name]
                self.applied.append({**old, "path": str(k.path), "scope": k.scope, "value": value})
                _write(k.name, k.path, value)
                got = read(k.path)
                self.applied[-1]["read_back"] = got
                if got != value:
                    raise MwinvError(f"{k.name} = {value}: the kernel holds {got} instead")
        except BaseException:
            self.restore()
            raise
        return self

    def in_force(self) -> dict:
        """Per knob as the manifest records it: its path, the value read back, the value before, its scope."""
        return {a["knob"]: {"path": a["path"], "value": a["read_back"], "before": a["before"], "scope": a["scope"]}
                for a in self.applied if "read_back" in a}

    def restore(self) -> None:
        """The old values back, last written first (SIGINT and SIGTERM wait until they are)."""
        with held():
            _, failed = _restore(self.applied[::-1])
            self.applied = []
            if self.record is not None and not failed:   # else kept: `mwinv clean` tries again
                self.record.unlink(missing_ok=True)
            self.record = None

    def __enter__(self) -> "KernelSettings":
        return self

    def __exit__(self, *exc) -> None:
        self.restore()


class _settings_lock:
    """The settings directory, locked while a run reads its knobs' old values and records them: two
    runs setting one knob would each restore what the other wrote."""

    def __enter__(self) -> Path:
        self.dir = serverdir.settings_dir()
        self.fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self.dir

    def __exit__(self, *exc) -> None:
        os.close(self.fd)


def _records(where: Path):
    """(path, contents) of each readable record of old values in the settings directory."""
    for rec in sorted(where.glob("*.json")):
        try:
            data = json.loads(rec.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            yield rec, data


def _refuse_if_held(paths: set[str], where: Path) -> None:
    """A one-line error if a live run's record holds one of these knobs (by path)."""
    for rec, data in _records(where):
        if not serverdir.owner_alive(data.get("owner")):
            continue
        for old in data.get("settings", []):
            held_paths = old.get("paths") if isinstance(old, dict) else None
            if isinstance(held_paths, list) and paths & set(held_paths):
                raise MwinvError(f"kernel setting {old.get('knob')} is set by another mwinv run "
                                 f"(pid {data['owner']['pid']}, {rec}); run one at a time")


def _restore(olds: list[dict]) -> tuple[list[str], list[str]]:
    """Write each knob's old value (by name, through the whitelist); a 0 of a pair's limit is the partner's
    old value written instead. Returns what was restored and what could not be."""
    done, failed = [], []
    for old in olds:
        name, before = old["knob"], old["before"]
        try:
            if before == "0" and old.get("partner_before") not in (None, "0"):
                name, before = PARTNER[name], old["partner_before"]
            _write(name, knob(name).path, value_text(before, name))
            done.append(f"kernel setting {name} = {before} restored")
        except MwinvError as exc:
            failed.append(f"kernel setting {name}: not restored ({exc})")
    return done, failed


def check(levels: list[dict], where: str) -> None:
    """Every (knob, value) of a plan's levels known, writable and held by the kernel as written: each
    written, read back and restored at once. A one-line error naming `where` otherwise."""
    seen = set()
    for level in levels:
        for name, value in level.items():
            if (name, str(value)) in seen:
                continue
            seen.add((name, str(value)))
            try:
                KernelSettings({name: value}).apply().restore()
            except MwinvError as exc:
                raise MwinvError(f"{where}: {exc}") from None


def clean_stale() -> list[str]:
    """Restore the settings of runs that died without restoring them (kill -9): their records' owners
    are gone. Returns what was restored."""
    out = []
    for rec, data in _records(serverdir.settings_dir()):
        if serverdir.owner_alive(data.get("owner")):
            continue
        olds = [o for o in data.get("settings", []) if isinstance(o, dict) and isinstance(o.get("knob"), str)
                and isinstance(o.get("before"), str)]
        done, failed = _restore(olds[::-1])
        out += done + failed
        rec.unlink(missing_ok=True)
    return out
