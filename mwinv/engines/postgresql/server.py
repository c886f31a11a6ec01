"""Throw-away PostgreSQL clusters: initdb, start on a private socket directory and port, stop and
remove, also on Ctrl-C, SIGTERM and test failures. Several may run at once."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mwinv import serverdir
from mwinv.errors import MwinvError
from mwinv.serverdir import ThrowawayServer, free_port, port_in_use, track, untrack

PG_BINDIR_CANDIDATES = ("/usr/lib/postgresql/15/bin",)


def pg_bindir() -> Path:
    env = os.environ.get("MWINV_PG_BINDIR")
    candidates = (env,) if env else PG_BINDIR_CANDIDATES
    for c in candidates:
        if c and (Path(c) / "postgres").exists():
            return Path(c)
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True)
        return Path(out.stdout.strip())
    except (OSError, subprocess.CalledProcessError) as exc:
        raise MwinvError("no PostgreSQL 15 binaries found (set MWINV_PG_BINDIR)") from exc


@dataclass(eq=False)
class PgServer(ThrowawayServer):
    """One private PostgreSQL cluster. Use as a context manager, or call start()/stop()."""

    name: str = "mwinv"
    port: int | None = None
    base_dir: Path | None = None  # holds data/, sock/, log; created, and removed on stop
    gucs: dict[str, str] = field(default_factory=dict)
    shared_preload_libraries: list[str] = field(default_factory=list)
    listen_addresses: str = ""
    cgroup: "object | None" = None  # mwinv.cgroup.Cgroup: postmaster and backends start inside it
    netns: str | None = None
    keep: bool = False

    def __post_init__(self) -> None:
        self._started = False
        self._owns_base = False
        self.run_as = None

    # ---- paths and connection info
    @property
    def socket_dir(self) -> Path:
        return self.base_dir / "sock"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "postgres.log"

    def conninfo(self, dbname: str = "postgres", user: str = "postgres") -> str:
        host = self.socket_dir if not self.listen_addresses else self.listen_addresses.split(",")[0]
        return f"host={host} port={self.port} dbname={dbname} user={user}"

    def env(self) -> dict[str, str]:
        return {"PGHOST": str(self.socket_dir), "PGPORT": str(self.port), "PGUSER": "postgres"}

    # ---- lifecycle
    def _user_cmd(self, argv: list[str]) -> list[str]:
        prefix: list[str] = []
        if self.netns:
            prefix += ["ip", "netns", "exec", self.netns]
        if self.run_as:
            prefix += ["runuser", "-u", self.run_as, "--"]
        return prefix + argv

    def _check_inputs(self) -> None:
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise MwinvError("user 'postgres' does not exist; PostgreSQL refuses to run as root") from None
            self.run_as = "postgres"
        if self.port is None:
            self.port = free_port()
        elif not (1 <= self.port <= 65535):
            raise MwinvError(f"port {self.port} is out of range")
        elif port_in_use(self.port):
            raise MwinvError(f"port {self.port} is in use")
        if self.base_dir is not None:
            self.base_dir = Path(self.base_dir)
            if self.base_dir.exists() and any(self.base_dir.iterdir()):
                raise MwinvError(f"data directory {self.base_dir} exists and is not empty")

    def start(self) -> "PgServer":
        self._check_inputs()
        bindir = pg_bindir()
        pw = pwd.getpwnam(self.run_as) if self.run_as else None
        if self.base_dir is None:
            # in mwinv's private directory, owned by postgres, with a record of this process as its
            # owner: `mwinv clean` finds it if this process is killed with -9
            owner = (pw.pw_uid, pw.pw_gid) if pw else (None, None)
            self.base_dir = serverdir.new_server_dir("pg", self.name, *owner, cgroup=self.cgroup)
        else:
            self.base_dir.mkdir(parents=True, exist_ok=True)
        self._owns_base = True
        track(self)
        try:
            self.socket_dir.mkdir(exist_ok=True)
            if pw:
                os.chmod(self.base_dir, 0o700)
                for p in (self.base_dir, self.socket_dir):
                    os.chown(p, pw.pw_uid, pw.pw_gid)
            self._init_data(bindir)
            self._write_conf()
            self._pg_ctl_start(bindir)
            self._started = True
        except BaseException:
            self.stop()
            raise
        return self

    def _init_data(self, bindir: Path) -> None:
        """The data directory: a copy of this process's template cluster for its user (a standby copies its
        primary's instead: mwinv/ntier/scenario.py)."""
        template = _template(bindir, self.run_as, lambda data: self._run(
            [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C",
             "--no-sync"], what="initdb"))
        # as the server's user, who owns the template; a symlink is copied as one, never followed
        self._run(["cp", "-a", "--", str(template), str(self.data_dir)], what="copying the template cluster")

    def _write_conf(self) -> None:
        conf = {
            "port": str(self.port),
            "unix_socket_directories": f"'{self.socket_dir}'",
            "listen_addresses": f"'{self.listen_addresses}'",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "logging_collector": "off",
            "max_connections": "50",
        }
        if self.shared_preload_libraries:
            conf["shared_preload_libraries"] = "'" + ",".join(self.shared_preload_libraries) + "'"
        conf.update(self.gucs)
        with open(self.data_dir / "postgresql.conf", "a") as f:
            f.write("\n# mwinv throw-away server\n")
            for k, v in conf.items():
                f.write(f"{k} = {v}\n")
        if self.listen_addresses:
            with open(self.data_dir / "pg_hba.conf", "a") as f:
                f.write("host all all 0.0.0.0/0 trust\n")

    def _pg_ctl_start(self, bindir: Path) -> None:
        argv = [str(bindir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_file), "-w", "-t", "60",
                "start"]
        argv = self._user_cmd(argv)
        if self.cgroup is not None:
            # Enter the cgroup before pg_ctl forks the postmaster: every backend inherits it.
            argv = self.cgroup.exec_prefix() + argv
        self._run(argv, what="pg_ctl start", as_user=False)

    def _run(self, argv: list[str], what: str, as_user: bool = True) -> None:
        proc = subprocess.run(self._user_cmd(argv) if as_user else argv, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()
            log_tail = self.log_tail()
            msg = (tail[-1] if tail else f"exit {proc.returncode}") + (f" (log: {log_tail})" if log_tail else "")
            raise MwinvError(f"{what} failed for server {self.name!r}: {msg}")

    def restart(self) -> None:
        """Stop and start again (used for cold runs: empties shared_buffers)."""
        bindir = pg_bindir()
        subprocess.run(self._user_cmd([str(bindir / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w",
                                       "stop"]), capture_output=True)
        self._pg_ctl_start(bindir)

    def postmaster_pid(self) -> int:
        return int((self.data_dir / "postmaster.pid").read_text().split()[0])

    def stop(self) -> None:
        """Stop the server (fast, then immediate) and remove its directory. Safe to call twice."""
        if not untrack(self):
            return
        if self.base_dir and (self.data_dir / "postmaster.pid").exists():
            bindir = pg_bindir()
            for mode in ("fast", "immediate"):
                proc = subprocess.run(
                    self._user_cmd([str(bindir / "pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "-t", "30",
                                    "stop"]),
                    capture_output=True,
                )
                if proc.returncode == 0:
                    break
            else:
                self._kill_postmaster()
        if self.cgroup is not None:
            self.cgroup.remove()
        if self._owns_base and self.base_dir and not self.keep:
            if not serverdir.remove_server_dir(self.base_dir):
                shutil.rmtree(self.base_dir, ignore_errors=True)
        self._started = False

    def detach(self) -> None:
        """Leave the server running when this process exits (someone else stops it later; `clean`
        leaves it alone)."""
        untrack(self)
        if self.base_dir:
            serverdir.set_owner(self.base_dir, None)

    def _kill_postmaster(self) -> None:
        serverdir.stop_server(self.data_dir / "postmaster.pid", self.data_dir, serverdir.PG_EXES, signal.SIGKILL)

    # ---- convenience
    def connect(self, dbname: str = "postgres", autocommit: bool = True, **kw):
        import psycopg

        return psycopg.connect(self.conninfo(dbname), autocommit=autocommit, **kw)

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        proc = subprocess.run(
            [str(pg_bindir() / "psql"), "-X", "-Atq", "-v", "ON_ERROR_STOP=1", "-d", self.conninfo(dbname), "-c",
             sql],
            capture_output=True, text=True,
        )
        if proc.returncode != 0:
            raise MwinvError(f"psql on server {self.name!r}: {proc.stderr.strip().splitlines()[-1]}")
        return proc.stdout


@dataclass(eq=False)
class _Template:
    """A cluster initdb made once for a process and user, which each of its servers copies: initdb took
    0.88 s a server, the copy 0.12 s. In a server directory of its own (private, its owner recorded:
    `mwinv clean` removes it after a kill -9), removed with the process's servers (serverdir.track)."""

    base: Path
    pid: int

    def stop(self) -> None:
        if untrack(self) and os.getpid() == self.pid:   # not a forked child's to remove
            serverdir.remove_server_dir(self.base)


_templates: dict[tuple[str, str | None], _Template] = {}
_templates_lock = threading.Lock()


def _template(bindir: Path, run_as: str | None, initdb: Callable[[Path], None]) -> Path:
    """The data directory of this process's template cluster for bindir's PostgreSQL and run_as, made by
    initdb(data directory) the first time."""
    key = (str(bindir), run_as)
    with _templates_lock:
        t = _templates.get(key)
        if t is None or t.pid != os.getpid() or not (t.base / "data" / "PG_VERSION").is_file():
            pw = pwd.getpwnam(run_as) if run_as else None
            owner = (pw.pw_uid, pw.pw_gid) if pw else ()
            t = _Template(serverdir.new_server_dir("pg", "template", *owner), os.getpid())
            track(t)
            try:
                initdb(t.base / "data")
            except BaseException:
                t.stop()
                raise
            _templates[key] = t
        return t.base / "data"
