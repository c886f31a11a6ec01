"""One capture of a whole cluster: every node captured as if it were its own machine (its recorder
over its own pids, its samples with its namespace's interfaces, its statements, its clock), into one
capture directory whose tables carry the node; the manifest records each node's clock offset to the
coordinator, measured over the node's link at the start and at the end ([Taufer]: precise sync at
the start, drift followed loosely), and the sessions each node saw, which link a data node's
statements to the coordinator's statement they served (mwinv/correlator/links.py).

    with ClusterCapture(cluster, "out/run1"):
        cluster.run_queries([1, 3])"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import psycopg

from mwinv.node_capture import NodeCapture
from mwinv.options import CaptureOptions
from mwinv.capture.tables import Capture
from mwinv.cluster.harness import COORDINATOR, Cluster
from mwinv.engines.postgresql.reader import connect_untracked
from mwinv.errors import MwinvError
from mwinv.signals import held

OFFSET_SAMPLES = 25
LOG_CONNECTION = re.compile(r"\[(\d+)\] LOG:  connection authorized: .*? application_name=(\S+)")
SESSION_POLL_S = 0.1


def measure_offset(conninfo: str, samples: int = OFFSET_SAMPLES) -> dict:
    """The node's CLOCK_MONOTONIC minus ours, read over its link: of `samples` round trips the one with
    the shortest round trip, its node reading set against the middle of our two readings; the error is
    at most half that round trip. (Ours is the coordinator's clock: this process runs on its host.)"""
    best = None
    try:
        # untracked: the clock readings are mwinv's, not the workload's (they ranked among a cluster's
        # top statements)
        with connect_untracked(conninfo, connect_timeout=10) as conn:
            for _ in range(samples):
                t0 = time.monotonic_ns()
                node = conn.execute("SELECT mwinv_clock_ns()").fetchone()[0]
                t1 = time.monotonic_ns()
                if best is None or t1 - t0 < best[1] - best[0]:
                    best = (t0, t1, node)
    except psycopg.Error as exc:
        raise MwinvError(f"clock offset over {conninfo}: {str(exc).strip().splitlines()[0]}") from None
    t0, t1, node = best
    return {"at_ns": (t0 + t1) // 2, "offset_ns": node - (t0 + t1) // 2, "error_ns": (t1 - t0 + 1) // 2}


class SessionPoller:
    """The sessions of one node: pg_stat_activity polled while the capture runs, and the server log's
    `connection authorized` lines (log_connections, pid in log_line_prefix) written meanwhile. The log
    is complete; the poll adds client addresses. postgres_fdw keeps its connection for the life of the
    coordinator's backend, but that can be 50 ms: a 0.1 s poll missed 2 of 6 in a test."""

    def __init__(self, conninfo: str, node: str, log_file: Path | None = None):
        self.conninfo, self.node, self.log_file = conninfo, node, log_file
        self.log_from = log_file.stat().st_size if log_file and log_file.exists() else 0
        self.rows: dict[int, dict] = {}
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"mwinv-sessions-{node}", daemon=True)

    def start(self) -> "SessionPoller":
        self._thread.start()
        return self

    def _poll(self, conn) -> None:
        for pid, app, addr, port, started in conn.execute(
                "SELECT pid, application_name, host(client_addr), client_port, "
                "(extract(epoch FROM backend_start) * 1e9)::bigint FROM pg_stat_activity "
                "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()").fetchall():
            self.rows.setdefault(pid, {"node": self.node, "pid": pid, "application_name": app, "client_addr": addr,
                                       "client_port": port, "backend_start_wall_ns": started,
                                       "first_seen_ns": time.monotonic_ns()})

    def _run(self) -> None:
        try:
            with psycopg.connect(self.conninfo, autocommit=True, options="-c mwinv.track=none") as conn:
                while not self._stop.is_set():
                    self._poll(conn)
                    self._stop.wait(SESSION_POLL_S)
                self._poll(conn)
        except psycopg.Error as exc:
            self.error = str(exc).strip().splitlines()[0]

    def _read_log(self) -> None:
        if not self.log_file or not self.log_file.exists():
            return
        with open(self.log_file, "rb") as f:
            f.seek(self.log_from)
            text = f.read().decode(errors="replace")
        for pid, app in LOG_CONNECTION.findall(text):
            self.rows.setdefault(int(pid), {"node": self.node, "pid": int(pid), "application_name": app,
                                            "client_addr": None, "client_port": None, "backend_start_wall_ns": None,
                                            "first_seen_ns": None})

    def stop(self) -> list[dict]:
        self._stop.set()
        self._thread.join()
        self._read_log()
        return list(self.rows.values())


class ClusterCapture:
    """Captures of every node of `cluster` into `out`."""

    def __init__(self, cluster: Cluster, out: str | Path, stacks: bool = False, progress=None):
        self.cluster, self.capture = cluster, Capture(out)
        self.stacks = stacks
        self.progress = progress or (lambda _: None)
        self.nodes = [COORDINATOR, *cluster.data_nodes]
        self.captures: dict[str, NodeCapture] = {}
        self.pollers: dict[str, SessionPoller] = {}

    def _tcp(self, node: str) -> str:
        s = self.cluster.servers[node]
        return f"host={self.cluster.address(node)} port={s.port} dbname=postgres user=postgres"

    def _offsets(self, when: str) -> None:
        for node in self.nodes:
            m = measure_offset(self._tcp(node))
            self.capture.update_manifest(nodes={node: {**self.capture.manifest()["nodes"].get(node, {}),
                                                       f"clock_offset_{when}": m}})

    def start(self) -> "ClusterCapture":
        self.capture.create(capture_kind="cluster", coordinator=COORDINATOR, scheme=self.cluster.scheme,
                            scheme_definition=self.cluster.scheme_def.describe(), scale=self.cluster.scale,
                            data_nodes=len(self.cluster.data_nodes), kernel_settings=self.cluster.kernel_in_force(),
                            storage=self.cluster.storage_in_force())
        try:
            for node in self.nodes:
                server = self.cluster.servers[node]
                self.progress(f"capture of node {node}")
                self.capture.update_manifest(nodes={node: {**self.capture.manifest()["nodes"].get(node, {}),
                                                           "caps": self.cluster.caps_in_force(node)}})
                self.captures[node] = NodeCapture(self.capture.path, CaptureOptions(node=node, stacks=self.stacks),
                                                  postmaster_pid=server.postmaster_pid(), conninfo=server.conninfo()).start()
                self.pollers[node] = SessionPoller(server.conninfo(), node, server.log_file).start()
            self._offsets("start")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, finish: bool = True) -> dict:
        """Stop every node's capture; finish=False (interrupted): their kernel traces are left to the next
        correlation to parse (the parse grows with the capture: a SIGTERM during an experiment's load took
        4.3 s at SF 0.1 and 32 s at SF 1 with it, 2.9 s at SF 0.1 without)."""
        with held():   # every node's tracing state first: a signal during the slower steps finds it restored
            # at once: removing a node's two trace instances took 0.9 s
            halts = [threading.Thread(target=cap.halt, name=f"mwinv-halt-{node}")
                     for node, cap in self.captures.items()]
            for t in halts:
                t.start()
            for t in halts:
                t.join()
        errors = []
        summary = {}
        if self.captures and len(self.captures) == len(self.nodes):
            try:
                self._offsets("end")
            except MwinvError as exc:
                errors.append(str(exc))
        for node, poller in self.pollers.items():
            rows = poller.stop()
            if rows:
                self.capture.write_part("session", rows, node=node)
            if poller.error:
                errors.append(f"sessions of {node}: {poller.error}")
        for node, cap in self.captures.items():
            try:
                summary[node] = cap.stop(finish)
            except MwinvError as exc:
                errors.append(f"node {node}: {exc}")
        self.captures, self.pollers = {}, {}
        if errors:
            raise MwinvError("; ".join(errors))
        return summary

    def __enter__(self) -> "ClusterCapture":
        return self.start()

    def __exit__(self, exc_type, *_) -> None:
        self.stop(finish=exc_type is not KeyboardInterrupt)

