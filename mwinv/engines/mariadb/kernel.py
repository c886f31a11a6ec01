"""MariaDB as a node capture sees it: mariadbd is one process whose threads are traced (their roles
come from performance_schema.threads, and its statements from the performance_schema reader that
capture.py runs beside the node capture); Debian's build has no USDT probes (no stapsdt notes)."""

from __future__ import annotations

from mwinv.engines import Engine


def role(cmdline: str, parent_cmdline: str = "") -> str | None:
    return "server" if cmdline else None


MARIADB = Engine("mariadb", role=role, probes=lambda statements: ())
