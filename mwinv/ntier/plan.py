"""An n-tier experiment plan, run by `mwinv experiment run` (a plan with kind = "ntier") or `mwinv ntier
plan`: replicas, the balancer's policy and weights, the caps and the think time as factors, each
combination of their levels a cell (one run of the scenario, mwinv/ntier/surface.py's run_scenario),
and the clients as the load levels every cell's run goes through (one capture, each level ramped and
measured on its own). A cell that fails is a failed cell, the others go on; a cell whose run is complete
(its distributions.json) is analysed again, not run: an interrupted plan resumes.

    kind = "ntier"
    name = "replicas-and-policy"
    clients = [4, 16]                 # the load levels of every cell
    check_advice = false
    [scenario]                        # the same in every cell (mwinv ntier run's options)
    run_s = 6
    ramp_up_s = 2
    ramp_down_s = 1
    comments = 100000
    trace = true                      # the time in pgpool per statement
    [factors]
    replicas = [1, 2]
    policy = ["session", "statement"]
    replica_cpu = [0.5]
    link_mbit = [20]                  # every tier's link (tbf); replica_read_mbps: their disks (blkio)
    weights = [[1, 1, 1], [2, 1, 1], {2 = [1, 3], 3 = [1, 1, 2]}]
                                      # per replica: a list's i-th number is ri's with any replica
                                      # count; a table by replica count gives each its own list

Outputs: out/cell-<id>/ each cell's run and report, out/results.json, .md, .html: pages/s, the story
page's p99, the bottleneck and pgpool's own time per cell and load level."""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import fields
from pathlib import Path

from mwinv import privfile
from mwinv.cluster.distribute import read_toml
from mwinv.errors import MwinvError
from mwinv.ntier import analyse, bboard, report
from mwinv.ntier.pgpool import weights_for
from mwinv.ntier.scenario import NTierConfig, check_clients
from mwinv.ntier.surface import cell_row, run_scenario, write_table

KIND = "ntier"
FACTORS = ("replicas", "policy", "weights", "replica_cpu", "pool_cpu", "replica_read_mbps", "link_mbit", "think_ms")
SIZE = tuple(f.name for f in fields(bboard.Size))
SCENARIO = ("ramp_up_s", "run_s", "ramp_down_s", "think_ms", "replica_cpu", "pool_cpu", "replica_read_mbps",
            "link_mbit", "trace", "max_lag_s", "sample_interval_s") + SIZE
MARKER = "ntier-plan.json"


def is_ntier_plan(path: str | Path) -> bool:
    return read_toml(Path(path)).get("kind") == KIND


