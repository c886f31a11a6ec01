"""A MariaDB / MySQL server mwinv did not start: the connection a DBA's own client would make (socket or
host and port, credentials from an option file or the environment), the server process's pid for the
kernel side, and the privileges the capture needs, checked before anything is switched on."""

from __future__ import annotations

import configparser
import os
import socket
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from mwinv.errors import MwinvError

# option file groups the mysql/mariadb clients read for a client connection, later ones winning
CLIENT_GROUPS = ("client", "client-server", "client-mariadb", "mysql", "mariadb-client")
SERVER_COMMS = ("mariadbd", "mysqld")
ER_DBACCESS_DENIED, ER_TABLEACCESS_DENIED, ER_SPECIFIC_ACCESS_DENIED = 1044, 1142, 1227


def read_option_file(path: Path) -> dict[str, str]:
    """user/password/host/port/socket of an option file's client groups. The file is not followed through
    a symlink and must be owned by root or the caller and writable by nobody else: it holds a password
    the capture acts on as root."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise MwinvError(f"{path}: cannot read the option file ({exc.strerror})") from None
    with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
            raise MwinvError(f"{path}: not used: an option file must be a regular file owned by root or you, "
                             "writable by its owner only")
        text = f.read()
    parser = configparser.ConfigParser(allow_no_value=True, strict=False, interpolation=None,
                                       comment_prefixes=("#", ";"), inline_comment_prefixes=None)
    try:
        parser.read_string("\n".join(line for line in text.splitlines() if not line.lstrip().startswith("!")))
    except configparser.Error as exc:
        raise MwinvError(f"{path}: not an option file ({str(exc).splitlines()[0]})") from None
    out: dict[str, str] = {}
    for group in CLIENT_GROUPS:
        if parser.has_section(group):
            for key in ("user", "password", "host", "port", "socket"):
                value = parser.get(group, key, fallback=None)
                if value is not None:
                    out[key] = value.strip().strip("'\"")
    return out


@dataclass
class LiveServer:
    """Connection settings of a running server; `connect()` a new autocommit PyMySQL connection, `pid()`
    the server process. Where a setting is not given: the option file, then the environment (MYSQL_PWD,
    MYSQL_HOST, MYSQL_TCP_PORT, MYSQL_UNIX_PORT), then the clients' defaults."""

    socket: str | None = None
    host: str | None = None
    port: int | None = None
    user: str | None = None
    defaults_file: str | None = None
    given_pid: int | None = None
    settings: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        path = Path(self.defaults_file) if self.defaults_file else Path.home() / ".my.cnf"
        opts = read_option_file(path) if self.defaults_file or path.exists() else {}
        env = os.environ
        host = self.host or opts.get("host") or env.get("MYSQL_HOST")
        port = self.port or opts.get("port") or env.get("MYSQL_TCP_PORT")
        sock = self.socket or opts.get("socket") or env.get("MYSQL_UNIX_PORT")
        if not (host and host != "localhost") and not sock:
            sock = next((p for p in ("/run/mysqld/mysqld.sock", "/var/run/mysqld/mysqld.sock", "/tmp/mysql.sock")
                         if Path(p).exists()), None)
        s = {"user": self.user or opts.get("user") or "root", "autocommit": True,
             "password": opts.get("password", env.get("MYSQL_PWD", ""))}
        if sock and not (self.host or self.port):
            s["unix_socket"] = sock
        else:
            s["host"], s["port"] = host or "127.0.0.1", int(port or 3306)
        self.settings = s
        self._pid: int | None = None

    @property
    def where(self) -> str:
        s = self.settings
        return s.get("unix_socket") or f"{s['host']}:{s['port']}"

    def connect(self, database: str | None = None, **kw):
        import pymysql

        try:
            return pymysql.connect(database=database, **self.settings, **kw)
        except pymysql.err.OperationalError as exc:
            raise MwinvError(f"{self.where}: cannot connect as {self.settings['user']} ({exc.args[-1]})") from None

    def sql(self, query: str, database: str | None = None) -> list[tuple]:
        with self.connect(database) as conn, conn.cursor() as cur:
            cur.execute(query)
            return list(cur.fetchall())

    def pid(self) -> int:
        if self._pid is None:
            self._pid = self._find_pid()
        return self._pid

    def _find_pid(self) -> int:
        if self.given_pid is not None:
            pid, how = self.given_pid, "--pid"
        elif "unix_socket" in self.settings:
            with self.connect() as conn:   # the peer of a Unix socket is the server process itself
                creds = conn._sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pid, how = struct.unpack("3i", creds)[0], f"the peer of {self.where}"
        else:
            pid, how = listening_pid(self.settings["port"]), f"the listener on port {self.settings['port']}"
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            raise MwinvError(f"{self.where}: no process {pid} ({how}) on this host: the kernel side needs the "
                             "server on this host (give --pid where it is in another PID namespace)") from None
        if comm not in SERVER_COMMS:
            raise MwinvError(f"{self.where}: process {pid} ({how}) is {comm!r}, not mariadbd or mysqld")
        return pid


