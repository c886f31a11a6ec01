"""A scheme or node count an experiment never ran, predicted from the cells it did run: every query from
every cell with the same other levels (predict.py, the constants fitted on the run as the report fits
them), combined per query by the rule with the best record on this run, and that record beside it, so that
a DBA can ask "what if I co-partition these tables, on this many nodes" before reloading anything."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from mwinv.cluster.distribute import resolve_scheme
from mwinv.correlator import svg
from mwinv.errors import MwinvError
from mwinv.experiment import html as report_html
from mwinv.experiment import predict, report
from mwinv.fmt import ms


@dataclass
class Source:
    cell: str
    nodes: int
    scheme: str
    rule: str
    measured_ns: int
    predicted_ns: int | None
    unseen: str


def target_scheme(spec: str, schemes: dict[str, dict]) -> dict:
    """The scheme asked about, under a name of its own unless the run ran that very definition."""
    d = resolve_scheme(spec).describe()
    known = schemes.get(d["name"])
    if known is not None and (known.get("partitioned"), known.get("parts")) != (d["partitioned"], d["parts"]):
        d = {**d, "name": f"{d['name']} (what-if)"}
    return d


def whatif(out: str | Path, spec: str, nodes: list[int] | None = None) -> dict:
    """Per target node count (default: the run's), per query: the predictions from each cell, the one kept
    (the median of the predictions of the rule that did best on this run) and the fastest measured cell at
    that node count to compare it with."""
    out = Path(out)
    for n in nodes or ():
        if n < 1:
            raise MwinvError(f"--nodes {n}: a node count is 1 or more")
    schemes = report.plan_schemes(out)
    target = target_scheme(spec, schemes)
    schemes = {**schemes, target["name"]: target}
    con = report.open_results(out)
    try:
        model, _ = report.model_summary(con, out)
        runs = predict.load_runs(con, schemes)
        varied = report.varied_factors(con) - {"nodes", "scheme"}
    finally:
        con.close()
    if not runs:
        raise MwinvError(f"{out}: no cell has a measured plan to predict from (results of an older runner?)")
    k = predict.Constants(**model["constants"])
    record = {r["rule"]: r for r in model["rules"] if r["queries"] == "all"}
    # the rules from the most trustworthy on this run (their median error, then their mean), then those the
    # run has no record of (one node count: no pair of cells differs in it)
    ranked = sorted(record, key=lambda r: (record[r]["median"], record[r]["mean"]))
    ranked += [r for r in report.RULES if r not in record]
    disk = report.disk_rate(out)
    by: dict[tuple, list[predict.Run]] = {}
    for r in runs:
        by.setdefault((r.others, r.query), []).append(r)
    targets = []
    for n in sorted(set(nodes or (r.nodes for r in runs))):
        rows = []
        for (others, query), group in sorted(by.items()):
            sources, measured = [], None
            for src in group:
                if src.nodes == n and src.scheme == target["name"]:
                    measured = src.wall_ns   # the target was run: the prediction can be checked
                    continue
                c = predict.change(src, n, target["name"], schemes)
                if c is None:
                    continue
                sources.append(Source(src.cell, src.nodes, src.scheme, predict.rule_of(src, n, target["name"]),
                                      src.wall_ns, None if c.unseen else predict.predict(src, n, c, k, disk),
                                      c.unseen))
            made = [s for s in sources if s.predicted_ns is not None]
            rule = next((r for r in ranked if any(s.rule == r for s in made)), None)
            kept = int(statistics.median(s.predicted_ns for s in made if s.rule == rule)) if rule else None
            now = [r for r in group if r.nodes == n and r.scheme != target["name"] and r.wall_ns]
            best = min(now, key=lambda r: r.wall_ns, default=None)
            label = report.group_label(" ".join(others), varied) if varied else ""
            rows.append({"query": query, "others": label, "predicted_ns": kept, "rule": rule,
                         "measured_ns": measured, "best_scheme": best.scheme if best else None,
                         "best_ns": best.wall_ns if best else None,
                         "unseen": sorted({s.unseen for s in sources if s.unseen}) if kept is None else [],
                         "sources": [vars(s) for s in sources]})
        targets.append({"nodes": n, "queries": rows})
    return {"scheme": target, "constants": model["constants"], "record": record, "targets": targets}


def _pct(a: float, b: float) -> str:
    return f"{(a - b) / b:+.0%}" if b else ""


def render(w: dict) -> tuple[str, str]:
    """The what-if as markdown, and as HTML with a chart per node count: each query's predicted time
    against the fastest scheme run there."""
    md: list[str] = []
    charts: list[tuple[int, str]] = []
    for line in markdown(w).splitlines():
        md.append(line)
        if line.startswith("## ") and line.endswith(("data node", "data nodes")):
            t = w["targets"][sum(1 for x in md if x.startswith("## ")) - 1]
            made = [r for r in t["queries"] if r["predicted_ns"] is not None]
            peak = max((max(r["predicted_ns"], r["best_ns"] or 0) for r in made), default=0)
            bars = [svg.stacked_bar([(kind, v)], v, peak, label=f"Q{r['query']} {kind} {ms(v)} ms"
                                    + (f" ({r['best_scheme']})" if kind == "fastest run" else ""))
                    for r in made for kind, v in (("predicted", r["predicted_ns"]), ("fastest run", r["best_ns"])) if v]
            if bars:
                charts.append((len(md), "<br>".join(bars) + svg.legend(["predicted", "fastest run"])))
    return "\n".join(md), report_html.page(md, charts)


def markdown(w: dict) -> str:
    """The what-if as a report: per node count a table of the queries, the totals, and the model's record."""
    s = w["scheme"]
    parts = ", ".join(f"{t} on {k}" for t, k in s["partitioned"].items())
    md = [f"# What if: {s['name']}", "",
          f"Partitioned: {parts}; {s.get('parts') or 'one'} part{'s' if s.get('parts') != 1 else ''} per table"
          + ("" if s.get("parts") else " per node") + "; every other table replicated. Predicted from the run's "
          "cells, not run.", ""]
    for t in w["targets"]:
        md += [f"## {t['nodes']} data node{'s' * (t['nodes'] != 1)}", "",
               "| query | predicted ms | from (rule) | fastest run there | its ms | change | measured ms |",
               "|---|---|---|---|---|---|---|"]
        pred_sum = best_sum = 0
        for r in t["queries"]:
            label = f"Q{r['query']}" + (f" ({r['others']})" if r["others"] else "")
            if r["predicted_ns"] is None:
                why = "; ".join(r["unseen"]) or "no cell with a measured plan"
                md.append(f"| {label} | cannot predict: {why} | | {r['best_scheme'] or ''} | "
                          f"{ms(r['best_ns']) if r['best_ns'] else ''} | | |")
                continue
            n_src = sum(1 for x in r["sources"] if x["rule"] == r["rule"] and x["predicted_ns"] is not None)
            md.append(f"| {label} | {ms(r['predicted_ns'])} | {n_src} cell{'s' * (n_src != 1)} ({r['rule']}) | "
                      f"{r['best_scheme'] or ''} | {ms(r['best_ns']) if r['best_ns'] else ''} | "
                      f"{_pct(r['predicted_ns'], r['best_ns']) if r['best_ns'] else ''} | "
                      f"{ms(r['measured_ns']) if r['measured_ns'] else ''} |")
            if r["best_ns"]:
                pred_sum += r["predicted_ns"]
                best_sum += r["best_ns"]
        if best_sum:
            md += ["", f"Over the queries predicted and run there: {ms(pred_sum)} ms predicted against "
                   f"{ms(best_sum)} ms for the fastest scheme run per query ({_pct(pred_sum, best_sum)}).", ""]
    md += ["## The model's record on this run", "",
           "| what differs | predictions | median error | mean error | faster foreseen |", "|---|---|---|---|---|"]
    for rule, r in w["record"].items():
        md.append(f"| {rule} | {r['n']} | {r['median']:.0%} | {r['mean']:.0%} | {r['hits']} of {r['pairs']} |")
    bar = report.TRUSTED
    good = [rule for rule, r in w["record"].items() if report.trusted(r)]
    md += ["", f"A prediction is as good as its rule's record: the bar to act on is a median error of "
           f"{bar['median']:.0%} and the faster cell foreseen in {bar['hits']:.0%} of the pairs that differ by a "
           "tenth or more; " + (f"met on this run by: {', '.join(good)}." if good else "no rule meets it on this run."),
           ""]
    return "\n".join(md)
