"""A run of the scenario with its analysis and report (`mwinv ntier run`), and the throughput surface
over replicas x clients: one run per replica count into out/r<n>/, then per cell the pages/s, the
story page's p99 and the bottleneck, the tier and resource (CPU; with their caps, disk reads and link) whose
utilisation of its capacity is highest at that level (named saturated when most of its samples sit at
90 % or more), and how it moves as replicas are added."""

from __future__ import annotations

import json
from pathlib import Path

from mwinv import privfile
from mwinv.correlator import svg
from mwinv.errors import MwinvError
from mwinv.experiment.html import page
from mwinv.fmt import duration, pct
from mwinv.ntier import analyse, evidence, report
from mwinv.ntier.scenario import NTier, NTierConfig


def run_scenario(cfg: NTierConfig, levels: list[int], out: str | Path, check_advice: bool,
                 progress) -> tuple[dict, list[str], MwinvError | None]:
    """Up, every level, analysis, evidence for the rare heavy statements, down; then the report.
    Returns (result, the report's markdown, the error that ended the run early or None)."""
    with NTier(cfg, progress=progress) as nt:
        failed = None
        try:
            nt.run(out, levels)
        except MwinvError as exc:
            failed = exc
        try:
            result = analyse.analyse(out)
        except MwinvError:
            if failed:
                raise failed from None
            raise
        for finding in result["rare_heavy"]:
            progress(f"evidence for query id {finding['query_id']}")
            evidence.gather(finding, nt.servers, nt.primary, nt.wait_replay, check_advice and not failed)
        privfile.write(Path(out) / analyse.EVIDENCE, json.dumps(
            {f["query_id"]: {"evidence": f["evidence"], "advice": f["advice"]} for f in result["rare_heavy"]}))
        analyse.save(out, result)
    return result, report.write(out, result), failed


def bottleneck(result: dict, clients: int) -> dict:
    """The saturated tiers at this level, most saturated first, with the resource that saturated first
    among them (the most saturated tier's, of CPU, disk and link against their capacities); none
    saturated: the tier and resource with the highest p90 utilisation. "resources": per saturated tier
    its saturated resources."""
    cells = []   # (utilisation spread, tier, resource)
    for node, t in result["tiers"].items():
        u = t["levels"].get(str(clients))
        if u:
            cells += [(u, node, "cpu")] + [(u[r], node, r) for r in ("disk", "link") if r in u]
    if not cells:
        return {"tiers": []}
    hot = sorted((x for x in cells if x[0]["saturated"]), key=lambda x: -x[0]["saturated_share"])
    if hot:
        tiers = list(dict.fromkeys(n for _, n, _ in hot))
        return {"tiers": tiers, "resource": analyse.RESOURCE_NAMES[hot[0][2]], "saturated": True,
                "p90": max(u["p90"] for u, _, _ in hot),
                "resources": {n: [analyse.RESOURCE_NAMES[r] for _, m, r in hot if m == n] for n in tiers}}
    u, node, r = max(cells, key=lambda x: x[0]["p90"])
    return {"tiers": [node], "resource": analyse.RESOURCE_NAMES[r], "saturated": False, "p90": u["p90"]}


def cell_row(result: dict, failed: str | None) -> dict:
    """Per level of one run: pages/s, the story page's p99, the bottleneck, pgpool's own time per
    statement (p50, with --trace) and the most a replica was behind."""
    row = {"error": failed}
    pages = result["pages"].get("story", {})
    own = result.get("balancer", {}).get("own_all", {})
    for lv in result["levels"]:
        c = lv["clients"]
        row[str(c)] = {"pages_per_s": lv["pages_per_s"], "story_p99_ns": pages.get(str(c), {}).get("p99_ns"),
                       "bottleneck": bottleneck(result, c), "pgpool_own_p50_ns": own.get(str(c), {}).get("p50_ns"),
                       "lag_s": max((v["max_s"] for v in lv.get("replica_lag", {}).values()), default=None)}
    return row


