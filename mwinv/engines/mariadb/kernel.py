"""MariaDB's kernel side: mariadbd is one process whose threads are traced (its threads' roles come from
performance_schema.threads, capture.py); Debian's build has no USDT probes (no stapsdt notes)."""

from __future__ import annotations

from mwinv.engines import KernelSide


def role(cmdline: str, parent_cmdline: str = "") -> str | None:
    return "server" if cmdline else None


MARIADB = KernelSide("mariadb", role=role, probes=lambda statements: ())
