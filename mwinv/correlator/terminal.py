"""Terminal presentation of the top statements and what to change (rich), and their JSON/CSV forms for
scripts."""

from __future__ import annotations

import csv
import io
import json
import textwrap
from dataclasses import asdict

from rich.table import Table
from rich.text import Text

from mwinv.capture.tables import ATTRIBUTION_COMPONENTS
from mwinv.correlator.advice import Advice
from mwinv.correlator.nodes import NodePart
from mwinv.correlator.pipeline import StatementSummary
from mwinv.fmt import IN_DB, WALL, duration
from mwinv.rules import MIN_WALL_NS

ADVICE_WIDTH = 150   # an advice line's characters in the terminal; --report has it whole

COLORS = {"cpu_user": "green", "cpu_sys": "bright_green", "disk_seq": "blue", "disk_random": "bright_blue",
          "network": "magenta", "lock_wait": "red", "run_queue": "yellow", "other_wait": "cyan",
          "client_wait": "white", "remote_wait": "bright_magenta", "not_allocated": "bright_black"}
SHORT = {"cpu_user": "usr", "cpu_sys": "sys", "disk_seq": "seq", "disk_random": "rnd", "network": "net",
         "lock_wait": "lock", "run_queue": "runq", "other_wait": "other", "client_wait": "client", "remote_wait": "remote",
         "not_allocated": "n/a"}


def breakdown_bar(components: dict[str, int], width: int = 30) -> Text:
    total = sum(components.values()) or 1
    bar = Text()
    used = 0
    for c in ATTRIBUTION_COMPONENTS:
        cells = round(width * components.get(c, 0) / total)
        cells = min(cells, width - used)
        bar.append("█" * cells, style=COLORS[c])
        used += cells
    return bar


def legend() -> Text:
    t = Text("legend: ")
    for c in ATTRIBUTION_COMPONENTS:
        t.append("█", style=COLORS[c]).append(f" {SHORT[c]}  ")
    return t


def _shares(s: StatementSummary) -> str:
    return _shares_of(s.components)


def _shares_of(components: dict[str, int]) -> str:
    total = sum(components.values()) or 1
    parts = [f"{SHORT[c]} {100 * v / total:.0f}%" for c, v in sorted(components.items(), key=lambda kv: -kv[1])
             if v / total >= 0.05]
    return ", ".join(parts)


def top_table(rows: list[StatementSummary], title: str) -> Table:
    table = Table(title=title, show_lines=True)
    table.add_column("#", justify="right")
    table.add_column("statement", max_width=48, overflow="fold")
    table.add_column("node")
    table.add_column("calls", justify="right")
    table.add_column("wall s", justify="right")
    table.add_column("where the time went")
    # a name cut with "…" (JSON and the report have it whole), never broken mid-word
    table.add_column("top kernel functions", max_width=36, overflow="ellipsis")
    for i, s in enumerate(rows, 1):
        text = " ".join(s.text.split()) or f"query_id {s.query_id}"
        text = text if len(text) <= 90 else text[:89] + "…"  # --format json/csv carry the whole text
        where = Text.assemble(breakdown_bar(s.components), "\n", _shares(s))
        if s.from_workers_ns:
            where.append(f"\n+ parallel workers {s.from_workers_ns / 1e9:.2f} s")
        funcs = "\n".join(f"{f} {100 * share:.0f}% ({src})" for f, share, src in s.kernel_functions) or "-"
        calls = f"{s.calls}\n({s.traced_calls} traced)" if s.traced_calls is not None else str(s.calls)
        table.add_row(str(i), text, s.nodes, calls, f"{s.total_ns / 1e9:.3f}", where, funcs)
    table.caption = Text.assemble(legend(), f"\n{WALL}")
    return table


def ranked_advice(advice: list[Advice]) -> list[Advice]:
    """A statement's advice, the largest expected gain first (advice without a model estimate last)."""
    return sorted(advice, key=lambda a: -(a.expected_gain_ns if a.expected_gain_ns is not None else -1))


def advice_text(rows: list[StatementSummary], advice: dict[int, list[Advice]], per_statement: int = 3) -> Text:
    """What to change, under the table: per statement its advice with the largest expected gains."""
    out = Text(f"what to change (for each statement's longest execution, or, where that ran under "
               f"{duration(MIN_WALL_NS)} in the database, all its executions summed, as 'over N executions' says; "
               f"{IN_DB}; the evidence is in --report):\n", style="bold")
    for i, s in enumerate(rows, 1):
        for a in ranked_advice(advice.get(s.example_id, []))[:per_statement]:
            gain = f"-{duration(a.expected_gain_ns)}" if a.expected_gain_ns is not None else "gain ?"
            line = " ".join(a.advice.split())
            summed = a.evidence.split(":", 1)[0] + ", " if a.evidence.startswith("over ") else ""
            out.append(f"#{i} ").append(a.rule, style="bold").append(f" ({summed}{gain}: {a.basis}) ")
            out.append(textwrap.shorten(line, ADVICE_WIDTH, placeholder=" …") + "\n")   # cut between words
    if not any(advice.get(s.example_id) for s in rows):
        out.append("no advice: the capture has no attribution to base it on (correlate a capture with kernel events)\n")
    return out


