"""A data node's storage back-end ([Rauch]'s question, seed 001: do remote disks, one or striped over
several, speed a DBMS up?) on real user-space file systems, since this kernel has no NBD, MD or
device-mapper but has FUSE:

- `local`: the node's own disk (its data directory, under the node's read cap);
- `sshfs`: one remote disk. Each data node di gets a storage node si (a network namespace on the
  cluster's bridge, a cgroup of the data nodes' size) whose sshd serves a directory through
  sftp-server; di mounts it with sshfs over its link;
- `glusterfs` (2 storage nodes) or `glusterfs:K` (1-4): a RAID0 of remote disks. Each storage node
  runs its own glusterd (private working, run and log directories) and one brick per data node; each
  data node mounts its volume, distributed over the K bricks and sharded in 4 MiB pieces (GlusterFS 10
  has no stripe translator: sharding is what spreads one file over the bricks; plain distribution
  puts each whole file, a table's 1 GB segment, on one brick).

What goes there is a tablespace holding the node's TPC-H tables and indexes (`ALTER TABLE ALL IN
TABLESPACE pg_default SET TABLESPACE`): catalogs and WAL stay local, so the remote disk carries the
scans and nothing else, the server's data directory keeps the owner and mode PostgreSQL checks at
start (0700, owned by postgres: a whole data directory on sshfs would have those checked over the
link at every start), and a level is set per cell on a loaded cluster. The throw-away servers run
with fsync off, so neither file system's fsync is on the measured path.

The mounts live in the host's mount namespace under a per-cluster directory bind-mounted onto itself
and made shared; the data nodes' servers are restarted once so that their mount namespaces (copies
made by `ip netns exec`) hold it as a slave: an unmount on the host then leaves their copies too, and
the FUSE daemons exit with it. Every daemon and client runs in a cgroup of the cluster's tag (the
storage nodes' own, the data node's for the FUSE client), so `mwinv clean` finds what a killed run
left from the tag alone: it unmounts, signals only processes of those groups whose executable is a
storage one (checked through a pidfd), and removes the directory.

    with Cluster(nodes=1, scale=0.01) as cl:
        cl.set_storage("sshfs")           # storage nodes, daemons, mounts; tables moved there
        cl.run_queries([6])
        cl.set_storage("local")           # tables moved back; every mount and daemon gone"""

from __future__ import annotations

import json
import os
import pwd
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from mwinv import serverdir
from mwinv.cgroup import CGROUP_V1_ROOT, Cgroup, block_device_of
from mwinv.cluster import storage_link
from mwinv.errors import MwinvError
from mwinv.signals import held

LOCAL = "local"
# a remote back-end may set its mounts' readahead (the FUSE bdi's read_ahead_kb: kernel.readahead's advice
# for a FUSE scan); it goes with the mount
LEVEL_RE = re.compile(r"(local|sshfs|glusterfs)(?::([1-4]))?(?:,read_ahead_kb=([1-9][0-9]{0,5}))?")
DEFAULT_BRICKS = 2
MAX_BRICKS = 4
LEVEL_TEXT = f"local, sshfs, glusterfs or glusterfs:K (K 1-{MAX_BRICKS}), a remote one optionally ,read_ahead_kb=N"
TABLESPACE = "mwinv_remote"
SSH_PORT = 2222                   # on the storage node's own address, in its own namespace
STORAGE_BASE_INDEX = 5            # storage nodes' addresses after the coordinator's and 4 data nodes'
SHARD_BLOCK = "4MB"               # GlusterFS's smallest shard
SHARD_BYTES = 4 << 20             # the same in bytes (GlusterFS's MB are MiB)
FUSE_READAHEAD_KB = 128           # a FUSE mount's bdi readahead unless set (at most this, lowered by the daemon)
GLUSTER_RUN = Path("/var/run/gluster")   # where glusterd puts brick sockets, whatever its run-directory
MOUNT_WAIT_S = 20
TOOLS = {"sshfs": ("sshfs", "/usr/sbin/sshd", "/usr/lib/openssh/sftp-server", "ssh", "ssh-keygen", "setpriv",
                   "nsenter"),
         "glusterfs": ("glusterd", "glusterfs", "gluster", "nsenter")}
# what clean may signal: the storage daemons (in the storage nodes' groups) and the FUSE clients with
# the ssh they start (in the data nodes' groups); never a server
DAEMON_EXES = {"sshd", "sftp-server", "glusterd", "glusterfsd", "glusterfs"}
CLIENT_EXES = {"sshfs", "ssh", "glusterfs", "glusterfsd"}   # glusterfs is a link to glusterfsd
# what glusterd makes of the package's own, whatever its working directory (removed when it made them)
GLUSTER_HOST_DIRS = (Path("/var/lib/glusterd/geo-replication"), Path("/var/lib/glusterd/ss_brick"), GLUSTER_RUN / "snaps")


def _match(level) -> re.Match:
    m = LEVEL_RE.fullmatch(level) if isinstance(level, str) else None
    if not m or (m.group(2) and m.group(1) != "glusterfs") or (m.group(3) and m.group(1) == LOCAL):
        raise MwinvError(f"{level!r}: a storage back-end is {LEVEL_TEXT}")
    return m


def parse(level) -> tuple[str, int]:
    """A level's back-end and its storage nodes per volume: local 0, sshfs 1, glusterfs 2 (glusterfs:K: K)."""
    kind, width = _match(level).group(1, 2)
    return kind, int(width or DEFAULT_BRICKS) if kind == "glusterfs" else int(kind == "sshfs")


def read_ahead_kb(level: str) -> int | None:
    """The readahead a level sets on its FUSE mounts' bdi (",read_ahead_kb=N"), None: FUSE's own."""
    n = _match(level).group(3)
    return int(n) if n else None


def is_level(level) -> bool:
    try:
        parse(level)
    except MwinvError:
        return False
    return True


def check_tools(levels) -> None:
    """One line naming what is missing for a plan's back-ends (before any cluster starts)."""
    for level in levels:
        kind, _ = parse(level)
        if kind == LOCAL:
            continue
        missing = [t for t in TOOLS[kind] if not shutil.which(t)]
        if missing:
            raise MwinvError(f"storage {level}: {', '.join(missing)} not installed (make deps)")
        if not os.path.exists("/dev/fuse"):
            raise MwinvError(f"storage {level}: no /dev/fuse (the kernel's FUSE is needed)")


