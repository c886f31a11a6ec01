"""`mwinv demo`: an engine's demo (by default PostgreSQL's, behind `make demo`: a throw-away server
with the mwinv extension, TPC-H loaded, the 22 queries run under a kernel capture; each engine's in
mwinv/engines/<engine>/demo.py), then the top SQL, what to change, and a report."""

from __future__ import annotations

import shutil
from pathlib import Path

from rich.console import Console

from mwinv import privfile
from mwinv.cli.common import output_console, progress_logger
from mwinv.correlator import terminal
from mwinv.correlator.derive import advice_of, derive, node_parts_of
from mwinv.correlator.pipeline import correlate, top_statements
from mwinv.correlator.report import load, render_report
from mwinv.engines import registry
from mwinv.errors import MwinvError


def _fresh(out: str) -> tuple[Path, Path]:
    """The demo's output directory, and its capture directory emptied: a demo run replaces the previous one."""
    out_dir = Path(out)
    capture_dir = out_dir / "capture"
    if capture_dir.exists():
        shutil.rmtree(capture_dir)
    privfile.make_dir(out_dir)
    return out_dir, capture_dir


def run(dbms: str, scale: float, out: str, nodes: int = 0) -> Path:
    """The engine's demo (its registration's `demo`) into OUT/capture, then what every demo shows."""
    demo = registry.engines()[dbms].load("demo")
    if demo is None:
        raise MwinvError(f"{dbms}: no demo")
    console = output_console()
    out_dir, capture_dir = _fresh(out)
    demo(scale, capture_dir, console, nodes)
    return _show(capture_dir, out_dir, console)


def _show(capture_dir: Path, out_dir: Path, console: Console) -> Path:
    """Correlate, print the top statements (with their data nodes' parts) and what to change, write the report."""
    progress = progress_logger(console)
    db = correlate(capture_dir, progress=progress)
    for w in db.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    top = top_statements(db, n=5)
    examples = [s.example_id for s in top]
    derive(db, advise=examples, progress=progress)
    console.print(terminal.top_table(top, "top 5 statements by total time"))
    parts = node_parts_of(db, examples)
    for i, s in enumerate(top, 1):
        if s.example_id in parts:
            console.print(terminal.node_table(i, s, parts[s.example_id]))
    console.print(terminal.advice_text(top, advice_of(db, examples)))
    html, md = render_report(load(capture_dir, db=db), out_dir / "report")
    db.con.close()
    console.print(f"report: {html} (and {md})")
    return html