def rebuild(out: str | Path) -> dict:
    """The surface again from each replica count's run in out (`mwinv ntier report`)."""
    out = Path(out)
    old = json.loads((out / "surface.json").read_text())
    cells = {}
    for r in old["replicas"]:
        if (out / f"r{r}" / "ntier.json").exists():
            result = analyse.analyse(out / f"r{r}")
            report.write(out / f"r{r}", result)
            cells[str(r)] = cell_row(result, result.get("error"))
        else:
            cells[str(r)] = old["cells"].get(str(r), {"error": "no run"})
    return write_table(out, {"clients": old["clients"], "replicas": old["replicas"], "cells": cells})


def surface(configs: dict[int, NTierConfig], levels: list[int], out: str | Path, check_advice: bool,
            progress) -> dict:
    """One run per replica count (configs: replicas -> its config); a run that fails is a failed cell
    (its error kept), the others go on."""
    out = Path(out)
    privfile.make_dir(out)
    cells: dict = {}
    for replicas, cfg in configs.items():
        progress(f"surface: {replicas} replicas")
        try:
            result, _, failed = run_scenario(cfg, levels, out / f"r{replicas}", check_advice, progress)
        except MwinvError as exc:
            cells[str(replicas)] = {"error": str(exc)}
            continue
        cells[str(replicas)] = cell_row(result, str(failed) if failed else None)
    return write_table(out, {"clients": levels, "replicas": list(configs), "cells": cells})


def write_table(out: Path, surf: dict, stem: str = "surface") -> dict:
    privfile.write(out / f"{stem}.json", json.dumps(surf, indent=1))
    md, charts = markdown(surf)
    privfile.write(out / f"{stem}.md", "\n".join(md) + "\n")
    privfile.write(out / f"{stem}.html", page(md, charts))
    surf["markdown"] = md
    return surf


def markdown(surf: dict) -> tuple[list[str], list[tuple[int, str]]]:
    """The table of rows (replica counts, or a plan's cells: surf["rows"] names them) x clients."""
    levels, rows = surf["clients"], surf.get("rows", "replicas")
    md = [f"# mwinv ntier: {surf.get('title', 'throughput surface over replicas x clients')}", "",
          "## Pages/s and the bottleneck", "",
          "Each cell: pages/s in the measured period, the story page's p99, and the bottleneck: the **saturated** "
          "tiers and resources (most of their samples at 90 % or more of the capacity: CPU, and with "
          "their caps disk reads and link), most saturated first, else the tier and resource with the highest p90 "
          "utilisation; with `--trace` pgpool's own time per statement (p50).", "",
          f"| {rows} | " + " | ".join(f"{c} clients" for c in levels) + " |", "|---|" + "---|" * len(levels)]
    series = {}
    for r, row in surf["cells"].items():
        if row.get("error") and not any(str(c) in row for c in levels):
            md.append(f"| {r} | failed: {row['error']} |" + " |" * (len(levels) - 1))
            continue
        cells = []
        for c in levels:
            cell = row.get(str(c))
            if cell is None:
                cells.append("-")
                continue
            b = cell["bottleneck"]
            where = ("**" + " ".join(f"{n} {'+'.join(b['resources'][n])}" for n in b["tiers"]) + "**"
                     if b.get("saturated") else
                     f"{b['tiers'][0]} {b['resource']} p90 {pct(b['p90'])}") if b.get("tiers") else "-"
            own = f", pgpool {duration(cell['pgpool_own_p50_ns'])}" if cell.get("pgpool_own_p50_ns") else ""
            cells.append(f"{cell['pages_per_s']:,.0f}/s, p99 {duration(cell['story_p99_ns'])}, {where}{own}")
            series.setdefault(f"{r} replicas" if rows == "replicas" else r, []).append((c, cell["pages_per_s"]))
        md.append(f"| {r} | " + " | ".join(cells) + " |")
    charts = [(len(md), svg.line_chart(series, "pages/s by clients", "pages/s", x_format="{:.0f} clients"))] \
        if series else []
    return md, charts
