"""What an experiment's results show ([Taufer] Figs. 1 and 5-7, [Zhang]'s sweeps): per query the
speed-up over node counts against the ideal with slow-downs and timeouts marked, the component shares
per node count and the components whose share grows with nodes, scheme against scheme per query,
one-factor sweeps with their best level and knee, node-count predictions checked against the runs,
and partitioning advice from the bytes each scheme shipped. Markdown and HTML (inline SVG charts),
CSV and JSON; derived by the SQL steps in `sql/`, rendered here."""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import asdict, replace
from pathlib import Path

import duckdb

from mwinv import kernel_knobs, privfile
from mwinv.capture.tables import ATTRIBUTION_COMPONENTS
from mwinv.cluster import storage
from mwinv.cluster.distribute import resolve_scheme
from mwinv.correlator import svg
from mwinv.correlator.load import connect, duck_type, literal, read_parquet
from mwinv.errors import MwinvError
from mwinv.experiment import html as report_html
from mwinv.experiment import predict
from mwinv.experiment.measure import OP_SCHEMA
from mwinv.experiment.predict import CellPrediction
from mwinv.experiment.results import NODE_SCHEMA, RESULT_SCHEMA
from mwinv.fmt import ms
from mwinv.kernel_settings import locate
from mwinv.workloads import tpch

SQL_DIR = Path(__file__).parent / "sql"
KNEE_GAIN = 0.10      # a level is worth its step while it cuts the time by a tenth or more
SHARE_GROWS = 0.05    # a component "grows with nodes" when its share rises by 5 points or more
BETTER_SCHEME = 0.10  # a scheme is advised when it is a tenth faster
LEVEL_UNITS = {"node_cpu": "CPUs", "node_memory_mb": "MB", "node_read_mbps": "MB/s", "link_mbit": "Mbit/s",
               "link_latency_ms": "ms", "parallel_workers": "workers", "streams": "streams"}


def open_results(out: str | Path) -> duckdb.DuckDBPyConnection:
    out = Path(out)
    parts = sorted((out / "results").glob("*.parquet"))
    if not parts:
        raise MwinvError(f"{out}: no results (run the plan first: mwinv experiment run PLAN -o {out})")
    con = connect()
    con.execute(f"CREATE VIEW results_read AS SELECT * FROM {read_parquet(parts)}")
    have = {r[0] for r in con.execute("DESCRIBE results_read").fetchall()}
    # results of an older runner lack the newer factors' columns: NULL, as an absent factor's default
    absent = "".join(f", CAST(NULL AS {duck_type(f.type)}) AS {f.name}" for f in RESULT_SCHEMA if f.name not in have)
    con.execute(f"CREATE VIEW results AS SELECT *{absent} FROM results_read")
    for table, schema in (("results_node", NODE_SCHEMA), ("results_op", OP_SCHEMA)):
        parts_ = sorted((out / table).glob("*.parquet"))
        if parts_:
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM {read_parquet(parts_)}")
        else:   # cells that all failed, or an older runner's results (no measured plans)
            cols = ", ".join(f"CAST(NULL AS {duck_type(f.type)}) AS {f.name}" for f in schema)
            con.execute(f"CREATE VIEW {table} AS SELECT {cols} LIMIT 0")
    for name in ("cell_query", "speedup", "scheme_diff", "sweep"):
        con.execute((SQL_DIR / f"{name}.sql").read_text())
    return con


def _rows(con, sql: str) -> list[dict]:
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def shares_by_nodes(con) -> list[dict]:
    """Per group and node count, each component's share of the queries' summed wall time."""
    comps = ", ".join(f"sum(c_{c}) AS {c}" for c in ATTRIBUTION_COMPONENTS)
    rows = _rows(con, f"""
        SELECT o.others AS grp, q.nodes, sum(q.wall_ns) AS wall_ns, {comps}
        FROM cell_query q JOIN cell_others o ON o.cell = q.cell AND o.factor = 'nodes'
        WHERE q.wall_ns IS NOT NULL GROUP BY ALL ORDER BY grp, nodes""")
    for r in rows:
        total = sum(r[c] or 0 for c in ATTRIBUTION_COMPONENTS) or 1
        r["shares"] = {c: (r[c] or 0) / total for c in ATTRIBUTION_COMPONENTS}
    return rows


