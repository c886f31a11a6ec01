"""A throw-away distributed PostgreSQL on one host: a coordinator and 1..4 data nodes, each a server
with the mwinv extension in its own network namespace (veth to a bridge), capped with cgroup v1 (CPU
quota, memory, disk read rate) so that each node is a machine of its own size and adding nodes adds
capacity, links shaped with tbf; TPC-H distributed by a partitioning scheme (mwinv/cluster/distribute.py).

    with Cluster(nodes=2, scale=0.01) as cl:       # up; down on exit, Ctrl-C, SIGTERM, test failure
        cl.coordinator.connect("tpch")

A cluster's state file (clusters/<tag>.json in mwinv's private directory, mwinv/serverdir.py) is
written as soon as it exists; everything else it makes carries its tag (servers, cgroups, links,
bridge, namespaces), so `down()` and `clean()` find what a run killed with -9 left from the tag alone,
never from paths a file lists."""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from mwinv.cgroup import CGROUP_V1_ROOT, Cgroup, block_device_of, remove_group, remove_group_said
from mwinv.cluster import distribute, storage
from mwinv.cluster.net import NETNS_PREFIX, ClusterNet, ip, leftovers
from mwinv.engines.postgresql.reader import remove_stale_rings
from mwinv import serverdir
from mwinv.kernel_settings import KernelSettings
from mwinv.kernel_settings import clean_stale as restore_stale_settings
from mwinv.errors import MwinvError
from mwinv.kernel_trace.tracefs import clean_stale
from mwinv.engines.postgresql.server import PgServer
from mwinv.signals import held
from mwinv.workloads import tpch

TAG_RE = re.compile(r"[0-9a-f]{6}")
MAX_DATA_NODES = 4
COORDINATOR = "coord"


@dataclass
class NodeCaps:
    cpu: float | None = 0.5            # CPUs (cgroup cpu quota); None: uncapped
    memory_mb: int | None = 512
    read_mbps: float | None = None     # disk read rate (blkio throttle), MB/s
    link_mbit: float | None = None     # each way
    link_latency_ms: float | None = None   # added each way by a relay on the host (cluster/relay.py)