def listening_pid(port: int) -> int:
    """The process with a TCP socket listening on `port` (any address), from /proc/net/tcp{,6} and the
    processes' fd links: a server reached by host and port must run on this host to be traced."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{f[9]}]")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                return int(proc.name)
        except OSError:
            continue
    raise MwinvError(f"no process on this host listens on TCP port {port}: the kernel side needs the server "
                     "on this host (or give --pid)")


def check_privileges(server, general_log: bool = False) -> list[str]:
    """What the capture needs, checked before it switches anything on; raises one line naming every gap.
    Returns notes (what the capture will change). general_log: the general log is to be switched on."""
    import pymysql

    conn = server.connect()
    missing, notes = [], []
    try:
        cur = conn.cursor()
        cur.execute("SELECT @@performance_schema, @@performance_schema_events_statements_history_long_size, "
                    "CURRENT_USER()")
        on, ring, who = cur.fetchone()
        if not on:
            raise MwinvError(f"{server.where}: performance_schema is OFF: set performance_schema=ON in the server's "
                             "configuration and restart (it cannot be switched on while the server runs)")
        probes = (
            ("SELECT 1 FROM performance_schema.events_statements_history_long LIMIT 0", "SELECT on performance_schema"),
            ("UPDATE performance_schema.setup_consumers SET ENABLED = ENABLED WHERE 1 = 0",
             "UPDATE on performance_schema.setup_consumers (the statement consumers are switched on for the "
             "capture and restored after it)"),
            ("UPDATE performance_schema.setup_instruments SET ENABLED = ENABLED WHERE 1 = 0",
             "UPDATE on performance_schema.setup_instruments"),
            ("SHOW ENGINE INNODB STATUS", "PROCESS (every connection's thread and statements)"),
        ) + ((
            ("SET GLOBAL general_log = @@global.general_log", "SUPER (--prepared-texts switches the general log on)"),
            ("SELECT 1 FROM mysql.general_log LIMIT 0", "SELECT on mysql.general_log (--prepared-texts)"),
        ) if general_log else ())
        for query, need in probes:
            try:
                cur.execute(query)
                cur.fetchall()
            except pymysql.err.MySQLError as exc:
                if exc.args[0] not in (ER_DBACCESS_DENIED, ER_TABLEACCESS_DENIED, ER_SPECIFIC_ACCESS_DENIED):
                    raise MwinvError(f"{server.where}: {query}: {exc.args[-1]}") from None
                missing.append(need)
        if missing:
            raise MwinvError(f"{server.where}: {who} lacks " + "; ".join(missing)
                             + " (GRANT them, or capture as a user that has them)")
        cur.execute("SELECT NAME FROM performance_schema.setup_consumers WHERE ENABLED = 'NO' "
                    "AND NAME LIKE 'events_statements_%'")
        off = [r[0] for r in cur.fetchall()]
        if off:
            notes.append(f"switching on for the capture (restored after it): {', '.join(off)}")
        if general_log:
            notes.append("switching the general query log on for the capture (to mysql.general_log, restored "
                         "after it): one row written per statement while it runs")
        if ring < 10_000:
            notes.append(f"events_statements_history_long holds {ring:,} rows: under load statements are "
                         "overwritten before a drain (counted); performance_schema_events_statements_history_"
                         "long_size=20000 at the next restart keeps them")
    finally:
        conn.close()
    return notes