def growing(shares: list[dict]) -> dict[str, list[str]]:
    """Per group, the components whose share grows from the smallest to the largest node count: what
    limits scaling."""
    out: dict[str, list[str]] = {}
    for grp in dict.fromkeys(r["grp"] for r in shares):
        mine = [r for r in shares if r["grp"] == grp]
        if len(mine) < 2:
            continue
        lo, hi = mine[0]["shares"], mine[-1]["shares"]
        out[grp] = [c for c in ATTRIBUTION_COMPONENTS if hi[c] - lo[c] >= SHARE_GROWS]
    return out


def sweep_findings(con) -> list[dict]:
    """Per factor, group and query: the best level and the knee (the last level that still cut the time
    by KNEE_GAIN against the one before it), and the levels above the best that were slower, with the
    component that grew (sweep_past_best)."""
    out = []
    rows = _rows(con, "SELECT * FROM sweep")
    past_best = _rows(con, "SELECT * FROM sweep_past_best")
    keys = dict.fromkeys((r["factor"], r["others"], r["query"]) for r in rows)
    for factor, others, query in keys:
        series = [r for r in rows if (r["factor"], r["others"], r["query"]) == (factor, others, query)]
        timed = [r for r in series if r["wall_ns"]]
        if not timed:
            continue
        best = min(timed, key=lambda r: r["wall_ns"])
        knee = series[0]["level"]
        for prev, cur in zip(series, series[1:]):
            if prev["wall_ns"] and cur["wall_ns"] and (prev["wall_ns"] - cur["wall_ns"]) / prev["wall_ns"] >= KNEE_GAIN:
                knee = cur["level"]
        past = [{"level": r["level"], "slower": r["wall_ns"] / r["best_ns"] - 1, "grew": r["grew"],
                 "grew_ns": r["grew_ns"]}
                for r in past_best if (r["factor"], r["others"], r["query"]) == (factor, others, query)]
        out.append({"factor": factor, "others": others, "query": query, "best": best["level"], "knee": knee,
                    "levels": [(r["level"], r["wall_ns"], r["timed_out"]) for r in series], "past_best": past})
    return out


def scheme_advice(con, schemes: dict[str, dict], predicted: list[CellPrediction]) -> list[str]:
    """Per query, the partitioning that ran it a tenth faster or more (measured): what to change in the
    slower scheme's tables (which to partition on which key, which to replicate), the bytes its data
    nodes shipped and over the busiest link, and what the model (predict.py), from the slower scheme's
    run alone, expected the change to gain."""
    out = []
    links = {(r["cell"], r["query"]): r for r in _rows(con, """
        SELECT cell, query, arg_max(node, b) AS node, max(b) AS bytes
        FROM (SELECT cell, query, node, avg(sent_bytes) AS b FROM results_node GROUP BY ALL) GROUP BY ALL""")}
    expect = {(p.from_cell, p.to_cell, p.query): p.predicted_ns for p in predicted}
    for r in _rows(con, "SELECT * FROM scheme_diff WHERE wall_a IS NOT NULL AND wall_b IS NOT NULL"):
        fast, slow = ("b", "a") if r["wall_b"] < r["wall_a"] else ("a", "b")
        wall_fast, wall_slow = r[f"wall_{fast}"], r[f"wall_{slow}"]
        gain = (wall_slow - wall_fast) / wall_slow
        if gain < BETTER_SCHEME:
            continue
        name_fast, name_slow = r[f"scheme_{fast}"], r[f"scheme_{slow}"]
        frm, to = schemes.get(name_slow), schemes.get(name_fast)
        if frm and to and not predict.placed_otherwise(frm, to) & tpch.query_tables(r["query"]):
            continue   # the schemes differ in tables the query does not read: not the partitioning (noise)
        change = _scheme_change(frm, to)
        link = links.get((r[f"cell_{slow}"], r["query"]))
        busiest = (f", {_mb(link['bytes'])} over {link['node']}'s link" if r["nodes"] > 1 and link and link["bytes"]
                   else "")
        pred = expect.get((r[f"cell_{slow}"], r[f"cell_{fast}"], r["query"]))
        model = ""
        unseen = next((p.unseen for p in predicted if (p.from_cell, p.to_cell, p.query) ==
                       (r[f"cell_{slow}"], r[f"cell_{fast}"], r["query"]) and p.unseen), "")
        if unseen:
            model = f"; from the {name_slow} run alone the model cannot say: {unseen}"
        elif pred is not None:
            d = (wall_slow - pred) / wall_slow
            model = (f"; from the {name_slow} run alone the model expected {ms(pred)} ms "
                     f"({abs(d):.0%} {'less' if d >= 0 else 'more'})")
        out.append(f"Q{r['query']} on {r['nodes']} data node{'s' if r['nodes'] > 1 else ''}: "
                   f"{change + ' (' + name_fast + ')' if change else 'use ' + name_fast} — "
                   f"{ms(wall_slow)} → {ms(wall_fast)} ms measured ({gain:.0%} less); the data nodes shipped "
                   f"{_mb(r[f'net_{slow}'] or 0)}{busiest} under {name_slow}, "
                   f"{_mb(r[f'net_{fast}'] or 0)} under {name_fast}; the component that moved most: "
                   f"{r['moved']} ({(r['moved_ns'] or 0) / 1e6:+.1f} ms {r['scheme_b']} − {r['scheme_a']}){model}")
    return out