@dataclass
class Cluster:
    nodes: int = 2
    scale: float = 0.01
    scheme: "str | distribute.Scheme" = "2-part"   # a name, a scheme file, or a Scheme
    node_caps: NodeCaps = field(default_factory=NodeCaps)
    coordinator_caps: NodeCaps = field(default_factory=lambda: NodeCaps(cpu=None, memory_mb=None))
    preload: tuple[str, ...] = ("mwinv",)
    progress: object = None

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= MAX_DATA_NODES:
            raise MwinvError(f"--nodes {self.nodes}: a cluster has 1 to {MAX_DATA_NODES} data nodes")
        self.scheme_def = distribute.resolve_scheme(self.scheme)
        self.scheme = self.scheme_def.name
        self.tag = uuid.uuid4().hex[:6]
        self.net = ClusterNet(self.tag)
        self.servers: dict[str, PgServer] = {}
        self.relays: list = []
        self.kernel: KernelSettings | None = None
        self.storage = None   # mwinv/cluster/storage.py: the data nodes' back-end, when not local
        self.state_file = serverdir.clusters_dir() / f"{self.tag}.json"
        self._state = {"tag": self.tag, "pid": os.getpid(), "owner": serverdir.owner_stamp(), "scale": self.scale,
                       "scheme": self.scheme_def.name, "nodes": self.nodes, "netns": [], "links": [], "bridge": None,
                       "cgroups": [], "servers": {}}

    # ---- names
    @property
    def data_nodes(self) -> list[str]:
        return [f"d{i}" for i in range(1, self.nodes + 1)]

    @property
    def coordinator(self) -> PgServer:
        return self.servers[COORDINATOR]

    def address(self, node: str) -> str:
        return self.net.links[node].address

    # ---- state file: what exists, written before it is used
    def _save(self) -> None:
        serverdir.clusters_dir()
        serverdir.write_record(self.state_file, self._state)

    def _say(self, text: str) -> None:
        if self.progress:
            self.progress(text)

    # ---- lifecycle
    def up(self) -> "Cluster":
        if os.geteuid() != 0:
            raise MwinvError("a cluster needs root (network namespaces, cgroups)")
        self._save()
        try:
            self._say("network: bridge and one namespace per node")
            self.net.create_bridge()
            self._state["bridge"] = self.net.bridge
            self._save()
            for i, node in enumerate([COORDINATOR, *self.data_nodes]):
                self.net.add_node(node, i, on_created=self._link_created)
                caps = self.coordinator_caps if node == COORDINATOR else self.node_caps
                if caps.link_mbit:
                    self.net.shape(node, caps.link_mbit)
            for node in [COORDINATOR, *self.data_nodes]:
                self._say(f"server {node}")
                self._start_server(node)
            self._say(f"TPC-H SF {self.scale:g}, scheme {self.scheme}")
            self._load()
            self._cap_memory()
        except BaseException:
            self.down()
            raise
        return self

    def _cap_memory(self) -> None:
        """Each node's memory cap, once loaded (the caps are for the queries)."""
        for node, server in self.servers.items():
            caps = self.coordinator_caps if node == COORDINATOR else self.node_caps
            if caps.memory_mb and server.cgroup is not None:
                server.cgroup.limit_memory(caps.memory_mb * 2**20)
        if self.node_caps.memory_mb:
            self._say(f"memory cap {self.node_caps.memory_mb} MB a data node")

    def resize(self, caps: NodeCaps) -> None:
        """Give the data nodes other caps without a reload (an experiment's cells that differ only in
        caps share one cluster): CPU quota, memory (the kernel reclaims down to it; a cap below what the
        server holds fails), disk read rate, link rate. The added link latency is the cluster's own (its
        relays): another latency needs another cluster."""
        if caps.link_latency_ms != self.node_caps.link_latency_ms:
            raise MwinvError(f"link latency {caps.link_latency_ms} ms: the cluster was built with "
                             f"{self.node_caps.link_latency_ms} ms (its relays); start another cluster")
        dev = block_device_of(serverdir.servers_dir())
        for node in self.data_nodes:
            cgroup = self.servers[node].cgroup
            cgroup.limit_cpu(caps.cpu)
            cgroup.limit_memory(caps.memory_mb * 2**20 if caps.memory_mb else -1)
            cgroup.limit_read(dev, int(caps.read_mbps * 1e6) if caps.read_mbps else None)
            if caps.link_mbit:
                self.net.shape(node, caps.link_mbit)
            else:
                self.net.unshape(node)
        self.node_caps = caps

    def set_kernel(self, settings: dict) -> None:
        """Kernel settings for the queries that follow (mwinv/kernel_settings.py): those in force restored,
        these written and read back. On one host they apply to every node."""
        if self.kernel is not None:
            self.kernel.restore()
            self.kernel = None
        if settings:
            self.kernel = KernelSettings(settings).apply()

    def set_storage(self, level: str) -> None:
        """The data nodes' storage back-end for the queries that follow (mwinv/cluster/storage.py: local,
        sshfs, glusterfs[:K]): the one in force removed (its tables moved back), this one set up."""
        if self.storage is not None:
            current, self.storage = self.storage, None
            current.down()
        if storage.parse(level)[0] != storage.LOCAL:
            self.storage = storage.Storage(self, level).up()

    def storage_in_force(self) -> dict:
        return self.storage.in_force() if self.storage else {"backend": "local"}

    def kernel_in_force(self) -> dict:
        return self.kernel.in_force() if self.kernel else {}

    def caps_in_force(self, node: str) -> dict:
        """A node's caps as the kernel holds them (its cgroup) and its link rate."""
        caps = self.coordinator_caps if node == COORDINATOR else self.node_caps
        cgroup = self.servers[node].cgroup
        return {**(cgroup.limits() if cgroup else {}), "link_mbit": caps.link_mbit,
                "link_latency_ms": caps.link_latency_ms}

    def _link_created(self, link) -> None:
        self._state["netns"].append(link.netns)
        self._state["links"].append(link.host_if)
        self._save()

    def _start_server(self, node: str) -> None:
        caps = self.coordinator_caps if node == COORDINATOR else self.node_caps
        name = f"cl-{self.tag}-{node}"
        cgroup = None
        if node != COORDINATOR or caps.cpu or caps.memory_mb or caps.read_mbps:
            dev = block_device_of(serverdir.servers_dir()) if caps.read_mbps else None
            # the memory group now, its cap after the load (_cap_memory): building lineitem's keys on a
            # 128 MB data node at SF 1 had the OOM killer end the server. A data node joins all three
            # controllers, so that resize() can set any cap later.
            cgroup = Cgroup(name, memory_bytes=-1 if caps.memory_mb else None,
                            cpu_fraction=caps.cpu, read_bps={dev: int(caps.read_mbps * 1e6)} if dev else None,
                            uncapped=() if node == COORDINATOR else ("cpu", "memory", "blkio"))
            cgroup.create()
            self._state["cgroups"] += [str(cgroup.path(c)) for c in cgroup.controllers()]
            self._save()
        # connections logged with the backend's pid: a node's sessions (who connected for whom) are
        # then all known, also those too short for a poll of pg_stat_activity to see (50 ms ones)
        gucs = {"compute_query_id": "on", "shared_buffers": "'32MB'", "jit": "off", "log_connections": "on",
                "log_line_prefix": "'%m [%p] '"}
        if node == COORDINATOR:
            gucs.update(distribute.COORDINATOR_GUCS)
        server = PgServer(name=name, listen_addresses=self.address(node), netns=self.net.links[node].netns,
                          cgroup=cgroup, shared_preload_libraries=list(self.preload), gucs=gucs)
        self.servers[node] = server
        server.start()   # its base directory exists from here on (PgServer removes it if start fails)
        self._state["servers"][node] = {"base_dir": str(server.base_dir), "port": server.port,
                                        "netns": server.netns, "address": self.address(node)}
        self._save()

    def _load(self) -> None:
        data_dir = tpch.generate(self.scale, progress=self._say)
        for server in self.servers.values():
            server.psql("CREATE DATABASE tpch")
        conns = {n: s.connect("tpch") for n, s in self.servers.items()}
        try:
            if "mwinv" in self.preload:
                for conn in conns.values():
                    conn.execute("CREATE EXTENSION IF NOT EXISTS mwinv")
            data = {n: (conns[n], self.address(n), self.servers[n].port) for n in self.data_nodes}
            scheme = self.scheme_def
            distribute.create_schema(conns[COORDINATOR], data, scheme)
            self.row_counts = distribute.load(conns[COORDINATOR], data, scheme, data_dir, progress=self._say)
            if self.node_caps.link_latency_ms:
                self._relay_links(conns[COORDINATOR])
        finally:
            for conn in conns.values():
                conn.close()

    def _relay_links(self, coordinator) -> None:
        """After the load (its per-row inserts would each pay the latency): the coordinator reaches each
        data node through a relay that delays every chunk by link_latency_ms each way."""
        from mwinv.cluster.relay import LatencyRelay

        for node in self.data_nodes:
            relay = LatencyRelay(self.net.host_address, (self.address(node), self.servers[node].port),
                                 self.node_caps.link_latency_ms).start()
            self.relays.append(relay)
            host, port = relay.address
            coordinator.execute(f"ALTER SERVER {node} OPTIONS (SET host '{host}', SET port '{port}')")
        self._say(f"links: +{self.node_caps.link_latency_ms:g} ms each way (relays on the host)")

    def down(self) -> None:
        """Stop the servers, remove their cgroups, links, bridge and namespaces and the state file (Ctrl-C and
        SIGTERM wait until all are gone)."""
        with held():
            if self.kernel is not None:
                self.kernel.restore()
            for relay in self.relays:
                relay.stop()
            for server in self.servers.values():
                server.stop()
            if self.storage is not None:
                self.storage.down(move_back=False)
            self.net.remove()
            _remove_cgroups(self._state["cgroups"])
            self.state_file.unlink(missing_ok=True)

    def __enter__(self) -> "Cluster":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

    def detach(self) -> dict:
        """Leave the cluster running after this process exits (`mwinv cluster up`): its state file no
        longer names a live owner, and `clean` leaves it alone until `down` or `clean --all`."""
        if self.relays:
            raise MwinvError("a cluster with link latency cannot be detached: its relays live in this process")
        for server in self.servers.values():
            server.detach()
        self._state.update(pid=0, owner=None, detached=True)
        self._save()
        return self._state

    def run_queries(self, numbers: list[int], **kw):
        from mwinv.workloads.runner import run_queries

        return run_queries(self.coordinator, numbers, **kw)


