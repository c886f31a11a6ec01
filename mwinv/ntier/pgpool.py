"""A throw-away pgpool-II (Debian's /usr/sbin/pgpool) in front of a primary and its streaming replicas:
run as postgres in the foreground (its pid is the one this process started), with its own config,
socket, pid and status files in a private server directory (mwinv/serverdir.py, kind "pool": `mwinv
clean` stops one whose owner died), never the packaged service.

    with PgPool(primary, replicas, statement_level=False) as pool:
        pool.conninfo("bboard")"""

from __future__ import annotations

import os
import pwd
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from mwinv import serverdir
from mwinv.errors import MwinvError
from mwinv.serverdir import ThrowawayServer, free_port, track, untrack

PGPOOL = "/usr/sbin/pgpool"
START_TIMEOUT_S = 20.0
POLICIES = ("session", "statement")   # load balancing: a replica per session, or per statement


def check_weights(weights: list[float] | None, replicas: int) -> None:
    if weights is not None and (len(weights) != replicas or min(weights) < 0 or not sum(weights) > 0):
        raise MwinvError(f"weights {','.join(f'{w:g}' for w in weights)}: one per replica ({replicas}), not "
                         "negative, not all 0")


def weights_for(weights: list[float] | dict | None, replicas: int) -> list[float] | None:
    """The weights of a run of `replicas` replicas when the replica count varies (a plan's cells, a
    surface): a list weighs replica ri by its i-th number whatever the count, so it needs one per replica
    of the largest count and a smaller one takes the first ([2, 1, 1]: r1 double with 2 or 3 replicas);
    a table by replica count ({2 = [1, 3], 3 = [1, 1, 2]}) gives each count its own list."""
    if isinstance(weights, dict):
        if str(replicas) not in weights:
            raise MwinvError(f"weights {{{', '.join(f'{k} = ...' for k in weights)}}}: no list for {replicas} "
                             "replicas")
        weights = weights[str(replicas)]
    if weights is not None and not (isinstance(weights, list) and all(
            isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights)):
        raise MwinvError(f"weights {weights!r}: a list of numbers, one per replica")
    weights = weights[:replicas] if weights else weights
    check_weights(weights, replicas)
    return weights