def kernel_checks(con) -> list[dict]:
    """Per cell that ran kernel settings and query: its time against the cell with none and every other level
    equal (the baseline), and the kernel-level advice the baseline's statement carried for a knob the
    setting changed (kernel_knobs.py: its expected gain, an upper bound). A change within
    kernel_knobs.MIN_FAMILY_SHARE of the baseline is no gain: a rerun's noise."""
    out = []
    for r in _rows(con, """
            SELECT s.kernel AS setting, o.others, s.query, s.wall_ns, b.wall_ns AS base_ns, b.kernel_advice
            FROM cell_query s JOIN cell_others o ON o.cell = s.cell AND o.factor = 'kernel'
            JOIN cell_others bo ON bo.factor = 'kernel' AND bo.level = 'default' AND bo.others = o.others
            JOIN cell_query b ON b.cell = bo.cell AND b.query = s.query
            WHERE s.kernel <> 'default' ORDER BY s.kernel, s.query"""):
        paths = [str(locate(kv.split("=", 1)[0], dev="dev").path)[1:] for kv in r["setting"].split(",")]
        advised = [a for a in json.loads(r["kernel_advice"] or "[]")
                   if any(_governs(a["rule"], p) for p in paths)]
        change = (r["base_ns"] - r["wall_ns"]) / r["base_ns"] if r["base_ns"] and r["wall_ns"] else None
        out.append({**r, "advised": advised, "change": change,
                    "verdict": "-" if change is None else "gain" if change >= kernel_knobs.MIN_FAMILY_SHARE
                    else "slower" if change <= -kernel_knobs.MIN_FAMILY_SHARE else "no gain (within noise)"})
    return out


def _expected_gain(advised: list[dict], base_ns: int | None) -> float:
    """What the advice lines expect a setting to save in one coordinator statement: per node their gains
    summed, the largest node's (the nodes work side by side), at most the statement's time."""
    per_node: dict = {}
    for a in advised:
        per_node[a.get("node")] = per_node.get(a.get("node"), 0) + (a["expected_gain_ns"] or 0)
    best = max(per_node.values(), default=0)
    return min(best, base_ns) if base_ns else best


def _governs(rule: str, path: str) -> bool:
    """Whether the advice `rule` (kernel.<family>) names the knob at `path` (block devices: any)."""
    fam = next((f for f in kernel_knobs.FAMILIES if f"kernel.{f.key}" == rule), None)
    return fam is not None and any(fnmatch.fnmatch(path, k) for k in fam.knobs)


def _mb(b: float) -> str:
    return f"{b / 1e6:,.1f} MB" if b >= 1e5 else f"{b / 1e3:,.0f} kB"


def _scheme_change(frm: dict | None, to: dict | None) -> str:
    """What turns scheme `frm` into `to`, table by table ("partition orders on o_orderkey, as lineitem
    on l_orderkey; replicate part"); empty when a definition is unknown."""
    if not frm or not to:
        return ""
    was, now = frm.get("partitioned", {}), to.get("partitioned", {})
    steps = []
    for t, key in now.items():
        if was.get(t) == key:
            continue
        # co-partitioned: a table that stays partitioned on the same column domain (o_orderkey, l_orderkey)
        kept = [f"{u} on {k}" for u, k in now.items()
                if u != t and was.get(u) == k and k.split("_", 1)[-1] == key.split("_", 1)[-1]]
        steps.append(f"partition {t} on {key}" + (f" instead of {was[t]}" if t in was else "")
                     + (f", as {', '.join(kept)}" if kept else ""))
    gone = [t for t in was if t not in now]
    if gone:
        steps.append(f"replicate {', '.join(gone)} on every node")
    if frm.get("parts") != to.get("parts"):
        steps.append(f"{to.get('parts') or 'one'} part{'s' if to.get('parts') != 1 else ''} per table"
                     + ("" if to.get("parts") else " per node"))
    return "; ".join(steps)


