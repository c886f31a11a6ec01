"""Throw-away MariaDB servers: a private data directory, socket and port, started as `mysql` with chosen
settings, always stopped and removed (exit, Ctrl-C, SIGTERM, test failures: the same registry as
PostgreSQL's throw-away servers). Several may run at once."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from mwinv import serverdir
from mwinv.errors import MwinvError
from mwinv.serverdir import ThrowawayServer, free_port, port_in_use, track, untrack

START_TIMEOUT_S = 60
# performance_schema's statement history on, so that mwinv's reader finds its consumers' tables
DEFAULT_SETTINGS = {
    "performance_schema": "ON",
    "innodb_buffer_pool_size": "128M",
    "innodb_flush_log_at_trx_commit": "2",
    "innodb_doublewrite": "0",
    "skip_name_resolve": "ON",
    "max_connections": "50",
    "local_infile": "ON",
    # the statement history mwinv drains: 1,000 rows by default hold 20 ms of sysbench OLTP (50,000
    # statements/s); 20,000 rows (~50 MB) hold 0.4 s
    "performance_schema_events_statements_history_long_size": "20000",
}


def mariadbd() -> Path:
    for c in (os.environ.get("MWINV_MARIADBD"), "/usr/sbin/mariadbd", shutil.which("mariadbd") or ""):
        if c and Path(c).exists():
            return Path(c)
    raise MwinvError("no mariadbd found (apt-get install mariadb-server, or set MWINV_MARIADBD)")


@dataclass(eq=False)
class MariaDBServer(ThrowawayServer):
    """One private MariaDB server. Use as a context manager, or call start()/stop()."""

    name: str = "mwinv"
    port: int | None = None
    settings: dict[str, str] = field(default_factory=dict)
    cgroup: "object | None" = None   # mwinv.cgroup.Cgroup: the server starts inside it
    keep: bool = False

    def __post_init__(self) -> None:
        self.base_dir: Path | None = None
        self._proc: subprocess.Popen | None = None

    @property
    def socket(self) -> Path:
        return self.base_dir / "mariadb.sock"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "mariadb.err"

    @property
    def pid_file(self) -> Path:
        return self.base_dir / "mariadb.pid"

    def pid(self) -> int:
        return int(self.pid_file.read_text().split()[0])

    def _options(self) -> list[str]:
        opts = {**DEFAULT_SETTINGS, **self.settings, "datadir": str(self.data_dir), "socket": str(self.socket),
                "port": str(self.port), "bind_address": "127.0.0.1", "pid_file": str(self.pid_file),
                "log_error": str(self.log_file), "user": "mysql"}
        return [f"--{k.replace('_', '-')}={v}" for k, v in opts.items()]

    def start(self) -> "MariaDBServer":
        binary = mariadbd()
        try:
            user = pwd.getpwnam("mysql")
        except KeyError:
            raise MwinvError("user 'mysql' does not exist; MariaDB refuses to run as root") from None
        if self.port is None:
            self.port = free_port()
        elif port_in_use(self.port):
            raise MwinvError(f"port {self.port} is in use")
        # mwinv's private directory, owned by mysql; `mwinv clean` finds it if this process is killed
        self.base_dir = serverdir.new_server_dir("maria", self.name, user.pw_uid, user.pw_gid, self.cgroup)
        track(self)
        try:
            self._run(["mariadb-install-db", "--no-defaults", f"--datadir={self.data_dir}", "--user=mysql",
                       "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"],
                      "mariadb-install-db")
            argv = [str(binary), "--no-defaults", *self._options()]
            if self.cgroup is not None:
                argv = self.cgroup.exec_prefix() + argv
            self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _run(self, argv: list[str], what: str) -> None:
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()
            raise MwinvError(f"{what} failed for server {self.name!r}: {tail[-1] if tail else proc.returncode}")

    def _wait_ready(self) -> None:
        import pymysql

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._proc.poll() is not None:
                raise MwinvError(f"mariadbd of server {self.name!r} exited ({self._proc.returncode}): "
                                 f"{self.log_tail() or 'no log'} ({self.log_file})")
            try:
                pymysql.connect(unix_socket=str(self.socket), user="root", connect_timeout=2).close()
                return
            except pymysql.err.OperationalError:
                if time.monotonic() > deadline:
                    raise MwinvError(f"mariadbd of server {self.name!r} not ready in {START_TIMEOUT_S} s: "
                                     f"{self.log_tail()} ({self.log_file})") from None
                time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server (SIGTERM: a clean shutdown; SIGKILL after 30 s) and remove its directory."""
        if not untrack(self):
            return
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.base_dir and not self.keep:
            serverdir.remove_server_dir(self.base_dir)

    def connect(self, database: str | None = None, **kw):
        import pymysql

        return pymysql.connect(unix_socket=str(self.socket), user="root", database=database, autocommit=True,
                               local_infile=True, **kw)

    def sql(self, query: str, database: str | None = None) -> list[tuple]:
        with self.connect(database) as conn, conn.cursor() as cur:
            cur.execute(query)
            return list(cur.fetchall())