def node_table(i: int, s: StatementSummary, parts: list[NodePart]) -> Table:
    """A coordinator statement's data nodes: what each did for its longest execution."""
    table = Table(title=f"#{i} on the data nodes (its longest execution, statement {s.example_id})")
    for col in ("node", "remote stmts", "fetches", "rows", "sent MiB", "busy s", "where the node's time went",
                "idle s", "last fetch ms"):
        table.add_column(col, justify="left" if col.startswith(("node", "where")) else "right")
    for p in parts:
        busy = {c: v for c, v in p.components.items() if c != "client_wait"}
        table.add_row(p.node + (" (critical)" if p.critical else ""), str(p.statements), str(p.fetches),
                      f"{p.rows:,}", f"{p.sent_bytes / 2**20:.2f}", f"{p.execution_ns / 1e9:.3f}",
                      Text.assemble(breakdown_bar(busy, 20), " ", _shares_of(busy)), f"{p.idle_ns / 1e9:.3f}",
                      f"{p.last_end_ns / 1e6:.1f}")
    table.caption = ("idle: the node waiting for the coordinator between fetches; last fetch: when the node's last "
                     "FETCH ended, from the statement's start (the latest is the critical node)")
    return table


def as_records(rows: list[StatementSummary], advice: dict[int, list[Advice]] | None = None,
               nodes: dict[int, list[NodePart]] | None = None) -> list[dict]:
    out = []
    for s in rows:
        d = asdict(s)
        d["data_nodes"] = [asdict(p) for p in (nodes or {}).get(s.example_id, [])]
        d["kernel_functions"] = [{"function": f, "share": share, "source": src}
                                 for f, share, src in s.kernel_functions]
        d["advice"] = [asdict(a) for a in ranked_advice((advice or {}).get(s.example_id, []))]
        out.append(d)
    return out


def as_json(rows: list[StatementSummary], advice: dict[int, list[Advice]] | None = None,
            nodes: dict[int, list[NodePart]] | None = None) -> str:
    return json.dumps(as_records(rows, advice, nodes), indent=2)


def as_csv(rows: list[StatementSummary], advice: dict[int, list[Advice]] | None = None) -> str:
    buf = io.StringIO()
    fields = ["query_id", "nodes", "calls", "traced_calls", "total_ns", *[f"{c}_ns" for c in ATTRIBUTION_COMPONENTS],
              "from_workers_ns", "top_kernel_function", "top_advice", "text"]
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    for s in rows:
        w.writerow({"query_id": s.query_id, "nodes": s.nodes, "calls": s.calls, "traced_calls": s.traced_calls,
                    "total_ns": s.total_ns,
                    **{f"{c}_ns": s.components[c] for c in ATTRIBUTION_COMPONENTS},
                    "from_workers_ns": s.from_workers_ns,
                    "top_kernel_function": s.kernel_functions[0][0] if s.kernel_functions else "",
                    "top_advice": next((a.rule for a in ranked_advice((advice or {}).get(s.example_id, []))), ""),
                    "text": " ".join(s.text.split())})
    return buf.getvalue()


def profile_table(timings: dict[str, float], wall_s: float, peak_bytes: int, statements: int) -> Table:
    """mwinv-correlate --profile: the steps by time (a sliced module summed over its slices), the rest of
    the wall time (no step's: reading and checking the parts, Python, the report), the statements per
    second and peak memory; the steps under 0.5 % of the wall time in one row."""
    wall = max(wall_s, 1e-9)
    table = Table(title=f"where the correlation's {wall_s:.2f} s went: {statements / wall:,.0f} statements/s, "
                        f"peak memory {peak_bytes / 2**20:,.0f} MiB")
    for col in ("step", "seconds", "share"):
        table.add_column(col, justify="left" if col == "step" else "right")
    rest = ("the rest (reading and checking the parts, Python, the report)", wall_s - sum(timings.values()))
    steps = sorted([*timings.items(), rest], key=lambda x: -x[1])
    small = [s for name, s in steps if s < 0.005 * wall and name != rest[0]]
    for name, s in steps:
        if s >= 0.005 * wall or name == rest[0]:
            table.add_row(name, f"{s:.2f}", f"{s / wall:.1%}")
    if small:
        table.add_row(f"{len(small)} other steps, each under 0.5 %", f"{sum(small):.2f}", f"{sum(small) / wall:.1%}")
    return table