def plan_schemes(out: Path) -> dict[str, dict]:
    """The definitions of the schemes an experiment ran, by name (plan.json; an older run's from the
    scheme specs it names, where they still resolve)."""
    f = out / "plan.json"
    plan = json.loads(f.read_text()) if f.exists() else {}
    if "schemes" in plan:
        return plan["schemes"]
    found = {}
    for spec in plan.get("factors", {}).get("scheme", []):
        try:
            d = resolve_scheme(spec).describe()
        except MwinvError:
            continue
        found[d["name"]] = d
    return found


def disk_rate(out: Path) -> float | None:
    """The data nodes' calibrated disk rate, bytes a second (calibration.json), if it was measured."""
    cal = out / "calibration.json"
    return json.loads(cal.read_text()).get("disk", {}).get("disk_rate_bps") if cal.exists() else None


RULES = ("nodes", "scheme", "nodes and scheme")
TRUSTED = {"median": 0.10, "hits": 0.90}   # the bar for advice to act on


def model_summary(con, out: Path) -> tuple[dict, list[CellPrediction]]:
    """Every cell predicted from every other with the same other levels (predict.py), the constants
    fitted on the odd-numbered queries, per rule (what differs) the errors of the odd (fitted) and the
    even (unseen) queries, how often the faster cell was foreseen, and the yardstick of predicting no
    change."""
    schemes = plan_schemes(out)
    runs = predict.load_runs(con, schemes)
    pairs = predict.pairs(runs, schemes)
    disk = disk_rate(out)
    k = predict.fit(pairs, disk)
    preds = sorted(predict.predict_all(pairs, k, disk),
                   key=lambda p: (RULES.index(p.rule), p.query, p.from_cell, p.to_cell))
    rules = []
    for rule in RULES:
        for half, parity in (("odd (fitted)", 1), ("even (unseen)", 0), ("all", None)):
            mine = [p for p in preds if p.rule == rule and (parity is None or p.query % 2 == parity)]
            made = [p for p in mine if p.predicted_ns is not None]
            if made:   # the yardstick over the same predictions; those the source cannot make, counted
                rules.append({"rule": rule, "queries": half, **predict.errors(made), **predict.winners(made),
                              "unchanged": predict.errors([replace(p, predicted_ns=p.from_ns) for p in made]),
                              "cannot": len(mine) - len(made)})
    return ({"constants": asdict(k), "rules": rules, "noise": predict.noise(runs), "repeats": predict.repeat_noise(con),
             "predictions": [{**asdict(p), "error": p.error} for p in preds]}, preds)


def trusted(r: dict) -> bool:
    """Whether a rule's record on a run (model_summary's rules) meets the bar to act on."""
    return r["median"] <= TRUSTED["median"] and (not r["pairs"] or r["hits"] >= TRUSTED["hits"] * r["pairs"])


def _trust(model: dict) -> str:
    """Whether the model's record on this run for the other scheme makes its expectations worth acting on."""
    r = next((r for r in model["rules"] if r["rule"] == "scheme" and r["queries"] == "all"), None)
    if r is None:
        return ""
    ok = trusted(r)
    return (f" The model's record for the other scheme on this run: median error {r['median']:.0%}, the faster scheme "
            f"foreseen in {r['hits']} of {r['pairs']} pairs that differ by a tenth or more: "
            + ("good enough to act on." if ok else f"not enough to act on alone (the bar: a median of "
               f"{TRUSTED['median']:.0%} and {TRUSTED['hits']:.0%} foreseen)."))


