"""Where mwinv's throw-away servers and clusters live: one private directory, checked on every use
(never /tmp, where any user can plant a name first), and the one check before a pid read from a file
is signalled.

    <root>/                 0711, owned by the user running mwinv (root: /var/lib/mwinv, on disk: a
      servers/              0711   data directory at SF 1 is GBs; another user: $XDG_STATE_HOME/mwinv)
        pg-<name>-<rand>/   0700, owned by the server's OS user (postgres, mysql): it must traverse
        pg-<name>-<rand>.json   0600: the process that owns that server, written before the directory
      clusters/             0700: <tag>.json, a cluster's state
      settings/             0700: <pid>-<rand>.json, kernel settings a run changed, with their old values

A server whose owner is gone (pid and start time) is an orphan: `mwinv clean` stops and removes it."""

from __future__ import annotations

import atexit
import json
import os
import re
import secrets
import select
import shutil
import signal
import socket
import stat
import threading
from pathlib import Path

from mwinv.cgroup import CGROUP_V1_ROOT, remove_group_said
from mwinv.errors import MwinvError

ROOT_ENV = "MWINV_STATE_DIR"
NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# per kind: pid file and data directory (relative to the server's directory), its executables, and
# the signal that stops it at once (a postmaster's SIGQUIT also ends its backends)
PG_EXES = {"postgres"}
KINDS = {
    "pg": ("data/postmaster.pid", "data", PG_EXES, signal.SIGQUIT),
    "maria": ("mariadb.pid", "data", {"mariadbd", "mysqld"}, signal.SIGTERM),
    "pool": ("run/pgpool.pid", "run", {"pgpool"}, signal.SIGINT),   # pgpool-II (mwinv/ntier/pgpool.py)
}


def root() -> Path:
    env = os.environ.get(ROOT_ENV)
    if env:
        path = Path(env)
    elif os.geteuid() == 0:
        path = Path("/var/lib/mwinv")
    else:
        path = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "mwinv"
    return _private_dir(path, 0o711)


def servers_dir() -> Path:
    return _private_dir(root() / "servers", 0o711)


def clusters_dir() -> Path:
    return _private_dir(root() / "clusters", 0o700)


def settings_dir() -> Path:
    return _private_dir(root() / "settings", 0o700)


def _private_dir(path: Path, mode: int) -> Path:
    """path, created with `mode` if missing; refused unless a real directory (not a symlink) owned by
    this user that nobody else may write, under parents only root or this user may change."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)   # ~/.local/state of a user who has none yet
    except OSError as exc:
        raise MwinvError(f"{path.parent}: cannot create ({exc.strerror}; set {ROOT_ENV})") from None
    path = Path(os.path.realpath(path.parent)) / path.name
    for parent in path.parents:
        st = os.stat(parent)
        if st.st_uid not in (0, os.geteuid()) or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX):
            raise MwinvError(f"{path}: its parent {parent} may be changed by other users (set {ROOT_ENV})")
    try:
        os.mkdir(path, mode)
        os.chmod(path, mode)   # whatever the umask
    except FileExistsError:
        pass
    except OSError as exc:
        raise MwinvError(f"{path}: cannot create ({exc.strerror}; set {ROOT_ENV})") from None
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise MwinvError(f"{path}: not a private directory of uid {os.geteuid()} (owner {st.st_uid}, "
                         f"mode {stat.filemode(st.st_mode)}); remove it or set {ROOT_ENV}")
    return path


# ---- owners: a process, known by pid, start time and boot
def owner_stamp(pid: int | None = None) -> dict:
    pid = pid or os.getpid()
    return {"pid": pid, "start": _start_ticks(pid), "boot": _boot_id()}


def owner_alive(stamp: dict | None) -> bool:
    """Whether the process of stamp (owner_stamp) still runs; a reused pid is not it."""
    if not isinstance(stamp, dict) or not isinstance(stamp.get("pid"), int) or stamp["pid"] <= 0:
        return False
    return stamp.get("boot") == _boot_id() and _start_ticks(stamp["pid"]) == stamp.get("start")


def _start_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else int(fields[19])


def _boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


# ---- server directories
def new_server_dir(kind: str, name: str, uid: int | None = None, gid: int | None = None,
                   cgroup=None) -> Path:
    """A fresh directory for a server of `kind` named `name`, owned by uid:gid, mode 0700. Its record
    (this process as owner, the groups of its mwinv.cgroup.Cgroup) is written first, so no directory
    exists that clean cannot attribute."""
    if kind not in KINDS or not NAME_RE.fullmatch(name):
        raise MwinvError(f"server name {name!r}: letters, digits, '_', '.', '-' only")
    d = servers_dir()
    stem = f"{kind}-{name}-{secrets.token_hex(4)}"
    groups = [str(cgroup.path(c)) for c in cgroup.controllers()] if cgroup else []
    write_record(d / f"{stem}.json", {"kind": kind, "owner": owner_stamp(), "cgroups": groups}, exclusive=True)
    base = d / stem
    os.mkdir(base, 0o700)
    if uid is not None:
        os.chown(base, uid, gid)
    return base


def write_record(path: Path, record: dict, exclusive: bool = False) -> None:
    target = path if exclusive else path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    if not exclusive:
        os.replace(target, path)


def _record_path(base: Path) -> Path | None:
    """The owner record of base if base is a server directory of the private root, else None."""
    base = Path(base)
    d = servers_dir()
    if base.parent != d or not (d / f"{base.name}.json").is_file():
        return None
    return d / f"{base.name}.json"


def set_owner(base: Path, stamp: dict | None) -> None:
    """Give base's server another owner (None: left running on purpose, `clean` leaves it alone)."""
    rec = _record_path(base)
    if rec is not None:
        write_record(rec, {**json.loads(rec.read_text()), "owner": stamp})