def load(path: str | Path) -> dict:
    """The plan, every cell's configuration built (and so checked) before anything starts: a bad key
    or value is one line naming the file and the key, or the cell."""
    p = Path(path)
    data = read_toml(p)
    unknown = set(data) - {"kind", "name", "clients", "check_advice", "scenario", "factors"}
    if unknown or data.get("kind") != KIND:
        raise MwinvError(f"{p}: " + (f"unknown key {sorted(unknown)[0]!r}" if unknown else f'kind = "{KIND}" expected'))
    scenario, factors = data.get("scenario", {}), data.get("factors", {})
    for key, table, allowed in (("scenario", scenario, SCENARIO), ("factors", factors, FACTORS)):
        if not isinstance(table, dict):
            raise MwinvError(f"{p}: {key}: a table ([{key}])")
        bad = sorted(set(table) - set(allowed))
        if bad:
            raise MwinvError(f"{p}: [{key}] {bad[0]}: unknown (one of {', '.join(allowed)})")
    for key, value in scenario.items():
        if not (isinstance(value, bool) if key == "trace" else isinstance(value, (int, float))
                and not isinstance(value, bool)):
            raise MwinvError(f"{p}: [scenario] {key} = {value!r}: " + ("true or false" if key == "trace" else "a number"))
    for name, levels in factors.items():
        if not isinstance(levels, list) or not levels:
            raise MwinvError(f"{p}: [factors] {name} = {levels!r}: a non-empty list of levels")
    clients = data.get("clients", [4, 16])
    if not isinstance(clients, list) or not all(isinstance(c, int) and not isinstance(c, bool) for c in clients):
        raise MwinvError(f"{p}: clients = {clients!r}: a list of client counts (the load levels)")
    try:
        check_clients(clients)
    except MwinvError as exc:
        raise MwinvError(f"{p}: clients: {exc}") from None
    names = list(factors)
    cells = {}
    for combo in itertools.product(*(factors[n] for n in names)):
        levels = dict(zip(names, combo))
        label = " ".join(f"{k}={_level(v)}" for k, v in levels.items())
        size = {k: scenario[k] for k in SIZE if k in scenario}
        try:
            config = {**{k: v for k, v in scenario.items() if k not in SIZE}, **levels}
            config["weights"] = weights_for(config.get("weights"), config.get("replicas", NTierConfig.replicas))
            cfg = NTierConfig(**config, size=bboard.Size(**size))
        except (MwinvError, TypeError) as exc:
            raise MwinvError(f"{p}: cell {label or '(the only one)'}: {exc}") from None
        cell_id = hashlib.sha1(json.dumps(levels, sort_keys=True).encode()).hexdigest()[:10]
        cells[label or "scenario"] = (cell_id, cfg)
    return {"path": str(p), "name": data.get("name", p.stem), "clients": clients,
            "check_advice": bool(data.get("check_advice", False)), "cells": cells}


def _level(v) -> str:
    """A factor's level in a cell's label: 2,1 for a list, 2:1,3;3:1,1,2 for a table by replica count."""
    if isinstance(v, dict):
        return ";".join(f"{k}:{_level(x)}" for k, x in v.items())
    return ",".join(map(str, v)) if isinstance(v, list) else str(v)


def run(path: str | Path, out: str | Path, progress) -> dict:
    """Every cell in turn (a complete one analysed again), then the results table."""
    plan = load(path)
    out = Path(out)
    privfile.make_dir(out)
    privfile.write(out / MARKER, json.dumps({"path": plan["path"], "name": plan["name"], "clients": plan["clients"],
                                             "cells": {k: v[0] for k, v in plan["cells"].items()}}, indent=1))
    rows = {}
    for i, (label, (cell_id, cfg)) in enumerate(plan["cells"].items(), 1):
        cell_out = out / f"cell-{cell_id}"
        if (cell_out / "distributions.json").exists():
            progress(f"cell {i}/{len(plan['cells'])} {label}: done before, analysed again")
            rows[label] = _again(cell_out)
            continue
        progress(f"cell {i}/{len(plan['cells'])} {label}")
        try:
            result, _, failed = run_scenario(cfg, plan["clients"], cell_out, plan["check_advice"], progress)
        except MwinvError as exc:
            rows[label] = {"error": str(exc)}
            continue
        rows[label] = cell_row(result, str(failed) if failed else None)
    return _results(out, plan["name"], plan["clients"], rows)


def _again(cell_out: Path) -> dict:
    result = analyse.analyse(cell_out)
    report.write(cell_out, result)
    return cell_row(result, result.get("error"))


def rebuild(out: str | Path) -> dict:
    """The results again from each cell's run (`mwinv experiment report`, `mwinv ntier report`)."""
    out = Path(out)
    marker = json.loads((out / MARKER).read_text())
    rows = {label: _again(out / f"cell-{cell_id}") if (out / f"cell-{cell_id}" / "ntier.json").exists()
            else {"error": "not run"} for label, cell_id in marker["cells"].items()}
    return _results(out, marker["name"], marker["clients"], rows)


def _results(out: Path, name: str, clients: list[int], rows: dict) -> dict:
    return write_table(out, {"title": f"plan {name}: cells x clients", "rows": "cell", "clients": clients,
                             "cells": rows}, stem="results")