def summarize(out: str | Path) -> dict:
    con = open_results(out)
    try:
        varied = varied_factors(con)
        shares = shares_by_nodes(con)
        for r in shares:
            r["grp"] = group_label(r["grp"], varied)
        model, preds = model_summary(con, Path(out))
        return {
            "plan": json.loads((Path(out) / "plan.json").read_text()) if (Path(out) / "plan.json").exists() else {},
            "cells": _rows(con, "SELECT cell, nodes, scheme, node_cpu, node_memory_mb, node_read_mbps, link_mbit, "
                                "link_latency_ms, parallel_workers, streams, cold, kernel, storage, count(*) AS queries, "
                                "count(*) FILTER (WHERE timed_out) AS timeouts, count(*) FILTER (WHERE failed) AS failures "
                                "FROM cell_query GROUP BY ALL ORDER BY scheme, nodes, cell"),
            "speedup": [{**r, "grp": group_label(r["grp"], varied)} for r in _rows(con, "SELECT * FROM speedup")],
            "shares": [{k: v for k, v in r.items() if k in ("grp", "nodes", "wall_ns", "shares")} for r in shares],
            "growing": growing(shares),
            "scheme_diff": _rows(con, "SELECT * FROM scheme_diff"),
            "sweeps": [{**f, "others": group_label(f["others"], varied)} for f in sweep_findings(con)],
            "model": model,
            "scheme_advice": scheme_advice(con, plan_schemes(Path(out)), [p for p in preds if p.rule == "scheme"]),
            "kernel_checks": kernel_checks(con),
            "storage": storage.cells(Path(out)),
        }
    finally:
        con.close()


def _sweep_charts(sweeps: list[dict]) -> list[str]:
    """Per factor and group with numeric levels: each query's time against its best level's."""
    charts = []
    for factor, others in dict.fromkeys((f["factor"], f["others"]) for f in sweeps):
        series = {}
        for f in sweeps:
            if (f["factor"], f["others"]) != (factor, others):
                continue
            times = [w for _, w, _ in f["levels"] if w]
            if not times:   # timed out or failed at every level: no line
                continue
            best = min(times)
            try:
                series[f"Q{f['query']}"] = [(float(lv), w / best) for lv, w, _ in f["levels"] if w]
            except ValueError:   # levels that are not numbers (cold = true / false): the table says it
                break
        else:
            charts.append(svg.line_chart(series, f"{factor}, {others}", "time / best level's",
                                         x_format="{:g} " + LEVEL_UNITS.get(factor, "")))
    return charts


def varied_factors(con) -> set[str]:
    return {f for (f,) in con.execute("SELECT factor FROM cell_level GROUP BY factor HAVING count(DISTINCT level) > 1")
            .fetchall()}


def group_label(others: str, varied: set[str]) -> str:
    """A group's levels, only of the factors the plan varies (the fixed ones are in the cell table)."""
    kept = [kv for kv in others.split(" ") if kv.split("=", 1)[0] in varied]
    return " ".join(kept) or "all cells"


def _cells_md(s: dict, md: list[str], html: list[str]) -> None:
    """One row per cell with its factor levels and counts."""
    md += ["## Cells", "", "| cell | nodes | scheme | cpu | memory MB | read MB/s | link Mbit | link ms | workers | "
           "streams | cold | kernel | storage | queries | timeouts | failures |", "|" + "---|" * 16]
    for c in s["cells"]:
        md.append("| " + " | ".join(str(c[k] if c[k] is not None else "-") for k in (
            "cell", "nodes", "scheme", "node_cpu", "node_memory_mb", "node_read_mbps", "link_mbit", "link_latency_ms",
            "parallel_workers", "streams", "cold", "kernel", "storage", "queries", "timeouts", "failures")) + " |")
    md.append("")