def _remove_cgroups(paths: list[str]) -> None:
    for p in map(Path, paths):
        remove_group(p)


def check_tag(tag: str) -> str:
    if not TAG_RE.fullmatch(tag):
        raise MwinvError(f"cluster tag {tag!r}: not a tag (6 hex digits; mwinv cluster list)")
    return tag


def read_state(tag: str) -> dict:
    f = serverdir.clusters_dir() / f"{check_tag(tag)}.json"
    try:
        state = json.loads(f.read_text())
    except FileNotFoundError:
        raise MwinvError(f"{f}: no such cluster (mwinv cluster list)") from None
    except json.JSONDecodeError as exc:
        raise MwinvError(f"{f}: line {exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(state, dict) or not isinstance(state.get("servers"), dict):
        raise MwinvError(f"{f}: not a cluster state (no servers)")
    return state


def clusters() -> list[dict]:
    """The state of every cluster this host knows."""
    out = []
    for f in sorted(serverdir.clusters_dir().glob("*.json")):
        try:
            out.append(read_state(f.stem))
        except MwinvError:
            continue
    return out


def _server_dirs(tag: str) -> list[Path]:
    """The server directories of cluster tag (server names cl-<tag>-<node>)."""
    return [base for base, _ in serverdir.server_records() if base.name.startswith(f"pg-cl-{tag}-")]


def coordinator_of(tag: str) -> PgServer:
    """A handle on a running cluster's coordinator (connect, restart for cold runs)."""
    info = read_state(tag)["servers"].get(COORDINATOR)
    base = [b for b in _server_dirs(tag) if b.name.startswith(f"pg-cl-{tag}-{COORDINATOR}-")]
    if not info or not base:
        raise MwinvError(f"cluster {tag}: no coordinator was started")
    server = PgServer(name=f"cl-{tag}-{COORDINATOR}", port=int(info["port"]), base_dir=base[0],
                      netns=f"{NETNS_PREFIX}{tag}-{COORDINATOR}", listen_addresses=info["address"])
    server.run_as = "postgres"
    if not server.socket_dir.exists():
        raise MwinvError(f"cluster {tag}: {server.socket_dir} is gone (the cluster died: mwinv cluster clean)")
    return server


def down(tag: str) -> list[str]:
    """Stop and remove one cluster (running or left by a dead run): what carries its tag. Returns a line
    for the cluster, then one for each thing removed and for each thing left, with why."""
    state = read_state(tag)
    lines = _remove_tagged({tag})
    (serverdir.clusters_dir() / f"{tag}.json").unlink(missing_ok=True)
    return [f"cluster {tag}: {len(state['servers'])} servers, {len(state.get('netns', []))} namespaces", *lines]


def _remove_tagged(tags: set[str] | None, spare: set[str] = frozenset()) -> list[str]:
    """Stop and remove the servers, cgroups, links and namespaces of clusters tags (None: every tag
    but those in spare): a line for each thing removed and for each thing left, with why."""
    def ours(tag: str) -> bool:
        return tag in tags if tags is not None else tag not in spare

    def cluster_server(base: Path, record: dict) -> bool:
        name = base.name.split("-")
        # pgpool's directory carries no tag, its cgroup does (cl-<tag>-pgpool): stopped before the group
        return (name[:2] == ["pg", "cl"] and len(name) > 2 and ours(name[2])) or any(
            Path(g).name.startswith("cl-") and ours(Path(g).name.split("-")[1]) for g in record.get("cgroups") or [])

    # the servers' groups are tagged and go below, after the storage's processes that hold them too
    lines = serverdir.clean_servers(cluster_server, groups=False)
    lines += storage.remove_tagged(ours)
    for ctl_dir in (CGROUP_V1_ROOT.glob("*/mwinv/cl-*") if CGROUP_V1_ROOT.exists() else []):
        if ours(ctl_dir.name.split("-")[1]):
            lines.append(remove_group_said(ctl_dir))
    spaces, links = leftovers()
    for what, name in [("link", n) for n in links if ours(n[3:9])] + [("netns", n) for n in spaces
                                                                      if ours(n.split("-")[2])]:
        try:
            ip(what, "del", name)
            lines.append(f"{what} {name}")
        except MwinvError as exc:
            lines.append(f"{what} {name} is left: {exc}")
    return lines


def clean(all_clusters: bool = False) -> list[str]:
    """Remove what dead runs left (all clusters with all_clusters): servers whose owning mwinv process
    is gone (`mwinv tpch`, tests, clusters), and clusters' cgroups, links, bridges and namespaces, also
    those a run killed before it wrote them down; the kernel settings such runs changed are restored.
    Returns a line for each thing removed and restored, and for each thing left, with why."""
    lines = []
    for state in clusters():
        if all_clusters or not _live(state):
            lines += down(state["tag"])
    # what no state file names: a run killed between creating a thing and writing it down
    lines += _remove_tagged(None, spare=set() if all_clusters else {c["tag"] for c in clusters() if _live(c)})
    lines += serverdir.clean_servers(serverdir.orphaned)
    lines += remove_stale_rings()
    lines += restore_stale_settings()   # kernel settings of runs killed with -9
    try:   # the trace instances and uprobes of dead captures of its nodes
        lines += clean_stale()
    except MwinvError:
        pass   # no tracefs here: nothing was traced
    return list(dict.fromkeys(lines))   # a thing a dead cluster's down left is tried again, and said once


def _live(state: dict) -> bool:
    """A cluster whose owning process is alive, or that was left running on purpose."""
    return bool(state.get("detached")) or serverdir.owner_alive(state.get("owner"))