@dataclass(eq=False)
class PgPool(ThrowawayServer):
    primary: object = None                        # PgServer (listening on its listen_addresses)
    replicas: list = field(default_factory=list)  # PgServer standbys
    policy: str = "session"
    weights: list[float] | None = None            # per replica (the primary gets no reads)
    max_clients: int = 32                         # num_init_children: the sessions it serves at once
    cgroup: object = None
    address: str = "127.0.0.1"                    # where it listens
    netns: str | None = None                      # the network namespace it runs in
    base_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise MwinvError(f"balancer policy {self.policy!r}: one of {', '.join(POLICIES)}")
        check_weights(self.weights, len(self.replicas))
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def data_dir(self) -> Path:   # its working directory, pid and status files
        return self.base_dir / "run"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "pgpool.log"

    def conninfo(self, dbname: str = "postgres") -> str:
        return f"host={self.address} port={self.port} dbname={dbname} user=postgres"

    def _config(self, sock: Path, pcp_port: int) -> str:
        conf = {
            "backend_clustering_mode": "'streaming_replication'",
            "listen_addresses": f"'{self.address}'", "port": self.port, "unix_socket_directories": f"'{sock}'",
            "pcp_listen_addresses": "''", "pcp_port": pcp_port, "pcp_socket_dir": f"'{sock}'",
            "pid_file_name": f"'{self.data_dir / 'pgpool.pid'}'", "logdir": f"'{self.data_dir}'",
            "load_balance_mode": "on",
            "statement_level_load_balance": "on" if self.policy == "statement" else "off",
            "num_init_children": self.max_clients, "max_pool": 1, "connection_cache": "on",
            "child_life_time": 0, "reserved_connections": 0,
            # no checks that would need a password or a failover script: mwinv watches the servers itself
            "sr_check_period": 0, "sr_check_user": "'postgres'", "health_check_period": 0,
            "failover_on_backend_error": "off", "enable_pool_hba": "off", "pool_passwd": "''",
            "use_watchdog": "off", "memory_cache_enabled": "off", "ssl": "off",
            "log_destination": "'stderr'", "logging_collector": "off", "log_min_messages": "warning",
        }
        weights = self.weights or [1.0] * len(self.replicas)
        for i, (server, weight, flag) in enumerate([(self.primary, 0.0, "ALWAYS_PRIMARY|DISALLOW_TO_FAILOVER"),
                                                    *((r, w, "DISALLOW_TO_FAILOVER")
                                                      for r, w in zip(self.replicas, weights))]):
            conf.update({f"backend_hostname{i}": f"'{server.listen_addresses}'", f"backend_port{i}": server.port,
                         f"backend_weight{i}": weight, f"backend_flag{i}": f"'{flag}'",
                         f"backend_application_name{i}": f"'{server.name}'"})
        return "".join(f"{k} = {v}\n" for k, v in conf.items())

    def start(self) -> "PgPool":
        if not Path(PGPOOL).exists():
            raise MwinvError(f"{PGPOOL}: pgpool-II is not installed (make deps installs pgpool2)")
        pw = pwd.getpwnam("postgres")
        self.port, pcp_port = free_port(), free_port()
        self.base_dir = serverdir.new_server_dir("pool", "pgpool", pw.pw_uid, pw.pw_gid, cgroup=self.cgroup)
        track(self)
        try:
            sock = self.base_dir / "sock"
            for d in (self.data_dir, sock):
                os.mkdir(d, 0o700)
                os.chown(d, pw.pw_uid, pw.pw_gid)
            files = {"pgpool.conf": self._config(sock, pcp_port), "pcp.conf": "", "pool_hba.conf": ""}
            for name, text in files.items():
                fd = os.open(self.base_dir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                os.chown(self.base_dir / name, pw.pw_uid, pw.pw_gid)
            fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            argv = [PGPOOL, "-n", "-D", "-f", str(self.base_dir / "pgpool.conf"), "-F", str(self.base_dir / "pcp.conf"),
                    "-a", str(self.base_dir / "pool_hba.conf")]
            # setpriv, `ip netns exec` and the cgroup's prefix exec: the pid started is pgpool's main process
            argv = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", "--", *argv]
            if self.netns:
                argv = ["ip", "netns", "exec", self.netns, *argv]
            if self.cgroup is not None:
                argv = self.cgroup.exec_prefix() + argv
            with os.fdopen(fd, "w") as log:
                self.proc = subprocess.Popen(argv, cwd=self.data_dir, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=log, start_new_session=True)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT_S
        why = "no answer"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise MwinvError(f"pgpool did not start (exit {self.proc.returncode}): {self.log_tail() or 'no log'}"
                                 f" ({self.log_file})")
            try:
                with psycopg.connect(self.conninfo(), connect_timeout=2, autocommit=True) as conn:
                    rows = conn.execute("SHOW pool_nodes").fetchall()
                if len(rows) == 1 + len(self.replicas):
                    return
                why = f"{len(rows)} of {1 + len(self.replicas)} backends"
            except psycopg.Error as exc:
                why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            time.sleep(0.2)
        raise MwinvError(f"pgpool did not answer within {START_TIMEOUT_S:g} s ({why}; log {self.log_file}: "
                         f"{self.log_tail()})")

    def pids(self) -> list[int]:
        """pgpool's main process and its children (the tier's processes)."""
        from mwinv.kernel_trace.recorder import descendants

        return descendants(self.proc.pid) if self.alive() else []

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def nodes(self) -> list[dict]:
        """SHOW pool_nodes: per backend its role, weight and the SELECTs pgpool sent it."""
        import psycopg

        with psycopg.connect(self.conninfo(), connect_timeout=5, autocommit=True) as conn:
            cur = conn.execute("SHOW pool_nodes")
            names = [d.name for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def stop(self) -> None:
        """Fast shutdown (SIGINT ends its children too), SIGKILL to its process group after 10 s; the
        directory removed. Safe to call twice."""
        if not untrack(self):
            return
        if self.proc is not None and self.proc.poll() is None:
            pidfd = os.pidfd_open(self.proc.pid)   # a child not yet reaped: its pid is not reused
            try:
                poll = select.poll()
                poll.register(pidfd, select.POLLIN)
                signal.pidfd_send_signal(pidfd, signal.SIGINT)
                if not poll.poll(10_000):
                    os.killpg(self.proc.pid, signal.SIGKILL)   # the main one still runs: the group is its
            except ProcessLookupError:
                pass
            finally:
                os.close(pidfd)
            self.proc.wait()
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.base_dir:
            serverdir.remove_server_dir(self.base_dir)