def _speedup_md(s: dict, md: list[str], html: list[str]) -> None:
    """Per group whose cells differ in node count: each query's speed-up table and chart."""
    groups = list(dict.fromkeys(r["grp"] for r in s["speedup"]))
    if not any(len({r["nodes"] for r in s["speedup"] if r["grp"] == g}) > 1 for g in groups):
        return
    md += ["## Speed-up over node counts", "",
           "Against the ideal (nodes / the smallest count); ▼ a slow-down, ✗ a failure.", ""]
    for g in groups:
        mine = [r for r in s["speedup"] if r["grp"] == g]
        ns = sorted({r["nodes"] for r in mine})
        if len(ns) < 2:
            continue
        md += [f"### {g}", "", "| query | " + " | ".join(f"{n} node{'s' if n > 1 else ''}" for n in ns) + " |", "|---|" + "---|" * len(ns)]
        series = {"ideal": [(n, n / ns[0]) for n in ns]}
        for q in sorted({r["query"] for r in mine}):
            cells = []
            for n in ns:
                r = next((x for x in mine if x["query"] == q and x["nodes"] == n), None)
                if r is None:
                    cells.append("")
                elif r["timed_out"]:
                    cells.append("timeout")   # ⏱ is in no font here: a box
                elif r["failed"]:
                    cells.append("✗")
                else:
                    cells.append(f"{r['speedup']:.2f}{' ▼' if r['slowdown'] else ''} ({ms(r['wall_ns'])} ms)")
                    series.setdefault(f"Q{q}", []).append((n, r["speedup"]))
            md.append(f"| Q{q} | " + " | ".join(cells) + " |")
        md.append("")
        html.append(svg.line_chart(series, f"speed-up, {g}", "x", x_format="{:.0f} nodes", dashed=("ideal",)))


def _shares_md(s: dict, md: list[str], html: list[str]) -> None:
    """Per group, the coordinator's components per node count: a table and stacked bars."""
    if not s["shares"]:
        return
    md += ["## Component shares per node count", "",
           "The coordinator's time summed over the queries; remote_wait is its wait for the data nodes.", ""]
    for g in dict.fromkeys(r["grp"] for r in s["shares"]):
        mine = [r for r in s["shares"] if r["grp"] == g]
        md += [f"### {g}", "", "| nodes | wall ms | " + " | ".join(ATTRIBUTION_COMPONENTS) + " |",
               "|---|---|" + "---|" * len(ATTRIBUTION_COMPONENTS)]
        peak = max(r["wall_ns"] for r in mine) or 1
        for r in mine:
            md.append(f"| {r['nodes']} | {ms(r['wall_ns'])} | "
                      + " | ".join(f"{100 * r['shares'][c]:.0f}%" for c in ATTRIBUTION_COMPONENTS) + " |")
            html.append(svg.stacked_bar([(c, r["shares"][c] * r["wall_ns"]) for c in ATTRIBUTION_COMPONENTS],
                                        r["wall_ns"], peak, label=f"{g}: {r['nodes']} nodes, {ms(r['wall_ns'])} ms"))
        grows = s["growing"].get(g)
        if grows is not None:
            md += ["", f"Growing with nodes (what limits scaling): {', '.join(grows) if grows else 'none'}."]
        md.append("")
    html.append(svg.legend(list(ATTRIBUTION_COMPONENTS)))


def _scheme_md(s: dict, md: list[str], html: list[str]) -> None:
    """Scheme against scheme per query and node count, and the partitioning advice measured from it."""
    if s["scheme_diff"]:
        md += ["## Scheme against scheme", "", "| query | nodes | schemes a / b | ms a | ms b | kB shipped a | kB b "
               "| moved most (b − a) |", "|---|---|---|---|---|---|---|---|"]
        for r in s["scheme_diff"]:
            md.append(f"| Q{r['query']} | {r['nodes']} | {r['scheme_a']} / {r['scheme_b']} | {ms(r['wall_a'])} | "
                      f"{ms(r['wall_b'])} | {(r['net_a'] or 0) / 1e3:,.0f} | {(r['net_b'] or 0) / 1e3:,.0f} | "
                      f"{r['moved'] or '-'} {(r['moved_ns'] or 0) / 1e6:+.1f} ms |")
        md.append("")
    if s["scheme_advice"]:
        md += ["## Partitioning advice", "", "Measured: the scheme that ran the query a tenth faster or more, "
               "with what the model expected from the slower scheme's run alone." + _trust(s["model"]), ""]
        md += [f"- {a}" for a in s["scheme_advice"]] + [""]


def _sweeps_md(s: dict, md: list[str], html: list[str]) -> None:
    """Per one-factor sweep: the best level, the knee, what grew past the best level; the charts."""
    if not s["sweeps"]:
        return
    md += ["## One-factor sweeps", "", "Past the best level: the levels above it that took a tenth longer or "
           "more, and the component that grew the most from the best level (for CPUs: contention).", "",
           "| factor | others | query | best level | knee | past the best level | levels (ms) |",
           "|---|---|---|---|---|---|---|"]
    for f in s["sweeps"]:
        levels = ", ".join(f"{lv}: {'timeout' if to else ms(w)}" for lv, w, to in f["levels"])
        past = "; ".join(f"{p['level']}: +{p['slower']:.0%}, {p['grew']} +{ms(p['grew_ns'])} ms"
                         for p in f["past_best"]) or "-"
        md.append(f"| {f['factor']} | {f['others']} | Q{f['query']} | {f['best']} | {f['knee']} | {past} "
                  f"| {levels} |")
    md.append("")
    html += _sweep_charts(s["sweeps"])


