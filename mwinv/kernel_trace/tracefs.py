"""tracefs access: our own trace instances (`mwinv-<pid>-<rand>`), uprobes in group `mwinv_<pid>_<n>`,
and the clean-up of what a killed run left behind. The top-level tracing state is never written
(uprobe_events is the one shared file, and only our own lines are added/removed, with `>>`/`-:`)."""

from __future__ import annotations

import errno
import itertools
import os
import re
import secrets
import time
from pathlib import Path

from mwinv.errors import MwinvError

TRACEFS_CANDIDATES = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
INSTANCE_RE = re.compile(r"^mwinv-(\d+)-[0-9a-f]+$")
UPROBE_GROUP_RE = re.compile(r"^mwinv_(\d+)(?:_\d+)?$")


def tracefs_root() -> Path:
    for root in TRACEFS_CANDIDATES:
        if (root / "instances").is_dir():
            if not os.access(root / "instances", os.W_OK):
                raise MwinvError(f"{root}: kernel tracing needs root (tracefs is not writable)")
            return root
    raise MwinvError(f"{TRACEFS_CANDIDATES[0]}: tracefs is not mounted "
                     "(as root: mount -t tracefs nodev /sys/kernel/tracing)")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is dead for our purpose (PID 1 here reaps orphans only after a few seconds)
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class TracefsError(MwinvError):
    """A tracefs file refused a write: the kernel's errno kept (EPERM, EINVAL tell different things)."""

    def __init__(self, message: str, errno_: int):
        super().__init__(message)
        self.errno = errno_


def write(path: Path, value: str, append: bool = False) -> None:
    """Write a tracefs file; the error names the file and the kernel's reason."""
    try:
        fd = os.open(path, os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC))
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise TracefsError(f"{path}: cannot write {value.strip()!r}: {exc.strerror}", exc.errno) from None


class Instance:
    """One trace instance of ours. Everything it holds goes away with remove()."""

    def __init__(self, root: Path, name: str):
        self.root, self.name = root, name
        self.path = root / "instances" / name

    @classmethod
    def create(cls, root: Path | None = None) -> "Instance":
        root = root or tracefs_root()
        inst = cls(root, f"mwinv-{os.getpid()}-{secrets.token_hex(3)}")
        try:
            inst.path.mkdir()
        except OSError as exc:
            raise MwinvError(f"{inst.path}: cannot create trace instance: {exc.strerror}") from None
        return inst

    def write(self, rel: str, value: str, append: bool = False) -> None:
        write(self.path / rel, value, append)

    def read(self, rel: str) -> str:
        return (self.path / rel).read_text()

    def has_event(self, event: str) -> bool:
        return (self.path / "events" / event.replace(":", "/") / "enable").exists()

    def remove(self, triggers: list[str] | None = None) -> None:
        remove_instance(self.path, triggers)


def remove_instance(path: Path, triggers: list[str] | None = None) -> None:
    """Stop, disable and delete one instance (triggers first: they pin the events). triggers: the trigger
    files (relative to the instance) that can hold one, else every event's is read (0.3 s an instance)."""
    if not path.exists():
        return
    for rel, value in (("tracing_on", "0"), ("set_event", ""), ("set_event_pid", "")):
        try:
            write(path / rel, value)
        except MwinvError:
            pass
    for trig in _triggers(path / "events") if triggers is None else (path / t for t in triggers):
        try:
            for line in trig.read_text().splitlines():
                if line and not line.startswith("#"):
                    write(trig, "!" + line.split(":")[0].split(" if ")[0].strip(), append=True)
        except (OSError, MwinvError):
            pass
    for attempt in range(50):
        try:
            path.rmdir()
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or attempt == 49:
                raise MwinvError(f"{path}: cannot remove trace instance: {exc.strerror}") from None
            time.sleep(0.1)   # a reader of trace_pipe_raw is still closing


# ------------------------------------------------------------------ uprobes


def _triggers(events: Path):
    """events/<system>/<event>/trigger of an instance, skipping what vanishes meanwhile: the events of
    another process's uprobe group go when it removes them (a teardown that failed on one of those,
    a ENOENT from the directory walk, left its own uprobes behind)."""
    try:
        systems = list(os.scandir(events))
    except OSError:
        return
    for system in systems:
        try:
            names = [e.path for e in os.scandir(system.path) if e.is_dir()]
        except OSError:
            continue
        for name in names:
            yield Path(name) / "trigger"


_groups = itertools.count(1)


def new_uprobe_group() -> str:
    """A group of our own for one recorder's uprobes: uprobe events are global, and the recorders of a
    cluster capture (one per node, one process) define the same events ('File exists' with one group)."""
    return f"mwinv_{os.getpid()}_{next(_groups)}"


def add_uprobe(root: Path, group: str, event: str, target: str, args: str = "") -> str:
    """Add `p:<group>/<event> <target> <args>` (appended); returns `group/event`."""
    name = f"{group}/{event}"
    write(root / "uprobe_events", f"p:{name} {target} {args}".rstrip() + "\n", append=True)
    return name


def remove_uprobe(root: Path, name: str) -> None:
    write(root / "uprobe_events", f"-:{name}\n", append=True)


def our_uprobes(root: Path) -> list[tuple[int, str]]:
    """(owner pid, group/event) of every uprobe in a mwinv_<pid>[_<n>] group."""
    out = []
    try:
        lines = (root / "uprobe_events").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        m = re.match(r"^[pr]:(\w+)/(\w+)\s", line)
        if m and (g := UPROBE_GROUP_RE.match(m.group(1))):
            out.append((int(g.group(1)), f"{m.group(1)}/{m.group(2)}"))
    return out


def clean_stale(root: Path | None = None) -> list[str]:
    """Remove instances and uprobes of mwinv runs whose process is dead (e.g. killed with -9).
    Returns what was removed. Instances of live runs and anything not ours are left alone."""
    root = root or tracefs_root()
    removed = []
    for inst in sorted((root / "instances").iterdir()):
        m = INSTANCE_RE.match(inst.name)
        if m and int(m.group(1)) != os.getpid() and not pid_alive(int(m.group(1))):
            remove_instance(inst)
            removed.append(f"instance {inst.name}")
    for pid, name in our_uprobes(root):
        if pid != os.getpid() and not pid_alive(pid):
            try:
                remove_uprobe(root, name)
                removed.append(f"uprobe {name}")
            except MwinvError:
                pass   # still enabled in a live instance of someone else: not ours to force
    return removed
