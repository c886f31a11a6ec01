"""The experiment report's HTML: its markdown as the capture report's page (correlator/templates: a
section per `##` with a table of contents, real tables, lists), each section's charts at its end. The
markdown is the report's one text; this only renders the forms it uses."""

from __future__ import annotations

import re
import string
from html import escape

from mwinv.correlator.report import TEMPLATES

_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def page(md: list[str], charts: list[tuple[int, str]]) -> str:
    """md: the report's markdown lines (a `# title` first); charts: (index of the md line after which
    it was drawn, inline SVG), shown at the end of the section holding that line."""
    lines = list(md)
    title = lines.pop(0)[2:] if lines and lines[0].startswith("# ") else "mwinv experiment"
    offset = len(md) - len(lines)
    sections: list[tuple[str, list[str], list[str]]] = [("", [], [])]   # (title, md lines, charts)
    starts = []
    for i, line in enumerate(lines):
        if line.startswith("## "):
            sections.append((line[3:], [], []))
            starts.append(i + offset)
        else:
            sections[-1][1].append(line)
    for at, chart in charts:
        k = sum(1 for s in starts if s < at)   # the section begun last before the chart's line
        sections[k][2].append(chart)
    body, toc = [], []
    for i, (head, text, svgs) in enumerate(sections):
        if head:
            body.append(f'<h2 id="s{i}">{escape(head)}</h2>')
            toc.append(f'<li><a href="#s{i}">{escape(head)}</a></li>')
        body.append(blocks(text))
        body += [f"<div class='chart'>{c}</div>" for c in svgs]
    return string.Template((TEMPLATES / "report.html").read_text()).substitute(
        title=escape(title), style=(TEMPLATES / "report.css").read_text(), toc="".join(toc), body="".join(body))


def blocks(lines: list[str]) -> str:
    """Markdown lines to HTML: `###` headings, tables (a header row, its `|---|` line, rows), `- ` lists
    and paragraphs; every text escaped."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")), 6)
            out.append(f"<h{level}>{escape(line.lstrip('#').strip())}</h{level}>")
            i += 1
        elif line.startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append(_table(lines[i:j]))
            i = j
        elif line.startswith("- "):
            j = i
            while j < len(lines) and lines[j].startswith("- "):
                j += 1
            out.append("<ul>" + "".join(f"<li>{escape(x[2:])}</li>" for x in lines[i:j]) + "</ul>")
            i = j
        else:
            j = i
            while j < len(lines) and lines[j].strip() and not lines[j].startswith(("#", "|", "- ")):
                j += 1
            out.append("<p>" + escape(" ".join(lines[i:j])) + "</p>")
            i = j
    return "".join(out)


def _cells(row: str) -> list[str]:
    return [c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(row.strip().strip("|"))]


def _table(rows: list[str]) -> str:
    head, body = _cells(rows[0]), [_cells(r) for r in rows[1:] if not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", r.strip())]
    return ("<table><thead><tr>" + "".join(f"<th>{escape(c)}</th>" for c in head) + "</tr></thead><tbody>"
            + "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in body)
            + "</tbody></table>")