def _kernel_md(s: dict, md: list[str], html: list[str]) -> None:
    """Each kernel setting's cells against the baseline, and the advice it checks (measured against expected)."""
    if not s["kernel_checks"]:
        return
    md += ["## Kernel settings checked by running", "",
           "Each setting's run against the cell without settings and every other level equal. The sysctls, THP and "
           "scheduler tunables are the host's: on this one-host cluster a setting applies to every node; a block "
           "device's to the disk all nodes' data directories are on. Advice: the kernel-level advice line on the "
           "baseline's statements (the coordinator's and its data nodes') for a knob the setting changed, with its "
           "expected gain (an upper bound: the family's time in the statement's own work on the node where it was "
           "largest, the nodes working side by side, and at most the baseline's time); a change within "
           f"{kernel_knobs.MIN_FAMILY_SHARE:.0%} is a rerun's noise.", "",
           "| setting | query | baseline ms | ms | change | advice in the baseline | expected gain ms | measured |",
           "|---|---|---|---|---|---|---|---|"]
    for c in s["kernel_checks"]:
        advice = ", ".join(f"{a['rule']} ({a.get('node') or '?'})" for a in c["advised"]) or "-"
        expected = _expected_gain(c["advised"], c["base_ns"])
        measured = c["verdict"]
        if c["advised"] and c["change"] is not None:
            gained = c["base_ns"] - c["wall_ns"]
            # the share of the bound only for a gain: "-1.4 ms of <= 0.2 expected (-874%)" said nothing
            measured += (f": {ms(gained)} ms of ≤ {ms(expected)} expected ({gained / expected:.0%})"
                         if expected and gained > 0 else f": {ms(gained)} ms (≤ {ms(expected)} expected)")
        change = f"{-c['change']:+.0%}" if c["change"] is not None else "-"
        md.append(f"| {c['setting']} | Q{c['query']} | {ms(c['base_ns'])} | {ms(c['wall_ns'])} | {change} | {advice} "
                  f"| {ms(expected) if c['advised'] else '-'} | {measured} |")
    md.append("")


def _storage_md(s: dict, md: list[str], html: list[str]) -> None:
    """The storage back-ends' cells (mwinv/cluster/storage.py): per query its time on each, the data nodes'
    wait on remote storage split over the stream's blocks, and per back-end the block that bounds it."""
    if not s["storage"]:
        return
    md += ["## Storage back-ends", "", "Per query its time on each back-end; on a remote one the data nodes' wait on it, "
           "split over the link, the serving daemons, the remote disk and the FUSE client: by what the processes "
           "linked to it by TCP did over the statement, the link what remains (\"linked by TCP\"), else in proportion "
           "to their busy time over the statement or the cell's passes (the last column); then each back-end's blocks "
           "and the kind that bounds the stream (docs/storage.md).", ""]
    md += storage.markdown(s["storage"]) + [""]
    rows = s["storage"]["queries"]
    peak = max((r["wall_ns"] or 0 for r in rows), default=0)
    for r in rows:
        if r["wall_ns"]:
            parts = [(k, r["split_ns"].get(k, 0)) for k in storage.SPLIT_KINDS]
            html.append(svg.stacked_bar(parts + [("rest", r["wall_ns"] - sum(v for _, v in parts))], r["wall_ns"], peak,
                                        label=f"Q{r['query']} {r['storage']}: {ms(r['wall_ns'])} ms"))
    html.append(svg.legend([*storage.SPLIT_KINDS, "rest"]))


