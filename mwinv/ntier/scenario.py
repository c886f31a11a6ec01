"""Read-only scale-out on this host: a PostgreSQL primary with 1..3 streaming replicas (pg_basebackup,
hot standby) and pgpool-II load balancing the reads over the replicas, each tier a machine of its own:
its own network namespace joined by a veth to a bridge (the cluster harness's, mwinv/cluster/net.py),
optionally capped (cgroup CPU quota, disk read rate, link rate with tbf). The bulletin board
(mwinv/ntier/bboard.py) is loaded and its browse mix run by pgbench from the host at each load level
with a client ramp: groups of clients start one after the other (ramp-up), all run (the measured
period), then stop one after the other (ramp-down).

    with NTier(NTierConfig(replicas=2)) as nt:      # up; down on exit, Ctrl-C, SIGTERM, failure
        nt.run("out/ntier", clients=[4, 8])

Everything runs as one capture (mwinv/node_capture.py): the primary and each replica a node with its
statements, pgpool a node of its own (its processes sampled, no statements); each node's link bytes are
its namespace's veth counters. out/ntier.json records the levels' measured windows and each node's
interface, pgbench's logs are out/pgbench/c<clients>/.

The namespaces, links and bridge carry a tag recorded in a cluster state file (clusters/<tag>.json), the
servers' and cgroups' names too (cl-<tag>-<node>): a run killed with -9 is removed by `mwinv clean` as a
cluster is (mwinv/cluster/harness.py)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mwinv import privfile, serverdir
from mwinv.cgroup import Cgroup, block_device_of
from mwinv.cluster.net import ClusterNet
from mwinv.engines.postgresql.server import PgServer, pg_bindir
from mwinv.errors import MwinvError
from mwinv.node_capture import NodeCapture
from mwinv.ntier import bboard, links
from mwinv.ntier.lag import LagError, LagWatch
from mwinv.ntier.pgpool import POLICIES, PgPool, check_weights
from mwinv.options import CaptureOptions
from mwinv.signals import held

MAX_REPLICAS = 3
MAX_CLIENTS = 64
RAMP_GROUPS = 4          # clients start and stop in up to this many groups
WATCH_S = 0.2            # how often the servers and pgpool are checked during a level
DEATH_NOTICE_S = 1.0     # how long a failed pgbench waits for a server's exit to show
CATCH_UP_S = 60.0        # how long a new replica may take to replay the load
SERVER_GUCS = {"compute_query_id": "on", "shared_buffers": "'32MB'", "jit": "off", "max_connections": "100",
               "log_connections": "on", "log_line_prefix": "'%m [%p] '"}


@dataclass
class NTierConfig:
    replicas: int = 2
    policy: str = "session"                 # pgpool's load balancing: per session or per statement
    weights: list[float] | None = None      # per replica
    size: bboard.Size = field(default_factory=bboard.Size)
    think_ms: float = 5.0
    ramp_up_s: float = 2.0
    run_s: float = 6.0
    ramp_down_s: float = 1.0
    replica_cpu: float | None = None        # CPUs per replica (cgroup quota); None: uncapped
    pool_cpu: float | None = None
    replica_read_mbps: float | None = None  # disk read rate per replica (blkio throttle), MB/s
    link_mbit: float | None = None          # every tier's link, each way (tbf), once the load is in
    trace: bool | str = False               # kernel tracing of every node (NodeCapture's trace)
    max_lag_s: float = 5.0                  # a replica further behind the primary ends the run (lag.py)
    sample_interval_s: float = 0.1

    def __post_init__(self) -> None:
        if not 1 <= self.replicas <= MAX_REPLICAS:
            raise MwinvError(f"--replicas {self.replicas}: 1 to {MAX_REPLICAS}")
        if self.policy not in POLICIES:
            raise MwinvError(f"--policy {self.policy!r}: one of {', '.join(POLICIES)}")
        check_weights(self.weights, self.replicas)
        if not (self.think_ms >= 0 and self.ramp_up_s >= 0 and self.ramp_down_s >= 0 and self.run_s >= 1):
            raise MwinvError("think time and ramps: 0 or more; run: 1 s or more")
        if not self.max_lag_s > 0:
            raise MwinvError(f"--max-lag {self.max_lag_s:g}: more than 0 s")
        for what, cap in (("--replica-cpu", self.replica_cpu), ("--pool-cpu", self.pool_cpu)):
            if cap is not None and not 0.01 <= cap <= 64:
                raise MwinvError(f"{what} {cap:g}: 0.01 to 64 CPUs")
        for what, cap, unit in (("--replica-read-mbps", self.replica_read_mbps, "MB/s"),
                                ("--link-mbit", self.link_mbit, "Mbit/s")):
            if cap is not None and not 0.1 <= cap <= 100_000:
                raise MwinvError(f"{what} {cap:g}: 0.1 to 100000 {unit}")


def check_clients(levels: list[int]) -> list[int]:
    if not levels or any(not 1 <= c <= MAX_CLIENTS for c in levels):
        raise MwinvError(f"--clients {','.join(map(str, levels))}: load levels of 1 to {MAX_CLIENTS} clients")
    return levels


class Standby(PgServer):
    """A hot standby of `primary`: its data directory a base backup, streaming from then on."""

    def __init__(self, primary: PgServer, **kw):
        super().__init__(**kw)
        self.primary = primary

    def _init_data(self, bindir: Path) -> None:
        self._run([str(bindir / "pg_basebackup"), "-D", str(self.data_dir), "-R", "-X", "stream", "-c", "fast",
                   "-d", self.primary.conninfo()], what="pg_basebackup")


class NTier:
    def __init__(self, config: NTierConfig, progress=None):
        self.config = config
        self.progress = progress or (lambda _: None)
        self.primary: PgServer | None = None
        self.replicas: list[PgServer] = []
        self.pool: PgPool | None = None
        self.tag = uuid.uuid4().hex[:6]
        self.net = ClusterNet(self.tag)
        self.state_file = serverdir.clusters_dir() / f"{self.tag}.json"
        self._state = {"tag": self.tag, "pid": os.getpid(), "owner": serverdir.owner_stamp(), "kind": "ntier",
                       "scheme": "ntier", "nodes": config.replicas, "netns": [], "links": [], "bridge": None,
                       "servers": {}}

    @property
    def servers(self) -> dict[str, PgServer]:
        return {"primary": self.primary, **{f"r{i}": r for i, r in enumerate(self.replicas, 1)}}

    @property
    def nodes(self) -> list[str]:
        return ["primary", *(f"r{i}" for i in range(1, self.config.replicas + 1)), "pgpool"]

    def _cgroup(self, node: str, cpu: float | None, read_mbps: float | None = None) -> Cgroup | None:
        if not (cpu or read_mbps):
            return None
        dev = block_device_of(serverdir.servers_dir()) if read_mbps else None
        return Cgroup(f"cl-{self.tag}-{node}", cpu_fraction=cpu, read_bps={dev: int(read_mbps * 1e6)} if dev else None)

    def _server(self, cls, node: str, **kw) -> PgServer:
        link = self.net.links[node]
        server = cls(name=f"cl-{self.tag}-{node}", listen_addresses=link.address, netns=link.netns,
                     shared_preload_libraries=["mwinv"], gucs=dict(SERVER_GUCS), **kw)
        self._state["servers"][node] = {"address": link.address, "netns": link.netns}
        serverdir.write_record(self.state_file, self._state)
        return server

    def _net_up(self) -> None:
        """The bridge and a namespace per node, each written down as soon as it exists."""
        if os.geteuid() != 0:
            raise MwinvError("the n-tier scenario needs root (network namespaces, cgroups)")
        serverdir.write_record(self.state_file, self._state)
        self.net.create_bridge()
        self._state["bridge"] = self.net.bridge
        serverdir.write_record(self.state_file, self._state)
        for i, node in enumerate(self.nodes):
            self.net.add_node(node, i, on_created=self._link_created)

    def _link_created(self, link) -> None:
        self._state["netns"].append(link.netns)
        self._state["links"].append(link.host_if)
        serverdir.write_record(self.state_file, self._state)

    def up(self) -> "NTier":
        cfg = self.config
        try:
            self.progress(f"network: bridge and a namespace for each of {', '.join(self.nodes)}")
            self._net_up()
            self.progress("primary")
            self.primary = self._server(PgServer, "primary").start()
            with open(self.primary.data_dir / "pg_hba.conf", "a") as f:   # the replicas' base backups, streaming
                f.write(f"host replication all {self.net.subnet} trust\n")
            self.primary.psql("SELECT pg_reload_conf()")
            self.primary.psql("CREATE EXTENSION mwinv")
            self.progress(f"bulletin board: {cfg.size.users:,} users, {cfg.size.stories:,} stories, "
                          f"{cfg.size.comments:,} comments")
            bboard.load(self.primary, cfg.size)
            for i in range(1, cfg.replicas + 1):
                self.progress(f"replica r{i}: base backup, streaming")
                replica = self._server(Standby, f"r{i}", primary=self.primary,
                                       cgroup=self._cgroup(f"r{i}", cfg.replica_cpu, cfg.replica_read_mbps))
                self.replicas.append(replica)
                replica.start()
            self.wait_replay()
            self.progress(f"pgpool: load balancing per {cfg.policy} over {cfg.replicas} replicas")
            link = self.net.links["pgpool"]
            self.pool = PgPool(primary=self.primary, replicas=self.replicas, policy=cfg.policy, weights=cfg.weights,
                               max_clients=MAX_CLIENTS, address=link.address, netns=link.netns,
                               cgroup=self._cgroup("pgpool", cfg.pool_cpu)).start()
            if cfg.link_mbit:   # after the load and the base backups: the cap is for the browsing
                self.progress(f"links: {cfg.link_mbit:g} Mbit/s each way, every tier")
                for node in self.nodes:
                    self.net.shape(node, cfg.link_mbit)
        except BaseException:
            self.down()
            raise
        return self

    def wait_replay(self) -> None:
        """Until every replica has replayed what the primary wrote (the load, an advised index): up to its
        WAL insert position, not the write position, which a commit without synchronous_commit is past
        until the WAL writer's next round (the replica's plan ignored an index just built)."""
        target = self.primary.psql("SELECT pg_current_wal_insert_lsn()").strip()
        deadline = time.monotonic() + CATCH_UP_S
        for name, r in list(self.servers.items())[1:]:
            while r.psql(f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn").strip() != "t":
                if time.monotonic() > deadline:
                    raise MwinvError(f"replica {name} did not replay the load within {CATCH_UP_S:g} s")
                time.sleep(0.1)

    def down(self) -> None:
        """Stop pgpool and the servers (their cgroups go with them), remove the links, bridge and
        namespaces and the state file (Ctrl-C and SIGTERM wait until all are gone)."""
        with held():
            for part in ([self.pool] if self.pool else []) + self.replicas[::-1] + ([self.primary] if self.primary
                                                                                   else []):
                part.stop()
            self.net.remove()
            self.state_file.unlink(missing_ok=True)

    def __enter__(self) -> "NTier":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

    # ---- a run: one capture over every load level
    def run(self, out: str | Path, clients: list[int]) -> dict:
        """Every load level in turn under one capture into out/capture; returns (and writes to
        out/ntier.json) the levels' windows. A server or pgpool that dies, or pgbench failing, ends the
        run with a one-line error; what was measured until then is kept."""
        cfg = self.config
        out = Path(out)
        privfile.make_dir(out)
        for sub in ("capture", "pgbench", "scripts"):
            privfile.make_dir(out / sub)
        scripts = bboard.write_scripts(out / "scripts", cfg.think_ms)
        record = {"config": {**asdict(cfg), "clients": clients}, "levels": [], "pgpool_nodes": {}, "error": None,
                  "servers": {n: {"port": s.port, "postmaster_pid": s.postmaster_pid()}
                              for n, s in self.servers.items()},
                  # the caps as the kernel holds them (cgroups), beside the config's
                  "caps": {n: p.cgroup.limits() for n, p in {**self.servers, "pgpool": self.pool}.items() if p.cgroup},
                  # each node's end of its veth: the sampler reads its namespace's counters (node_sample)
                  "links": {n: {"iface": link.node_if, "address": link.address} for n, link in self.net.links.items()},
                  "tag": self.tag}
        captures = self._start_captures(out / "capture")
        watch = None
        try:
            watch = LagWatch(self.primary, dict(list(self.servers.items())[1:]), cfg.max_lag_s)
            for c in clients:
                level = self._level(out / "pgbench" / f"c{c}", c, scripts, watch)
                level["pgpool_nodes"] = self.pool.nodes()
                record["levels"].append(level)
        except MwinvError as exc:
            record["error"] = str(exc)
        finally:
            if watch:
                watch.close()
            errors = self._stop_captures(captures, finish=True)
            privfile.write(out / "ntier.json", json.dumps(record, indent=1, default=str))
        if record["error"]:
            raise MwinvError(f"{record['error']} (what was measured is kept in {out})")
        if errors:
            raise MwinvError("; ".join(errors))
        return record

    def _start_captures(self, capture_dir: Path) -> dict[str, NodeCapture]:
        cfg, caps = self.config, {}
        try:
            for node, server in self.servers.items():
                self.progress(f"capture of {node}")
                caps[node] = NodeCapture(capture_dir, CaptureOptions(node=node, trace=cfg.trace,
                                                                     sample_interval_s=cfg.sample_interval_s),
                                         postmaster_pid=server.postmaster_pid(), conninfo=server.conninfo()).start()
            # pgpool as a tier of its own: its main process and children sampled (and traced), no statements
            caps["pgpool"] = NodeCapture(capture_dir, CaptureOptions(node="pgpool", trace=cfg.trace, statements=False,
                                                                     sample_interval_s=cfg.sample_interval_s),
                                         postmaster_pid=self.pool.proc.pid).start()
        except BaseException:
            self._stop_captures(caps, finish=False)
            raise
        return caps

    def _stop_captures(self, caps: dict[str, NodeCapture], finish: bool) -> list[str]:
        errors = []
        with held():
            for cap in caps.values():
                cap.halt()
        for node, cap in caps.items():
            try:
                cap.stop(finish)
            except MwinvError as exc:
                errors.append(f"capture of {node}: {exc}")
        return errors

    def _groups(self, clients: int) -> list[tuple[int, float, float]]:
        """(clients, start, end) of each ramp group, in seconds from the level's start: group i starts
        i/G of the ramp-up in and stops i/G of the ramp-down before the last; all run through
        [ramp_up, ramp_up + run], the measured period."""
        cfg = self.config
        g = min(clients, RAMP_GROUPS)
        sizes = [clients // g + (1 if i < clients % g else 0) for i in range(g)]
        end = cfg.ramp_up_s + cfg.run_s + cfg.ramp_down_s
        return [(k, cfg.ramp_up_s * i / g, end - cfg.ramp_down_s * i / g) for i, k in enumerate(sizes)]

    def _pgbench(self, log_prefix: Path, clients: int, seconds: int, scripts) -> list[str]:
        size = self.config.size
        argv = [str(pg_bindir() / "pgbench"), "-n", "-h", self.pool.address, "-p", str(self.pool.port), "-U", "postgres",
                "-c", str(clients), "-j", "1", "-T", str(seconds), "-l", f"--log-prefix={log_prefix}",
                "-D", f"stories={size.stories}", "-D", f"users={size.users}"]
        for _, f, weight in scripts:
            argv += ["-f", f"{f}@{weight}"]
        return argv + [bboard.DATABASE]

    def _check_tiers(self, watched: dict, pids: dict, clients: int, now_s: float) -> None:
        self._check_servers(watched, pids, clients, now_s)
        if not self.pool.alive():
            raise MwinvError(f"pgpool (pid {self.pool.proc.pid}) died {now_s:.1f} s into the {clients}-client level")

    @staticmethod
    def _check_servers(watched: dict[str, int], pids: dict[str, int], clients: int, now_s: float) -> None:
        gone = [n for n, fd in watched.items() if select.select([fd], [], [], 0)[0]]
        if gone:
            name = gone[0]
            raise MwinvError(f"{'replica ' if name != 'primary' else ''}{name} (postmaster {pids[name]}) died "
                             f"{now_s:.1f} s into the {clients}-client level")

    def _level(self, directory: Path, clients: int, scripts, watch: LagWatch) -> dict:
        """One load level: the ramp's pgbench groups started on time, the servers, pgpool and the
        replicas' lag watched."""
        privfile.make_dir(directory)
        groups = self._groups(clients)
        self.progress(f"{clients} clients: ramp-up {self.config.ramp_up_s:g} s in {len(groups)} groups, "
                      f"run {self.config.run_s:g} s, ramp-down {self.config.ramp_down_s:g} s")
        start_mono, start_wall = time.monotonic_ns(), time.time_ns()
        procs: list[subprocess.Popen] = []
        pending = list(enumerate(groups))
        pids = {n: s.postmaster_pid() for n, s in self.servers.items()}
        # pidfds: readable once the postmaster exits, whatever later takes its pid or reaps it
        watched = {n: os.pidfd_open(pid) for n, pid in pids.items()}
        cfg = self.config
        lo, hi = cfg.ramp_up_s, cfg.ramp_up_s + cfg.run_s
        sessions = None
        lag: dict[str, dict] = {}   # per replica the most it was behind
        try:
            while pending or any(p.poll() is None for p in procs):
                now_s = (time.monotonic_ns() - start_mono) / 1e9
                while pending and pending[0][1][1] <= now_s:
                    i, (k, begin, end) = pending.pop(0)
                    argv = self._pgbench(directory / f"g{i}", k, max(1, round(end - begin)), scripts)
                    procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                                  text=True))
                self._check_tiers(watched, pids, clients, now_s)
                try:
                    for name, (behind, seconds) in (watch.check() or {}).items():
                        most = lag.setdefault(name, {"max_bytes": 0, "max_s": 0.0})
                        most["max_bytes"], most["max_s"] = max(most["max_bytes"], behind), max(most["max_s"], seconds)
                except LagError as exc:
                    raise MwinvError(f"{exc} {now_s:.1f} s into the {clients}-client level") from None
                for p in procs:
                    if p.poll() not in (None, 0):
                        # a server or pgpool that died since the check above is the cause, not the clients
                        # it aborted. A dying server's sockets close before its exit shows on its pidfd, so
                        # the clients' abort can come first (a replica killed 1 s in: 1 CI run of 5 alone,
                        # 1 of 1 beside another test run): its exit is waited for a while
                        select.select(list(watched.values()), [], [], DEATH_NOTICE_S)
                        self._check_tiers(watched, pids, clients, now_s)
                        lines = [ln for ln in p.stderr.read().splitlines() if ln.strip()]
                        raise MwinvError(f"pgbench failed {now_s:.1f} s into the {clients}-client level: "
                                         f"{lines[-1] if lines else f'exit {p.returncode}'}")
                if sessions is None and now_s >= (lo + hi) / 2:   # every client connected, none gone
                    sessions = links.snapshot(self.pool.proc.pid, self.pool.port,
                                              {n: (pids[n], s.port) for n, s in self.servers.items()})
                time.sleep(WATCH_S)
            # one that died as the last pgbench ended
            self._check_servers(watched, pids, clients, (time.monotonic_ns() - start_mono) / 1e9)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                p.wait()
                p.stderr.close()
            for fd in watched.values():
                os.close(fd)
        return {"clients": clients, "sessions": sessions or [], "lag": lag, "groups": groups,
                "start_mono_ns": start_mono, "start_wall_ns": start_wall,
                "run_mono_ns": [start_mono + int(lo * 1e9), start_mono + int(hi * 1e9)],
                "run_wall_ns": [start_wall + int(lo * 1e9), start_wall + int(hi * 1e9)],
                "pgbench_logs": sorted(str(f) for f in directory.glob("g*.*"))}

