"""A toy engine, plugged into mwinv from outside its package (tests/test_engine_registry.py): its
statements come from a CSV file (start_ms,cpu_ms,lock_ms,wall_ms,text), its one rule names the lock
its statements waited for, its command is `mwinv toy import`. It registers through the entry point
group `mwinv.engines`; no file of the correlator, the CLI or the demo names it."""

from __future__ import annotations

import csv
from pathlib import Path

import click

from mwinv.capture.columns import rows_to_tables
from mwinv.capture.tables import Capture, text_hash
from mwinv.engines.registry import Registration
from mwinv.errors import MwinvError
from mwinv.fmt import duration, pct
from mwinv.rules import MIN_LOCK_SHARE, Advice, Evidence

ENGINE = Registration(name="toy", reader="toy_engine:read", rules="toy_engine:RULES", cli="toy_engine:toy_cli")
MS = 1_000_000


def read(path: Path, capture_dir: Path, node: str = "toy") -> int:
    """The CSV's statements into the capture: each a statement with its text, one call, and its lock
    wait as the engine's own wait event; the number read."""
    statements, texts, calls, waits = [], {}, [], []
    with open(path, newline="") as f:
        for n, row in enumerate(csv.DictReader(f), 2):
            try:
                start, cpu, lock, wall = (int(row[k]) * MS for k in ("start_ms", "cpu_ms", "lock_ms", "wall_ms"))
            except (KeyError, TypeError, ValueError):
                raise MwinvError(f"{path}:{n}: start_ms, cpu_ms, lock_ms and wall_ms must be whole numbers") from None
            sid, h = n - 1, text_hash(row["text"])
            texts[h] = {"query_text_hash": h, "query_id": h, "text": row["text"]}
            statements.append({"node": node, "dbms": ENGINE.name, "pid": 1, "statement_id": sid, "query_id": h,
                               "query_text_hash": h, "start_ns": start, "end_ns": start + wall,
                               "start_wall_ns": start, "cpu_user_ns": cpu, "rows": 1, "nesting_level": 0,
                               "errored": False})
            calls.append({"node": node, "pid": 1, "file": str(path), "line": n, "call": "QUERY", "dep": 0,
                          "statement_id": sid, "top_statement_id": sid, "start_ns": start, "end_ns": start + wall,
                          "c_ns": cpu, "e_ns": wall})
            waits.append({"node": node, "pid": 1, "file": str(path), "line": n, "event": "table lock",
                          "component": "lock_wait", "ela_ns": lock, "end_ns": start + wall, "statement_id": sid,
                          "top_statement_id": sid, "in_call": True, "call_dep": 0})
    cap = Capture(capture_dir).create(capture_kind="dbms-log")
    for table, data in rows_to_tables(path, (("statement", statements), ("statement_text", list(texts.values())),
                                             ("dbms_call", calls), ("dbms_wait", waits))):
        cap.write_part(table, data, node=node)
    cap.update_manifest(nodes={node: {"clock": "realtime", "dbms": ENGINE.name, "statement_source": "toy csv"}})
    return len(statements)


def table_lock(e: Evidence) -> Advice | None:
    if e.shares["lock"] < MIN_LOCK_SHARE:
        return None
    return e.advice("toy.table_lock", "toy: its statements take the whole table's lock; use the toy's row locks",
                    f"lock_wait {duration(e.ns.get('lock_wait', 0))} ({pct(e.shares['lock'])} of {e.in_db()})",
                    e.ns.get("lock_wait", 0), "all of the lock wait")


RULES = [table_lock]


@click.group("toy")
def toy_cli() -> None:
    """The toy engine: statements from a CSV file.

    \b
    Examples:
      mwinv toy import statements.csv -o out/toy
    """


@toy_cli.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--out", required=True, type=click.Path(file_okay=False), help="capture directory.")
def import_cmd(file, out) -> None:
    """Read FILE's statements into the capture OUT.

    \b
    Examples:
      mwinv toy import statements.csv -o out/toy
    """
    click.echo(f"{read(Path(file), Path(out))} statements", err=True)