def _predictions_sections(s: dict, md: list[str], html: list[str]) -> None:
    """Every cell predicted from the others: the rule's errors, then each prediction against its run."""
    m = s["model"]
    if not m["predictions"]:
        return
    k = m["constants"]
    md += ["## Every cell predicted from the others, then run", "",
           "From a query's run in one cell, its time in each cell that differs in the node count, the scheme or both "
           "(docs/experiments.md, mwinv/experiment/predict.py): what the run measured (the rows and bytes each "
           "foreign scan returned, each operator's own time, the nodes' CPU and waits), moved and shared out under "
           "the other cell's levels, combined as a critical path. Constants fitted on the odd-numbered queries: "
           f"{k['row_ns']:,.0f} ns a shipped row, {k['rt_ns'] / 1e6:g} ms a round trip, CPU contention exponent "
           f"{k['contention']:g}, page cache {k['cache_share']:.0%} of a node's memory, overlap {k['overlap']:.0%}, a "
           f"node's system CPU with its data cached {k['sys_share']:.0%} of its user CPU; the "
           "even-numbered queries were not seen by the fit. Faster foreseen: of the pairs whose times differ by a tenth or "
           "more, those the prediction sent the same way (for a scheme change, only the queries that read a table the "
           "schemes place otherwise: the others run the same plan). Cannot predict: the target's plan is not in the "
           "source run (the reason beside each); those are left out of the errors, the yardstick's too.", "",
           "| what differs | queries | predictions | mean error | median | within 10 % | within 25 % | faster foreseen "
           "| no change: mean / median | cannot predict |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in m["rules"]:
        u = r["unchanged"]
        md.append(f"| {r['rule']} | {r['queries']} | {r['n']} | {r['mean']:.0%} | {r['median']:.0%} | {r['within_10']} | "
                  f"{r['within_25']} | {r['hits']} of {r['pairs']} | {u['mean']:.0%} / {u['median']:.0%} | "
                  f"{r['cannot']} |")
    if m.get("noise"):
        n = m["noise"]
        md += ["", f"Run-to-run noise, the floor under these errors: the queries that ran on the coordinator alone "
               f"(Q{', Q'.join(map(str, n['queries']))}: their tables in the same place, the data nodes idle) differ "
               f"between cells by a median of {n['median']:.0%}, a mean of {n['mean']:.0%} ({n['pairs']} pairs, "
               "taken as the errors are); a cell's time is the median of its runs, so repetitions lower it."]
    if m.get("repeats"):
        n = m["repeats"]
        md += ["", f"One cell's runs of a query (its repetitions and streams) differ by a median of {n['median']:.0%}, "
               f"a mean of {n['mean']:.0%} ({n['pairs']} pairs): the noise of a single run."]
    md += ["", "| query | from | to | from ms | predicted ms | measured ms | error |", "|---|---|---|---|---|---|---|"]
    for p in m["predictions"]:
        got = (f"{ms(p['predicted_ns'])} | {ms(p['measured_ns'])} | {p['error']:+.0%}" if p["predicted_ns"] is not None
               else f"— | {ms(p['measured_ns'])} | cannot predict: {p['unseen']}")
        md.append(f"| Q{p['query']} | {p['from_nodes']} × {p['from_scheme']} | {p['nodes']} × {p['scheme']} | "
                  f"{ms(p['from_ns'])} | {got} |")
    md.append("")


def render(out: str | Path) -> tuple[Path, Path]:
    """report.md and report.html (with charts), results.csv and summary.json in OUT/report."""
    out = Path(out)
    s = summarize(out)
    rep = out / "report"
    privfile.make_dir(rep)
    con = open_results(out)
    csv, tmp = rep / "results.csv", rep / "results.csv.tmp"
    tmp.unlink(missing_ok=True)   # DuckDB writes it: in a directory only we may write to, then made private
    con.execute(f"COPY (SELECT * FROM results ORDER BY cell, query, repetition, stream) TO {literal(tmp)} "
                "(HEADER, DELIMITER ',')")
    con.close()
    os.replace(privfile.restrict(tmp), csv)
    privfile.write(rep / "summary.json", json.dumps(s, indent=1, default=str))
    md, charts = [f"# Experiment {s['plan'].get('name', out.name)}", ""], []
    # each section appends its markdown lines and its charts (none when the plan gives it nothing)
    for section in (_cells_md, _speedup_md, _shares_md, _scheme_md, _sweeps_md, _kernel_md, _storage_md,
                    _predictions_sections):
        html: list[str] = []
        section(s, md, html)
        charts += [(len(md), h) for h in html]   # at the end of the section just written
    md_path = privfile.write(rep / "report.md", "\n".join(md))
    html_path = privfile.write(rep / "report.html", report_html.page(md, charts))
    return html_path, md_path
