"""Read-only scale-out on this host: a PostgreSQL primary with 1..3 streaming replicas (pg_basebackup,
hot standby), each a throw-away server optionally capped by its own cgroup, pgpool-II load balancing
the reads over the replicas, the bulletin board (mwinv/ntier/bboard.py) loaded, and its browse mix run
by pgbench at each load level with a client ramp: groups of clients start one after the other
(ramp-up), all run (the measured period), then stop one after the other (ramp-down).

    with NTier(NTierConfig(replicas=2)) as nt:      # up; down on exit, Ctrl-C, SIGTERM, failure
        nt.run("out/ntier", clients=[4, 8])

Everything runs as one capture (mwinv/node_capture.py): the primary and each replica a node with its
statements, pgpool a node of its own (its processes sampled, no statements). out/ntier.json records
the levels' measured windows, pgbench's logs are out/pgbench/c<clients>/."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mwinv import privfile
from mwinv.cgroup import Cgroup
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

    @property
    def servers(self) -> dict[str, PgServer]:
        return {"primary": self.primary, **{f"r{i}": r for i, r in enumerate(self.replicas, 1)}}

    def up(self) -> "NTier":
        cfg = self.config
        try:
            self.progress("primary")
            self.primary = PgServer(name="nt-primary", listen_addresses="127.0.0.1", shared_preload_libraries=["mwinv"],
                                    gucs=dict(SERVER_GUCS)).start()
            self.primary.psql("CREATE EXTENSION mwinv")
            self.progress(f"bulletin board: {cfg.size.users:,} users, {cfg.size.stories:,} stories, "
                          f"{cfg.size.comments:,} comments")
            bboard.load(self.primary, cfg.size)
            for i in range(1, cfg.replicas + 1):
                self.progress(f"replica r{i}: base backup, streaming")
                cgroup = Cgroup(f"nt-r{i}", cpu_fraction=cfg.replica_cpu) if cfg.replica_cpu else None
                replica = Standby(self.primary, name=f"nt-r{i}", listen_addresses="127.0.0.1", cgroup=cgroup,
                                  shared_preload_libraries=["mwinv"], gucs=dict(SERVER_GUCS))
                self.replicas.append(replica)
                replica.start()
            self.wait_replay()
            self.progress(f"pgpool: load balancing per {cfg.policy} over {cfg.replicas} replicas")
            self.pool = PgPool(primary=self.primary, replicas=self.replicas, policy=cfg.policy, weights=cfg.weights,
                               max_clients=MAX_CLIENTS,
                               cgroup=Cgroup("nt-pgpool", cpu_fraction=cfg.pool_cpu) if cfg.pool_cpu else None).start()
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
        with held():
            for part in ([self.pool] if self.pool else []) + self.replicas[::-1] + ([self.primary] if self.primary
                                                                                   else []):
                part.stop()

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
                              for n, s in self.servers.items()}}
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
        argv = [str(pg_bindir() / "pgbench"), "-n", "-h", "127.0.0.1", "-p", str(self.pool.port), "-U", "postgres",
                "-c", str(clients), "-j", "1", "-T", str(seconds), "-l", f"--log-prefix={log_prefix}",
                "-D", f"stories={size.stories}", "-D", f"users={size.users}"]
        for _, f, weight in scripts:
            argv += ["-f", f"{f}@{weight}"]
        return argv + [bboard.DATABASE]

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
                self._check_servers(watched, pids, clients, now_s)
                if not self.pool.alive():
                    raise MwinvError(f"pgpool (pid {self.pool.proc.pid}) died {now_s:.1f} s into the "
                                     f"{clients}-client level")
                try:
                    for name, (behind, seconds) in (watch.check() or {}).items():
                        most = lag.setdefault(name, {"max_bytes": 0, "max_s": 0.0})
                        most["max_bytes"], most["max_s"] = max(most["max_bytes"], behind), max(most["max_s"], seconds)
                except LagError as exc:
                    raise MwinvError(f"{exc} {now_s:.1f} s into the {clients}-client level") from None
                for p in procs:
                    if p.poll() not in (None, 0):
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

