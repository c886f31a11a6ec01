"""A capture of one MariaDB server: the kernel's events of all its threads (existing and new), /proc
samples, and its statements from performance_schema, each on the OS thread that ran it. The threads'
roles (connection, page cleaner, purge, I/O, ...) from performance_schema.threads go into `process`."""

from __future__ import annotations

from pathlib import Path

from mwinv.node_capture import NodeCapture
from mwinv.options import CaptureOptions
from mwinv.capture.tables import Capture
from mwinv.engines.mariadb.bounds import socket_bounds
from mwinv.engines.mariadb.kernel import MARIADB
from mwinv.engines.mariadb.live import LiveServer
from mwinv.engines.mariadb.reader import PerfSchemaReader
from mwinv.engines.mariadb.server import MariaDBServer

# performance_schema thread names -> roles
ROLES = (("one_connection", "connection"), ("page_cleaner", "page cleaner"), ("purge", "purge"),
         ("io_", "I/O"), ("thread_pool", "InnoDB pool"), ("checkpoint", "checkpoint"), ("main", "main"))


def role(name: str) -> str:
    return next((r for key, r in ROLES if key in name), "background")


class MariaDBCapture:
    """Use as a context manager around the workload; `summary` after it."""

    def __init__(self, server: MariaDBServer | LiveServer, out: str | Path, node: str = "mariadb",
                 stacks: bool = False, trace: bool | str = True, progress=None, general_log: bool = False):
        """server: a throw-away MariaDBServer, or a LiveServer (a running server mwinv did not start);
        general_log: the general query log on for the capture, for the text of each execution of a
        server-side prepared statement (PerfSchemaReader)."""
        self.general_log = general_log
        self.server, self.capture, self.node = server, Capture(out), node
        self.kernel = NodeCapture(out, CaptureOptions(node=node, stacks=stacks, statements=False, trace=trace),
                                  pids=[server.pid()], progress=progress, engine=MARIADB)
        self.reader: PerfSchemaReader | None = None
        self.summary: dict = {}

    def start(self) -> "MariaDBCapture":
        self.kernel.start()
        try:
            self.reader = PerfSchemaReader(self.server.connect, self.capture, self.node,
                                           general_log=self.general_log).start()
        except BaseException:
            self.kernel.stop()
            raise
        return self

    def stop(self) -> dict:
        try:
            if self.reader:
                self.reader.finish()
        finally:
            self.summary = self.kernel.stop()
        # written after the kernel trace is: its socket calls bound the statements' windows
        info = self.reader.write(lambda w, slack: socket_bounds(self.capture, self.node, w, slack)) if self.reader else {}
        pid = self.server.pid()
        rows = [{"node": self.node, "pid": os_id, "ppid": pid, "comm": name, "role": role(name)}
                for os_id, name in self._thread_names() if os_id]
        if rows:
            self.capture.write_part("process", rows, node=self.node)
        node_info = self.capture.manifest()["nodes"][self.node]
        lost = info.get("statements_overwritten", 0)
        update = {"dbms": "mariadb", "statement_source": "performance_schema", **info}
        said = []
        if lost:
            said.append(f"{lost:,} statements overwritten in events_statements_history_long "
                        f"({info['history_long_size']:,} rows) before a drain")
        unknown = info.get("prepared_executions", 0) - info.get("prepared_recovered", 0)
        if unknown:
            texts = info.get("prepared_texts", [])
            info["prepared_note"] = (
                f"{unknown:,} executions of server-side prepared statements (statement/com/Execute) without their "
                f"text: performance_schema does not say which prepared statement each ran (`mwinv mariadb capture "
                f"--prepared-texts` reads it from the general log); they are one query here. Their connections had prepared {len(texts)} texts: "
                + "; ".join(" ".join(t.split())[:80] for t in texts[:12]) + ("; ..." if len(texts) > 12 else ""))
            said.append(info["prepared_note"])
        if said:
            update["statements_lost"] = ". ".join(said)
        self.capture.update_manifest(nodes={self.node: {**node_info, **update}})
        self.summary["statements"] = info
        return self.summary

    def _thread_names(self) -> list[tuple[int, str]]:
        return [(os_id, name) for os_id, name in self.server.sql(
            "SELECT THREAD_OS_ID, NAME FROM performance_schema.threads")]

    def __enter__(self) -> "MariaDBCapture":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