def storage_root() -> Path:
    """mwinv's private storage directory (root/storage, 0711: postgres traverses it to the mounts)."""
    return serverdir._private_dir(serverdir.root() / "storage", 0o711)


def _mkdir(path: Path, mode: int = 0o700, owner: tuple[int, int] | None = None) -> Path:
    os.mkdir(path, mode)          # exclusive: an existing name is an error, never reused
    os.chmod(path, mode)
    if owner:
        os.chown(path, *owner)
    return path


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _mountinfo() -> list[tuple[str, str, str]]:
    """(mount point, file-system type, its super options) of the host's mount namespace (this process's)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, right = line.split(" - ", 1)
        point = left.split()[4].encode().decode("unicode_escape")
        out.append((point, *right.split()[0:3:2]))
    return out


def _mounts() -> list[tuple[str, str]]:
    """(mount point, file-system type) of the host's mount namespace."""
    return [(point, fstype) for point, fstype, _ in _mountinfo()]


def _umount(point: Path) -> None:
    subprocess.run(["umount", "-l", str(point)], capture_output=True)


def _run(argv: list[str], what: str, timeout: float = 60) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MwinvError(f"{what}: no answer in {timeout:g} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise MwinvError(f"{what}: {tail[-1] if tail else f'exit {proc.returncode}'}")
    return proc.stdout


def _log_tail(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][-200:] if lines else ""


def group_pids(group: Path, exes: set[str]) -> list[int]:
    """pidfds of the processes of cgroup `group` (CGROUP_V1_ROOT/<controller>/mwinv/<name>) whose
    executable is one of exes; each pid is opened first and checked after (still in the group, its
    executable), so a pid reused meanwhile is not signalled."""
    ctl, *rest = group.relative_to(CGROUP_V1_ROOT).parts
    rel = "/" + "/".join(rest)
    out = []
    for pid in _procs(group):
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
            lines = [ln.split(":", 2) for ln in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
            ours = any(ctl in c.split(",") and path == rel for _, c, path in lines)
        except (OSError, ValueError):
            ours, exe = False, ""
        if ours and exe in exes:
            out.append(fd)
        else:
            os.close(fd)
    return out


def stop_group(group: Path, exes: set[str], timeout_s: float = 5) -> int:
    """SIGTERM, then SIGKILL after timeout_s, to the processes group_pids finds; how many there were."""
    fds = group_pids(group, exes)
    try:
        alive = list(fds)
        for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5)):
            for fd in alive:
                try:
                    signal.pidfd_send_signal(fd, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while alive and time.monotonic() < deadline:   # a pidfd is readable once its process exits
                alive = [fd for fd in alive if not select.select([fd], [], [], 0)[0]]
                if alive:
                    select.select(alive, [], [], max(0.0, deadline - time.monotonic()))
            if not alive:
                break
        return len(fds)
    finally:
        for fd in fds:
            os.close(fd)


@dataclass
class StorageNode:
    """A machine that serves disks: a namespace on the cluster's bridge, a cgroup of a data node's size
    (its CPU quota, memory, and read rate on the host's disk: the remote disk)."""
    name: str
    netns: str
    address: str
    host_if: str
    cgroup: Cgroup
    dir: Path
    procs: list = field(default_factory=list)


class Storage:
    """The storage back-end `level` of every data node of a running cluster (Cluster.set_storage)."""

    def __init__(self, cluster, level: str):
        self.cluster, self.level = cluster, level
        self.kind, self.width = parse(level)
        self.read_ahead_kb = read_ahead_kb(level)
        self.root: Path | None = None
        self.nodes: dict[str, StorageNode] = {}
        self.served_by: dict[str, list[str]] = {}     # data node -> its storage nodes
        self.mounts: dict[str, Path] = {}             # data node -> mount point
        self.clients: list[subprocess.Popen] = []
        self.moved: dict[str, int] = {}               # data node -> relations in the tablespace
        self.sockets: set[Path] = set()               # brick sockets glusterd put in /var/run/gluster
        self.host_dirs: list[Path] = []               # GLUSTER_HOST_DIRS that glusterd made

    # ---- set up
    def up(self) -> "Storage":
        try:
            self._up()
        except BaseException:
            try:
                self.down()
            except MwinvError:
                pass   # the set-up's own error says what went wrong first
            raise
        return self

    def _say(self, text: str) -> None:
        self.cluster._say(text)

    def _up(self) -> None:
        tag = self.cluster.tag
        self.root = _mkdir(storage_root() / tag, 0o711)
        # shared, so that the data nodes' servers (restarted below) hold it as a slave: an unmount here
        # leaves their mount namespaces too, and the FUSE daemon exits with it
        _run(["mount", "--bind", str(self.root), str(self.root)], "storage: bind mount")
        _run(["mount", "--make-shared", str(self.root)], "storage: shared mount")
        count = len(self.cluster.data_nodes) if self.kind == "sshfs" else self.width
        for k in range(1, count + 1):
            self._storage_node(f"s{k}", STORAGE_BASE_INDEX + k - 1)
        for d in self.cluster.data_nodes:
            _mkdir(self.root / d, 0o711)
            self.mounts[d] = _mkdir(self.root / d / "mnt", 0o711)
        if self.kind == "sshfs":
            for i, d in enumerate(self.cluster.data_nodes, 1):
                self.served_by[d] = [f"s{i}"]
                self._sshfs(d, self.nodes[f"s{i}"])
        else:
            self._glusterfs()
        self._say(f"storage {self.level}: data nodes restarted to see their mounts")
        for d in self.cluster.data_nodes:
            self.cluster.servers[d].restart()
        for d in self.cluster.data_nodes:
            self._move_tables(d)

    def _storage_node(self, name: str, index: int) -> None:
        caps = self.cluster.node_caps
        link = self.cluster.net.add_node(name, index, on_created=self.cluster._link_created)
        if caps.link_mbit:
            self.cluster.net.shape(name, caps.link_mbit)
        dev = block_device_of(storage_root())
        cgroup = Cgroup(f"cl-{self.cluster.tag}-{name}", cpu_fraction=caps.cpu,
                        memory_bytes=caps.memory_mb * 2**20 if caps.memory_mb else None,
                        read_bps={dev: int(caps.read_mbps * 1e6)} if caps.read_mbps else None,
                        uncapped=("cpu", "memory", "blkio", "cpuacct"))
        node = StorageNode(name, link.netns, link.address, link.host_if, cgroup, self.root / name)
        self._forget(link.address)
        self.nodes[name] = node
        cgroup.create()
        _mkdir(node.dir, 0o711)

    def _start(self, node_cgroup: Cgroup, netns: str, argv: list[str], log: Path, mount_ns: bool = True):
        """argv in a cgroup and a network namespace (ip netns exec: its own mount namespace too; nsenter
        --net: the host's, where a FUSE client must mount), its output to log."""
        ns = ["ip", "netns", "exec", netns] if mount_ns else ["nsenter", f"--net=/run/netns/{netns}"]
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            return subprocess.Popen(node_cgroup.exec_prefix() + ns + argv, stdin=subprocess.DEVNULL, stdout=fd,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            os.close(fd)

    def _wait_mount(self, d: str, fstype: str, client: subprocess.Popen, log: Path) -> None:
        """Until d's mount is there; then the level's readahead on its bdi (gone with the mount)."""
        point = str(self.mounts[d])
        deadline = time.monotonic() + MOUNT_WAIT_S
        while (point, fstype) not in _mounts():
            if client.poll() is not None or time.monotonic() > deadline:
                raise MwinvError(f"storage {self.level}: {d} could not mount ({_log_tail(log) or 'no message'})")
            time.sleep(0.1)
        if self.read_ahead_kb is not None:
            bdi = fuse_readahead(self.mounts[d]).get("bdi")
            try:
                fd = os.open(f"/sys/class/bdi/{bdi}/read_ahead_kb", os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                with os.fdopen(fd, "w") as f:
                    f.write(f"{self.read_ahead_kb}\n")
            except OSError as exc:
                raise MwinvError(f"storage {self.level}: read_ahead_kb {self.read_ahead_kb} on {d}'s mount (bdi {bdi}): "
                                 f"{exc.strerror}") from None

    def _forget(self, address: str) -> None:
        """The neighbour entries for a storage node's address dropped, on the host and in the cluster's
        namespaces: the next cell's node gets the address with a new MAC, which a cached old one hides
        (without this, a second sshfs cell in one cluster took 71 s to set up and a third failed)."""
        for prefix in [[], *(["-n", link.netns] for link in self.cluster.net.links.values())]:
            subprocess.run(["ip", *prefix, "neigh", "flush", "to", address], capture_output=True)

    # ---- sshfs: one remote disk
    def _sshfs(self, d: str, node: StorageNode) -> None:
        pg = _postgres()
        ssh = _mkdir(node.dir / "ssh", 0o700)
        export = _mkdir(node.dir / "export", 0o700, pg)
        for key in ("host_key", "client_key"):
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"mwinv-{self.cluster.tag}", "-f",
                  str(ssh / key)], "storage: ssh-keygen")
        client_key = (ssh / "client_key.pub").read_text().strip()
        # the key may only start sftp-server, as postgres (the files it creates are then postgres's, as
        # PostgreSQL's checks want), in the export directory
        command = (f"{shutil.which('setpriv')} --reuid=postgres --regid=postgres --init-groups "
                   f"/usr/lib/openssh/sftp-server -d {export}")
        _write(ssh / "authorized_keys", f'restrict,command="{command}" {client_key}\n')
        _write(ssh / "sshd_config", "\n".join([
            f"ListenAddress {node.address}:{SSH_PORT}", f"HostKey {ssh / 'host_key'}", "PidFile none",
            f"AuthorizedKeysFile {ssh / 'authorized_keys'}", "AuthorizedKeysCommand none",
            "PermitRootLogin forced-commands-only", "AllowUsers root", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "HostbasedAuthentication no", "UsePAM no", "StrictModes yes",
            "X11Forwarding no", "AllowTcpForwarding no", "AllowAgentForwarding no", "PermitTunnel no",
            "PrintMotd no", "Subsystem sftp internal-sftp", ""]))
        host_key = (ssh / "host_key.pub").read_text().split()[:2]
        _write(ssh / "known_hosts", f"[{node.address}]:{SSH_PORT} {' '.join(host_key)}\n")
        _write(ssh / "ssh_config", "\n".join([
            "Host *", f"  Port {SSH_PORT}", "  User root", f"  IdentityFile {ssh / 'client_key'}",
            "  IdentitiesOnly yes", f"  UserKnownHostsFile {ssh / 'known_hosts'}", "  GlobalKnownHostsFile /dev/null",
            "  StrictHostKeyChecking yes", "  BatchMode yes", "  Compression no",
            # AES-GCM has the CPU's AES instructions: the cheapest cipher on both ends
            "  Ciphers aes128-gcm@openssh.com,chacha20-poly1305@openssh.com", ""]))
        _privsep_dir()
        sshd = self._start(node.cgroup, node.netns, [shutil.which("sshd") or "/usr/sbin/sshd", "-D", "-e", "-f",
                                                     str(ssh / "sshd_config")], ssh / "sshd.log")
        node.procs.append(sshd)
        _wait_port(node.address, SSH_PORT, sshd, f"storage sshfs: sshd on {node.name}", ssh / "sshd.log")
        log = self.root / d / "client.log"
        client = self._start(self.cluster.servers[d].cgroup, self.cluster.net.links[d].netns,
                             ["sshfs", "-f", "-F", str(ssh / "ssh_config"), f"{node.address}:", str(self.mounts[d]),
                              "-o", "allow_other,default_permissions"], log, mount_ns=False)
        self.clients.append(client)
        self._wait_mount(d, "fuse.sshfs", client, log)

    # ---- GlusterFS: a RAID0 of remote disks
    def _gluster(self, node: StorageNode, *args: str, what: str = "") -> str:
        g = node.dir / "glusterd"
        return _run(["gluster", "--mode=script", f"--glusterd-sock={g / 'run' / 'glusterd.socket'}",
                     f"--log-file={g / 'log' / 'cli.log'}", *args],
                    f"storage glusterfs: gluster {what or ' '.join(args[:2])} on {node.name}")

    def _glusterd(self, node: StorageNode) -> None:
        g = _mkdir(node.dir / "glusterd", 0o700)
        for sub in ("work", "run", "log"):
            _mkdir(g / sub, 0o700)
        _mkdir(node.dir / "bricks", 0o700)
        vol = Path("/etc/glusterfs/glusterd.vol").read_text()
        vol = vol.replace("/var/lib/glusterd", str(g / "work")).replace("end-volume", "\n".join([
            f"    option glusterd-sockfile {g / 'run' / 'glusterd.socket'}", f"    option run-directory {g / 'run'}",
            f"    option logging-directory {g / 'log'}", "end-volume"]))
        _write(g / "glusterd.vol", vol)
        proc = self._start(node.cgroup, node.netns, ["glusterd", "-N", "-f", str(g / "glusterd.vol"), "-p",
                                                     str(g / "run" / "glusterd.pid"), "-l", str(g / "log" / "glusterd.log")],
                           g / "log" / "out.log")
        node.procs.append(proc)
        deadline = time.monotonic() + 20
        while True:
            try:
                self._gluster(node, "peer", "status")
                return
            except MwinvError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise MwinvError(f"storage glusterfs: glusterd on {node.name} did not start "
                                     f"({_log_tail(g / 'log' / 'glusterd.log') or 'no message'})") from None
                time.sleep(0.2)

    def _glusterfs(self) -> None:
        nodes = list(self.nodes.values())
        self.host_dirs = [p for p in GLUSTER_HOST_DIRS if not p.exists()]
        for node in nodes:
            self._glusterd(node)
        first = nodes[0]
        for node in nodes[1:]:
            self._gluster(first, "peer", "probe", node.address)
        deadline = time.monotonic() + 30
        while self._gluster(first, "pool", "list").count("Connected") < len(nodes):
            if time.monotonic() > deadline:
                raise MwinvError("storage glusterfs: the storage nodes did not join one pool in 30 s")
            time.sleep(0.3)
        for d in self.cluster.data_nodes:
            self.served_by[d] = [n.name for n in nodes]
            volume = f"mwinv-{self.cluster.tag}-{d}"
            bricks = [f"{n.address}:{_mkdir(n.dir / 'bricks' / d, 0o700)}" for n in nodes]
            # force: the bricks are directories on the host's root file system, which glusterd refuses
            # without it; sharding spreads each file over the bricks in 4 MiB pieces
            self._gluster(first, "volume", "create", volume, *bricks, "force")
            self._gluster(first, "volume", "set", volume, "features.shard", "enable")
            self._gluster(first, "volume", "set", volume, "features.shard-block-size", SHARD_BLOCK)
            self._gluster(first, "volume", "start", volume)
            self.sockets |= set(brick_sockets(n.cgroup.path("cpu") for n in nodes))
            log = self.root / d / "client.log"
            client = self._start(self.cluster.servers[d].cgroup, self.cluster.net.links[d].netns,
                                 ["glusterfs", "-N", f"--volfile-server={first.address}", f"--volfile-id={volume}",
                                  "-l", str(log), str(self.mounts[d])], self.root / d / "client.out", mount_ns=False)
            self.clients.append(client)
            self._wait_mount(d, "fuse.glusterfs", client, log)
            os.chmod(self.mounts[d], 0o711)   # the volume's root has its bricks' mode: postgres traverses it

    # ---- the tables
    def _move_tables(self, d: str) -> None:
        from psycopg import sql

        space = self.mounts[d] / "pg"
        _mkdir(space, 0o700, _postgres())
        with self.cluster.servers[d].connect("tpch") as conn:
            conn.execute(sql.SQL("CREATE TABLESPACE {} LOCATION {}").format(sql.Identifier(TABLESPACE),
                                                                             sql.Literal(str(space))))
            self.moved[d] = 0
            self._say(f"storage {self.level}: {d}'s tables to {space}")
            for kind in ("TABLE", "INDEX", "MATERIALIZED VIEW"):
                conn.execute(sql.SQL("ALTER {} ALL IN TABLESPACE pg_default SET TABLESPACE {}").format(
                    sql.SQL(kind), sql.Identifier(TABLESPACE)))
            self.moved[d] = conn.execute("SELECT count(*) FROM pg_class c JOIN pg_tablespace t ON t.oid = c.reltablespace "
                                         "WHERE t.spcname = %s", [TABLESPACE]).fetchone()[0]

    def _move_back(self, d: str) -> None:
        from psycopg import sql

        with self.cluster.servers[d].connect("tpch") as conn:
            for kind in ("TABLE", "INDEX", "MATERIALIZED VIEW"):
                conn.execute(sql.SQL("ALTER {} ALL IN TABLESPACE {} SET TABLESPACE pg_default").format(
                    sql.SQL(kind), sql.Identifier(TABLESPACE)))
            conn.execute(sql.SQL("DROP TABLESPACE {}").format(sql.Identifier(TABLESPACE)))

    # ---- tear down
    def down(self, move_back: bool = True) -> None:
        """The tables back on the local disk (move_back, while the servers run), every mount unmounted,
        every daemon and client stopped, the storage nodes' namespaces, links and cgroups and the
        directory removed. Ctrl-C and SIGTERM wait until all are gone."""
        errors = []
        with held():
            if move_back:
                for d in list(self.moved):
                    try:
                        self._move_back(d)
                    except Exception as exc:   # noqa: BLE001 - the rest is removed whatever happened here
                        errors.append(f"{d}: tables not moved back ({str(exc).strip().splitlines()[0]})")
                    del self.moved[d]
            for point in self.mounts.values():
                _umount(point)
            for d in self.cluster.data_nodes:
                cgroup = self.cluster.servers[d].cgroup if d in self.cluster.servers else None
                if cgroup is not None and self.clients:
                    stop_group(cgroup.path("cpu"), CLIENT_EXES)
            for client in self.clients:
                _reap(client)
            for node in self.nodes.values():
                self.sockets |= set(brick_sockets([node.cgroup.path("cpu")]))
                stop_group(node.cgroup.path("cpu"), DAEMON_EXES)
                for proc in node.procs:
                    _reap(proc)
                node.cgroup.remove()
                subprocess.run(["ip", "link", "del", node.host_if], capture_output=True)
                subprocess.run(["ip", "netns", "del", node.netns], capture_output=True)
                self.cluster.net.links.pop(node.name, None)
                self._forget(node.address)
            remove_sockets(self.sockets)
            for p in self.host_dirs:
                remove_empty_dir(p)
            if self.root is not None:
                errors += remove_dir(self.root)
            self.nodes, self.clients, self.mounts = {}, [], {}
        if errors:
            raise MwinvError(f"storage {self.level}: " + "; ".join(errors))

    # ---- what the capture records
    def in_force(self) -> dict:
        caps = self.cluster.node_caps
        return {"backend": self.level, "kind": self.kind, "tablespace": TABLESPACE,
                "data_nodes": {d: {"served_by": self.served_by.get(d, []), "mount": str(self.mounts.get(d, "")),
                                   "relations": self.moved.get(d, 0), **fuse_readahead(self.mounts.get(d))}
                               for d in self.cluster.data_nodes},
                "storage_nodes": {n.name: {"address": n.address, "caps": n.cgroup.limits(), "link_mbit": caps.link_mbit}
                                  for n in self.nodes.values()}}

    def counters(self) -> dict:
        """What the stream's blocks did so far: per storage node its daemons' CPU (cpuacct), the time its
        quota throttled them, the bytes read from the host's disk (its cgroup: the remote disk) and over
        its link; per data node its FUSE client's CPU (with the ssh it runs) and the bytes over its link."""
        dev = block_device_of(storage_root())
        out = {"at_ns": time.monotonic_ns(), "storage_nodes": {}, "data_nodes": {}}
        for n in self.nodes.values():
            out["storage_nodes"][n.name] = {
                "cpu_ns": _int(n.cgroup.path("cpuacct") / "cpuacct.usage"),
                "throttled_ns": _cpu_stat(n.cgroup.path("cpu")).get("throttled_time", 0),
                "disk_read_bytes": _blkio_read(n.cgroup.path("blkio"), dev), **_link_bytes(n.host_if)}
        for d in self.cluster.data_nodes:
            cgroup = self.cluster.servers[d].cgroup
            fds = group_pids(cgroup.path("cpu"), CLIENT_EXES)
            try:
                cpu = sum(storage_link.pid_cpu_ns(pid) for pid in map(_pid_of, fds) if pid)
            finally:
                for fd in fds:
                    os.close(fd)
            out["data_nodes"][d] = {"client_cpu_ns": cpu, **_link_bytes(self.cluster.net.links[d].host_if)}
        out["connections"] = {  # which storage processes serve which data node (storage_link)
            "data_nodes": {d: storage_link.processes(_procs(self.cluster.servers[d].cgroup.path("cpu")), CLIENT_EXES)
                           for d in self.cluster.data_nodes},
            "storage_nodes": {n.name: storage_link.processes(_procs(n.cgroup.path("cpu"))) for n in self.nodes.values()}}
        return out


def fuse_readahead(point: Path | None) -> dict:
    """What governs the readahead of a FUSE mount (kernel_knobs.fuse_readahead): its bdi, which FUSE names
    after the mount's device, that bdi's read_ahead_kb, and the mount's own options (max_read: the
    largest read request); {} where nothing is mounted at point."""
    if point is None:
        return {}
    opts = next((o for p, fstype, o in _mountinfo() if p == str(point) and fstype.startswith("fuse")), None)
    if opts is None:
        return {}
    dev = os.stat(point).st_dev
    bdi = f"{os.major(dev)}:{os.minor(dev)}"
    ra = Path("/sys/class/bdi") / bdi / "read_ahead_kb"
    return {"bdi": bdi, "read_ahead_kb": _int(ra) if ra.exists() else None, "fuse_options": opts}


def _postgres() -> tuple[int, int]:

    pw = pwd.getpwnam("postgres")
    return pw.pw_uid, pw.pw_gid


def _privsep_dir() -> None:
    """sshd's privilege-separation directory, as openssh-server's service makes it (sshd checks it)."""
    try:
        os.mkdir("/run/sshd", 0o755)
    except FileExistsError:
        pass


def _wait_port(address: str, port: int, proc: subprocess.Popen, what: str, log: Path) -> None:

    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection((address, port), timeout=1):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise MwinvError(f"{what} did not start ({_log_tail(log) or 'no message'})") from None
            time.sleep(0.1)


def _reap(proc: subprocess.Popen) -> None:
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()   # our own child, by its handle
        proc.wait()


def _int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _procs(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _cpu_stat(group: Path) -> dict:
    try:
        return {k: int(v) for k, v in (ln.split() for ln in (group / "cpu.stat").read_text().splitlines())}
    except (OSError, ValueError):
        return {}


def _blkio_read(group: Path, dev: str) -> int:
    try:
        lines = (group / "blkio.throttle.io_service_bytes").read_text().splitlines()
    except OSError:
        return 0
    return sum(int(f[2]) for f in (ln.split() for ln in lines) if len(f) == 3 and f[0] == dev and f[1] == "Read")


def _link_bytes(host_if: str) -> dict:
    """Bytes over a node's link, on its host end: to the node (tx) and from it (rx)."""
    stats = Path("/sys/class/net") / host_if / "statistics"
    return {"to_node_bytes": _int(stats / "tx_bytes"), "from_node_bytes": _int(stats / "rx_bytes")}


def _pid_of(pidfd: int) -> int | None:
    """The pid a pidfd holds (its fdinfo's Pid line)."""
    try:
        return next(int(ln.split()[1]) for ln in Path(f"/proc/self/fdinfo/{pidfd}").read_text().splitlines()
                    if ln.startswith("Pid:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def brick_sockets(groups) -> list[Path]:
    """The sockets the bricks (glusterfsd -S) of these storage nodes' groups use under /var/run/gluster."""
    out = []
    for group in groups:
        for fd in group_pids(Path(group), DAEMON_EXES):
            pid = _pid_of(fd)
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0") if pid else []
            except OSError:
                argv = []
            finally:
                os.close(fd)
            out += [Path(argv[i + 1]) for i, a in enumerate(argv[:-1]) if a == "-S"]
    return [p for p in out if p.parent == GLUSTER_RUN and re.fullmatch(r"[0-9a-f]+\.socket", p.name)]


def remove_sockets(paths) -> None:

    for p in paths:
        try:
            if stat.S_ISSOCK(os.lstat(p).st_mode):
                p.unlink()
        except OSError:
            pass


def remove_empty_dir(path: Path) -> None:
    """A directory glusterd made, with the empty files it put there (geo-replication's template)."""

    try:
        for p in path.iterdir():
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_size == 0:
                p.unlink()
        path.rmdir()
    except OSError:
        pass


def remove_dir(root: Path) -> list[str]:
    """Unmount what is mounted at or under root (FUSE mounts, then its own bind), then remove it; a
    mount that stays keeps the directory (rmtree would descend into it)."""
    prefix = str(root)
    for point, _ in sorted(_mounts(), key=lambda m: -len(m[0])):
        if point == prefix or point.startswith(prefix + "/"):
            _umount(Path(point))
    left = [p for p, _ in _mounts() if p == prefix or p.startswith(prefix + "/")]
    if left:
        return [f"{left[0]} is still mounted; {root} kept"]
    shutil.rmtree(root, ignore_errors=True)
    return []


def remove_tagged(ours) -> list[str]:
    """What storage back-ends of clusters whose tag `ours(tag)` accepts left (a run killed with -9):
    mounts, FUSE clients in the data nodes' groups, daemons in the storage nodes' groups (their
    brick sockets), the directories. The groups themselves, links and namespaces go with the tag."""
    removed = []
    base = serverdir.root() / "storage"
    dirs = [p for p in base.iterdir() if re.fullmatch(r"[0-9a-f]{6}", p.name) and ours(p.name)] if base.is_dir() else []
    for d in dirs:
        for point, _ in sorted(_mounts(), key=lambda m: -len(m[0])):
            if point.startswith(str(d) + "/"):
                _umount(Path(point))
                removed.append(f"mount {point}")
    if CGROUP_V1_ROOT.exists():
        for group in CGROUP_V1_ROOT.glob("cpu/mwinv/cl-*"):
            parts = group.name.split("-")
            if len(parts) < 3 or not ours(parts[1]):
                continue
            if parts[2].startswith("s"):
                remove_sockets(brick_sockets([group]))
                n = stop_group(group, DAEMON_EXES)
            else:
                n = stop_group(group, CLIENT_EXES)
            if n:
                removed.append(f"{n} storage processes of cgroup {group.name}")
    for d in dirs:
        errors = remove_dir(d)
        removed += errors or [f"storage {d}"]
    return removed


# ---- attribution: remote storage's waits split over the stream's blocks ([Rauch]'s stream model)
def blocks(manifest: dict, start: dict | None = None, end: dict | None = None) -> list[dict]:
    """Each block on the remote data path with the work it did between two readings of the counters
    (Storage.counters; by default the manifest's over the measured passes) and its capacity (the cap it
    ran under, else the calibrated rate; a daemon without a quota: one CPU, sftp-server and each
    connection's sshd being single-threaded): busy_ns is the time that work takes it alone. All blocks
    carry the same stream, so the busiest bounds it."""
    rec, counters = manifest.get("storage") or {}, manifest.get("storage_counters")
    if not counters or rec.get("backend", LOCAL) == LOCAL:
        return []
    start, end = start or counters["start"], end or counters["end"]
    cal = manifest.get("calibration") or {}
    link_cal = max((v.get("rate_bps") or 0 for v in (cal.get("links") or {}).values()), default=0) or None
    disk_cal = (cal.get("disk") or {}).get("disk_rate_bps")
    nodes = manifest.get("nodes") or {}
    out = []

    def delta(side: str, node: str, key: str) -> int:
        return max(0, end[side][node].get(key, 0) - start[side][node].get(key, 0))

    def add(block: str, kind: str, node: str, work: float, unit: str, capacity: float | None, basis: str) -> None:
        out.append({"block": block, "kind": kind, "node": node, "work": work, "unit": unit, "capacity": capacity,
                    "basis": basis, "busy_ns": int(work / capacity * 1e9) if capacity else None})

    for s, info in rec.get("storage_nodes", {}).items():
        caps = info.get("caps") or {}
        mbit = info.get("link_mbit")
        link = max(delta("storage_nodes", s, "from_node_bytes"), delta("storage_nodes", s, "to_node_bytes"))
        add(f"link of {s}", "link", s, link, "bytes", mbit * 1e6 / 8 if mbit else link_cal,
            "cap" if mbit else "calibrated")
        cpu = caps.get("cpu")
        add(f"daemons on {s}", "daemons", s, delta("storage_nodes", s, "cpu_ns") / 1e9, "cpu_s", cpu or 1.0,
            "quota" if cpu else "one CPU")
        rate = next(iter((caps.get("read_bps") or {}).values()), None)
        add(f"disk of {s}", "disk", s, delta("storage_nodes", s, "disk_read_bytes"), "bytes", rate or disk_cal,
            "cap" if rate else "calibrated")
    for d in start.get("data_nodes", {}):
        caps = (nodes.get(d) or {}).get("caps") or {}
        mbit = caps.get("link_mbit")
        link = max(delta("data_nodes", d, "from_node_bytes"), delta("data_nodes", d, "to_node_bytes"))
        add(f"link of {d}", "link", d, link, "bytes", mbit * 1e6 / 8 if mbit else link_cal, "cap" if mbit else "calibrated")
        cpu = caps.get("cpu")
        add(f"FUSE client on {d}", "client", d, delta("data_nodes", d, "client_cpu_ns") / 1e9, "cpu_s", cpu or 1.0,
            "quota" if cpu else "one CPU")
    return out


def statement_window(marks: list[dict], start_ns: int, end_ns: int) -> tuple[dict, dict] | None:
    """The readings of the counters around one statement (the runner reads them after each query of a
    one-stream pass: `storage_counters.marks`): the last before it began and the first after it ended,
    when no other reading falls inside it; else None."""
    before = [m for m in marks if m["at_ns"] <= start_ns]
    after = [m for m in marks if m["at_ns"] >= end_ns]
    if not before or not after or any(start_ns < m["at_ns"] < end_ns for m in marks):
        return None
    return before[-1], after[0]


def attribute(db, statement_ids: list) -> dict:
    """The remote storage of a cell's statements: per coordinator statement the time its data nodes'
    statements slept on their FUSE tablespace (statement_remote_storage: FUSE's own waits, and the page
    cache's read waits on a node whose tables the manifest puts on FUSE), split over the blocks' kinds
    (link, serving daemons, remote disk, FUSE client) in proportion to the busy time of each kind over
    that statement's own run (`split_basis` "statement": the counters read before and after it), else
    over the measured passes ("pass": streams run side by side, or a capture without those readings);
    and the kind of block that bounds the stream (the busiest), over the passes and per statement. Where
    the readings around a statement link each waiting data node's FUSE client to its serving processes
    by their TCP connections (storage_link), its split follows those processes instead (linked_split,
    `split_by` "tcp", the proportional one kept as `counter_split_ns`); else `split_by` "counters"."""
    manifest = db.capture.manifest()
    bl = blocks(manifest)
    if not bl:
        return {}
    remote = {d for d, info in manifest["storage"].get("data_nodes", {}).items() if info.get("relations")}
    db.build("statement_remote_storage", *(["statement_link"] if db.has("session") else []))
    ids = [s for s in statement_ids if s is not None]
    parent = {s: s for s in ids}
    if db.has("session"):   # a data node's statements under the coordinator's they served
        parent.update(db.sql("SELECT statement_id, parent_statement_id FROM statement_link "
                             "WHERE list_contains($1, parent_statement_id)", [ids]).fetchall())
    per: dict[int, dict] = {}
    for node, sid, fuse_ns, fuse_sleeps, page_ns, page_sleeps in db.sql(
            "SELECT node, statement_id, fuse_ns, fuse_sleeps, page_wait_ns, page_sleeps FROM statement_remote_storage "
            "WHERE list_contains($1, statement_id)", [list(parent)]).fetchall():
        st = per.setdefault(parent[sid], {"remote_ns": 0, "sleeps": 0, "local_page_wait_ns": 0, "by_node": {}})
        ns = fuse_ns + (page_ns if node in remote else 0)
        st["remote_ns"] += ns
        st["sleeps"] += fuse_sleeps + (page_sleeps if node in remote else 0)
        st["local_page_wait_ns"] += 0 if node in remote else page_ns
        if ns:
            st["by_node"][node] = st["by_node"].get(node, 0) + ns
    served = set(manifest["storage"].get("storage_nodes", {}))
    in_flight = shards_in_flight(manifest["storage"])
    kinds = kind_busy(bl, served, in_flight)
    marks = manifest["storage_counters"].get("marks") or []
    windows = {sid: (s, e) for sid, s, e in db.sql(
        "SELECT statement_id, start_ns, end_ns FROM statement_clean WHERE list_contains($1, statement_id)",
        [list(per)]).fetchall()} if marks else {}
    for sid, st in per.items():
        around = statement_window(marks, *windows[sid]) if sid in windows else None
        own = kind_busy(blocks(manifest, *around), served, in_flight) if around else {}
        use = own if sum(v["busy_ns"] for v in own.values()) else kinds
        total = sum(v["busy_ns"] for v in use.values()) or 1
        st["split_basis"] = "statement" if use is own else "pass"
        st["split_ns"] = {k: int(st["remote_ns"] * v["busy_ns"] / total) for k, v in use.items()}
        st["bound"] = max(use, key=lambda k: use[k]["busy_ns"], default=None)
        st["busy_ns"] = {k: v["busy_ns"] for k, v in use.items()}
        linked = storage_link.work(*(r["connections"] for r in around)) \
            if use is own and all("connections" in r for r in around) else {}
        st["split_by"] = "counters"
        if linked and set(st["by_node"]) <= set(linked):   # every waiting data node's requests followed
            st["counter_split_ns"], st["split_by"] = st["split_ns"], "tcp"
            st["split_ns"], st["linked_busy_ns"] = linked_split(manifest, linked, st["by_node"], windows[sid], in_flight)
            st["links"] = linked
    bound = max(kinds, key=lambda k: kinds[k]["busy_ns"], default=None)
    return {"backend": manifest["storage"]["backend"], "blocks": bl, "kinds": kinds, "bound": bound,
            "statements": {str(k): v for k, v in per.items()}}


def linked_split(manifest: dict, linked: dict, waits: dict, window: tuple[int, int], in_flight: float) -> tuple:
    """A statement's remote wait split by following its requests (storage_link.work over its window): per
    data node the CPU of the processes serving its connections (over the storage node's quota), their
    disk reads (over its read rate) and its FUSE client's CPU, each as its critical path (kind_busy);
    of each the share that fell in the data node's waits, taking the work as spread over the statement
    (a cold sshfs scan's disk reads ahead while PostgreSQL computes); the link is what remains of the
    wait. Work that overlaps (the disk reading ahead while the link carries the last reply) can exceed
    the wait: then the three fill it in proportion and the link's time lay under theirs (0). Returns the
    split and the linked blocks' busy times per kind (summed over the data nodes)."""
    rec, cal = manifest["storage"], manifest.get("calibration") or {}
    nodes = manifest.get("nodes") or {}
    span = max(1, window[1] - window[0])
    split, busy_ns = dict.fromkeys(SPLIT_KINDS, 0), {}
    for d, wait in waits.items():
        bl = []
        for s, w in linked[d]["storage_nodes"].items():
            caps = (rec["storage_nodes"].get(s) or {}).get("caps") or {}
            rate = next(iter((caps.get("read_bps") or {}).values()), None) or (cal.get("disk") or {}).get("disk_rate_bps")
            bl += [{"block": f"daemons on {s}", "kind": "daemons", "node": s,
                    "busy_ns": int(w["cpu_ns"] / (caps.get("cpu") or 1.0))},
                   {"block": f"disk of {s}", "kind": "disk", "node": s,
                    "busy_ns": int(w["read_bytes"] / rate * 1e9) if rate else 0}]
        cpu = ((nodes.get(d) or {}).get("caps") or {}).get("cpu") or 1.0
        bl.append({"block": f"FUSE client on {d}", "kind": "client", "node": d,
                   "busy_ns": int(linked[d]["client_cpu_ns"] / cpu)})
        busy = kind_busy(bl, set(linked[d]["storage_nodes"]), in_flight)
        for k, v in busy.items():
            busy_ns[k] = busy_ns.get(k, 0) + v["busy_ns"]
        served = {k: busy[k]["busy_ns"] * min(1.0, wait / span) if k in busy else 0 for k in ("daemons", "disk", "client")}
        fit = min(1.0, wait / (sum(served.values()) or 1))
        for k, v in served.items():
            split[k] += int(v * fit)
        split["link"] += wait - sum(int(v * fit) for v in served.values())
    return split, busy_ns


def shards_in_flight(rec: dict) -> float:
    """How many storage nodes serve a sequential scan at once: a readahead window of R bytes spans 1 + R/S
    shards of S bytes on average, each on one brick, and at most one per storage node. FUSE's own 128 KiB
    keeps the reads within one 4 MiB shard (1.03), 4 MiB spans two. sshfs (one node): 1. The window is
    the data nodes' bdi readahead read at set-up, else the level's, else FUSE's own."""
    n = len(rec.get("storage_nodes") or {})
    if rec.get("kind") != "glusterfs" or n <= 1:
        return 1.0
    window = max((d.get("read_ahead_kb") or 0 for d in (rec.get("data_nodes") or {}).values()), default=0) \
        or read_ahead_kb(rec.get("backend", "")) or FUSE_READAHEAD_KB
    return min(float(n), 1 + window * 1024 / SHARD_BYTES)


def kind_busy(bl: list[dict], storage_nodes: set[str], in_flight: float = 1.0) -> dict:
    """Per kind of block the time the stream needs from it, its critical path: on the storage nodes their
    blocks' busy times summed over the shards in flight (shards_in_flight: with one, the bricks serve in
    turn and the sum is the path; measured, 4 bricks' disks 0.7-1.7 s each and 4.7 s together, as long as
    one disk reading it all), never less than the busiest of them; on a data node its busiest block (its
    link carries every byte); the larger."""
    out: dict[str, dict] = {}
    for b in bl:
        if not b["busy_ns"]:
            continue
        k = out.setdefault(b["kind"], {"summed_ns": 0, "storage_busiest_ns": 0, "data_node_ns": 0,
                                       "busiest": None, "busiest_ns": 0})
        if b["node"] in storage_nodes:
            k["summed_ns"] += b["busy_ns"]
            k["storage_busiest_ns"] = max(k["storage_busiest_ns"], b["busy_ns"])
        else:
            k["data_node_ns"] = max(k["data_node_ns"], b["busy_ns"])
        if b["busy_ns"] > k["busiest_ns"]:
            k["busiest"], k["busiest_ns"] = b["block"], b["busy_ns"]
    for k in out.values():
        k["in_flight"] = round(in_flight, 3)
        k["critical_ns"] = int(max(k.pop("storage_busiest_ns"), k["summed_ns"] / in_flight))
        k["busy_ns"] = max(k["critical_ns"], k["data_node_ns"])
    return out


SPLIT_KINDS = ("link", "daemons", "disk", "client")


def cells(out: Path) -> dict:
    """An experiment's storage cells: per result (back-end, query, repetition) its wall time, the data
    nodes' waits on remote storage and their split over SPLIT_KINDS; per remote back-end's cell its blocks
    and the kind that bounds the stream. Empty when no cell ran a remote back-end."""
    import pyarrow.parquet as pq

    attr = {p.stem: a for p in sorted((out / "storage").glob("*.json")) if (a := json.loads(p.read_text()))}
    if not attr:
        return {}
    rows = [r for p in sorted((out / "results").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    queries = []
    for r in sorted(rows, key=lambda r: ((r.get("storage") or LOCAL) != LOCAL, r.get("storage") or "", r["query"],
                                         r["repetition"])):
        st = (attr.get(r["cell"]) or {}).get("statements", {}).get(str(r["statement_id"]))
        queries.append({"storage": r.get("storage") or LOCAL, "query": r["query"], "cell": r["cell"],
                        "wall_ns": r["wall_ns"], "remote_ns": st["remote_ns"] if st else None,
                        "split_ns": st["split_ns"] if st else {},
                        # an older attribution split every statement over the pass
                        "split_over": (st.get("split_basis") or "pass")
                        + (", linked by TCP" if st.get("split_by") == "tcp" else "") + (f" (bound: {st['bound']})"
                                                                           if st.get("bound") else "")
                        if st else "-"})
    return {"queries": queries, "backends": [{"cell": c, **a} for c, a in attr.items()]}


def markdown(s: dict) -> list[str]:
    """cells() as markdown lines: the per-query table, then per back-end its bound and its blocks."""
    lines = ["| storage | query | wall | remote wait (data nodes) | link | daemons | disk | FUSE client | split over |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    ms = lambda ns: f"{ns / 1e6:,.0f} ms" if ns is not None else "-"   # noqa: E731
    for r in s["queries"]:
        lines.append(f"| {r['storage']} | Q{r['query']} | {ms(r['wall_ns'])} | {ms(r['remote_ns'])} | " +
                     " | ".join(ms(r["split_ns"].get(k)) if r["remote_ns"] is not None else "-" for k in SPLIT_KINDS)
                     + f" | {r['split_over']} |")
    for a in s["backends"]:
        k = a["kinds"][a["bound"]]
        # an attribution before the critical path summed the storage nodes' blocks
        path = (f": {ms(k['summed_ns'])} summed over {k['in_flight']:g} shards in flight"
                if k.get("in_flight", 1) > 1 else "")
        lines += ["", f"{a['backend']} (cell {a['cell']}): bound by **{a['bound']}** ({ms(k['busy_ns'])} busy{path}; "
                      f"its busiest block {k['busiest']}, {ms(k['busiest_ns'])})", "",
                  "| block | work | capacity | busy |", "|---|---:|---:|---:|"]
        for b in a["blocks"]:
            work = f"{b['work'] / 1e6:,.1f} MB" if b["unit"] == "bytes" else f"{b['work']:.2f} CPU s"
            cap = (f"{b['capacity'] / 1e6:,.1f} MB/s" if b["unit"] == "bytes" else f"{b['capacity']:g} CPU") \
                if b["capacity"] else "-"
            lines.append(f"| {b['block']} | {work} | {cap} ({b['basis']}) | {ms(b['busy_ns'])} |")
    return lines


def summary(out: Path) -> str:
    """cells() as markdown text."""
    s = cells(out)
    if not s:
        if not list((out / "results").glob("*.parquet")):
            raise MwinvError(f"{out}: no results (mwinv experiment run PLAN -o {out})")
        raise MwinvError(f"{out}: no cell ran a remote storage back-end (plan factor storage)")
    return "\n".join(markdown(s)) + "\n"


def main() -> None:
    import click

    from mwinv.cli.common import run_main

    @click.command()
    @click.argument("out", type=click.Path(path_type=Path))
    def storage_cmd(out: Path) -> None:
        """The storage cells of the experiment in OUT (plan factor `storage`): per back-end and query the
        wall time and the data nodes' waits on remote storage, split over link, serving daemons, remote
        disk and FUSE client; per back-end its blocks and the one that bounds the stream.

        \b
        Example:
          mwinv experiment run examples/plans/storage-backends.toml -o out/storage
          python -m mwinv.cluster.storage out/storage
        """
        click.echo(summary(out), nl=False)

    run_main(storage_cmd, "python -m mwinv.cluster.storage")


if __name__ == "__main__":
    main()