def remove_server_dir(base: Path) -> bool:
    """Remove a server directory of the private root and its record (rmtree follows no symlink);
    False if base is not one."""
    rec = _record_path(base)
    if rec is None:
        return False
    shutil.rmtree(base, ignore_errors=True)
    rec.unlink(missing_ok=True)
    return True


def server_records() -> list[tuple[Path, dict]]:
    """(server directory, record) of every server this user's mwinv started and has not removed."""
    out = []
    for rec in sorted(servers_dir().glob("*.json")):
        try:
            record = json.loads(rec.read_text())
        except (OSError, ValueError):
            record = {}
        out.append((rec.with_suffix(""), record if isinstance(record, dict) else {}))
    return out


def clean_servers(select_server, groups: bool = True) -> list[str]:
    """Stop and remove each server whose (directory, record) select_server accepts, and with groups its
    cgroups: a line for each thing removed, and for each group left, why."""
    lines = []
    for base, record in server_records():
        if select_server(base, record):
            stop_orphan(base)
            remove_server_dir(base)
            lines.append(f"server {base}")
            for group in map(Path, record.get("cgroups") or [] if groups else []):
                if group.parent.name == "mwinv" and group.parents[2] == CGROUP_V1_ROOT and group.is_dir():
                    lines.append(remove_group_said(group))
    return lines


def orphaned(base: Path, record: dict) -> bool:
    """A server whose owning process is gone and that was not left running on purpose."""
    return "owner" not in record or (record["owner"] is not None and not owner_alive(record["owner"]))


def stop_orphan(base: Path) -> bool:
    kind = base.name.split("-", 1)[0]
    if kind not in KINDS:
        return False
    pid_file, data, exes, sig = KINDS[kind]
    return stop_server(base / pid_file, base / data, exes, sig)


# ---- the check before a signal
def stop_server(pid_file: Path, data_dir: Path, exes: set[str], sig: int = signal.SIGQUIT,
                timeout_s: float = 10) -> bool:
    """Send sig to the process pid_file names, if it is the server of data_dir (server_pidfd), and
    SIGKILL if it has not exited after timeout_s. False if no such server runs."""
    pidfd = server_pidfd(pid_file, data_dir, exes)
    if pidfd is None:
        return False
    poll = select.poll()
    poll.register(pidfd, select.POLLIN)
    try:
        for s, wait in ((sig, timeout_s), (signal.SIGKILL, 5)):
            signal.pidfd_send_signal(pidfd, s)
            if poll.poll(wait * 1000):   # a pidfd is readable once its process exits
                break
        return True
    except ProcessLookupError:
        return True
    finally:
        os.close(pidfd)


def server_pidfd(pid_file: Path, data_dir: Path, exes: set[str]) -> int | None:
    """A pidfd of the process pid_file names if that process is the server of data_dir: its executable
    is one of exes, its working directory is data_dir (a postmaster and mariadbd chdir there) and it
    runs as data_dir's owner; else None. Signal through the pidfd: a pid reused after this check is
    then not hit."""
    try:
        fd = os.open(pid_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            first = os.read(fd, 64).split(b"\n", 1)[0].rstrip(b"\0")   # pgpool ends its pid with a NUL
        finally:
            os.close(fd)
        pid = int(first)
        data_st = os.lstat(data_dir)
    except (OSError, ValueError):
        return None
    if pid <= 1 or pid == os.getpid() or not stat.S_ISDIR(data_st.st_mode):
        return None
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        cwd = os.readlink(f"/proc/{pid}/cwd")
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        os.close(pidfd)
        return None
    if exe in exes and cwd == os.path.realpath(data_dir) and uid == data_st.st_uid:
        return pidfd
    os.close(pidfd)
    return None


_live: set = set()   # the throw-away servers (PostgreSQL, MariaDB) this process started
_live_lock = threading.Lock()


def track(server) -> None:
    """Stop `server` (anything with stop()) at exit, on SIGTERM, and when the tests end."""
    with _live_lock:
        _live.add(server)
    _install_sigterm_cleanup()


def untrack(server) -> bool:
    """Forget `server`; False if it was not tracked (stopped already)."""
    with _live_lock:
        if server not in _live:
            return False
        _live.discard(server)
    return True


class ThrowawayServer:
    """What the throw-away servers (PostgreSQL's, MariaDB's) share: data under base_dir, a log file
    whose last line explains a failure, a context manager that starts and always stops. Subclasses are
    dataclasses with eq=False: a server is equal to itself only, so that track() can hold it."""

    base_dir: Path | None
    log_file: Path

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    def log_tail(self) -> str:
        """The log's last non-empty line ("" if there is none)."""
        if not self.log_file.exists():
            return ""
        lines = [ln for ln in self.log_file.read_text(errors="replace").splitlines() if ln.strip()]
        return lines[-1] if lines else ""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _stop_all_live() -> None:
    for srv in list(_live):
        srv.stop()


def _on_signal(signum, frame):
    _stop_all_live()
    raise KeyboardInterrupt(signal.Signals(signum).name)


atexit.register(_stop_all_live)


def _install_sigterm_cleanup() -> None:
    # Only where nobody else has claimed SIGTERM (the CLI layer and pytest leave it default).
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
        signal.SIG_DFL,
        None,
    ):
        signal.signal(signal.SIGTERM, _on_signal)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False
