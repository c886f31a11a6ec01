"""An n-tier run's report: one markdown text (printed in the terminal, out/report.md) and the same as
HTML with its charts (out/report.html, mwinv/experiment/html.py's page): throughput and routing per
load level, the pages' and the statements' latency distributions, each tier's utilisation density,
the rare heavy statements with their evidence and advice, and what the run did not measure."""

from __future__ import annotations

from pathlib import Path

from mwinv import privfile
from mwinv.correlator import svg
from mwinv.experiment.html import page
from mwinv.fmt import duration, pct
from mwinv.ntier import analyse

TOP_STATEMENTS = 8
CHARTED = 4


def _pcts(s: dict) -> list[str]:
    return [f"{s['n']:,}", *(duration(s[f"{p}_ns"]) for p in ("p50", "p90", "p99", "max"))]


def _text(t: str, width: int = 70) -> str:
    t = " ".join(t.split()).replace("|", "\\|")
    return t if len(t) <= width else t[:width - 1] + "…"


def _levels(d: dict) -> list[str]:
    """A table's levels, then "all" when there are several."""
    levels = sorted((k for k in d if k != "all"), key=int)
    return levels + (["all"] if "all" in d and len(levels) > 1 else [])


def markdown(result: dict) -> tuple[list[str], list[tuple[int, str]]]:
    cfg = result["config"]
    md = [f"# mwinv ntier: {cfg['replicas']} replicas behind pgpool-II, balancing per {cfg['policy']}",
          "", f"Clients {', '.join(map(str, cfg['clients']))}; each level ramped up over {cfg['ramp_up_s']:g} s, "
          f"measured over {cfg['run_s']:g} s, ramped down over {cfg['ramp_down_s']:g} s; think time "
          f"{cfg['think_ms']:g} ms; replicas capped at {cfg['replica_cpu'] or 'no'} CPU, pgpool at "
          f"{cfg['pool_cpu'] or 'no'} CPU, replicas' disk reads at "
          + (f"{cfg['replica_read_mbps']:g} MB/s" if cfg.get("replica_read_mbps") else "no cap")
          + ", every tier's link at " + (f"{cfg['link_mbit']:g} Mbit/s" if cfg.get("link_mbit") else "no cap")
          + "; each tier in a network namespace of its own."]
    if result.get("error"):
        md += ["", f"**The run stopped early:** {result['error']}. The levels before are reported."]
    charts: list[tuple[int, str]] = []
    md += ["", "## Throughput and routing per load level", "",
           "| clients | pages/s | statements/s | database busy per node | client sessions per replica | "
           "SELECTs pgpool sent | most replication lag |", "|---|---|---|---|---|---|---|"]
    for lv in result["levels"]:
        busy = ", ".join(f"{n} {v:.2f}" for n, v in sorted(lv["db_busy_by_node"].items()))
        sess = ", ".join(f"{n} {v}" for n, v in sorted(lv["sessions_by_node"].items())) or "-"
        sel = ", ".join(f"{k} {v:,}" for k, v in lv["pgpool_select_cnt"].items())
        lag = ", ".join(f"{n} {v['max_bytes']:,} B, {v['max_s']:.1f} s"
                        for n, v in sorted(lv.get("replica_lag", {}).items())) or "-"
        md.append(f"| {lv['clients']} | {lv['pages_per_s']:,.1f} | {lv['statements_per_s']:,.1f} | {busy} | {sess} | "
                  f"{sel} | {lag} |")
    md += ["", "Database busy: the time statements ran on the node over the measured period (1.00: one "
           "statement running at all times). Sessions: each client's pgpool child and the replica whose backend "
           "ran its statements, joined by their TCP connections' addresses (mwinv/ntier/links.py), looked at "
           "mid-run (pgpool connects a session to every backend and sends its reads to one). Replication lag: "
           "the WAL a replica had not replayed and how long the primary had been past it, the most seen "
           "(checked every 0.5 s; over `--max-lag` the run stops)."]

    md += ["", "## Pages at the client", "", "pgbench's latency of every page in the measured period, less the "
           "think time; through pgpool.", "", "| page | clients | pages | p50 | p90 | p99 | max |",
           "|---|---|---|---|---|---|---|"]
    for name, levels in result["pages"].items():
        md += [f"| {name} | {c} | " + " | ".join(_pcts(levels[c])) + " |" for c in _levels(levels)]
    if len(result["levels"]) > 1:
        series = {name: [(int(c), levels[c]["p99_ns"] / 1e6) for c in _levels(levels) if c != "all"]
                  for name, levels in result["pages"].items()}
        charts.append((len(md), svg.line_chart(series, "p99 per page", "ms", x_format="{:.0f} clients")))

    md += ["", "## Round trips through pgpool", "", "From the end of a statement in the database to the start "
           "of the next one of the same page, on the backends one pgpool child holds: the answer's way back "
           "through pgpool to pgbench and the next statement's way in, the time outside the database per "
           "statement.", "", "| clients | round trips | p50 | p90 | p99 | max |", "|---|---|---|---|---|---|"]
    rt = result.get("round_trip", {})
    md += [f"| {c} | " + " | ".join(_pcts(rt[c])) + " |" for c in _levels(rt)]
    if not rt:
        md.append("| - | 0 | - | - | - | - |")

    md += ["", "## Time in pgpool, per statement", ""] + balancer(result)
    own = result.get("balancer", {}).get("own_all", {}).get("all")
    if own:
        charts.append((len(md), svg.histogram([tuple(b) for b in own["histogram"]],
                                              "pgpool's own time per statement")))

    ranked = sorted(result["statements"].items(), key=lambda kv: -kv[1].get("all", {"total_ns": 0})["total_ns"])
    md += ["", "## Statements: every execution", "", f"The {TOP_STATEMENTS} query ids that took the most time in "
           "the databases, each execution the captures of the primary and the replicas hold (pg_stat_statements "
           "keeps a mean and a deviation only).", "",
           "| query id | statement | clients | executions | p50 | p90 | p99 | max | served by |",
           "|---|---|---|---|---|---|---|---|---|"]
    for q, levels in ranked[:TOP_STATEMENTS]:
        for c in _levels(levels):
            s = levels[c]
            nodes = ", ".join(f"{n} {v['n']:,}" for n, v in sorted(s["nodes"].items()))
            md.append(f"| {q} | {_text(result['texts'].get(q, ''))} | {c} | " + " | ".join(_pcts(s)) + f" | {nodes} |")
    for q, levels in ranked[:CHARTED]:
        if "all" in levels:
            charts.append((len(md), svg.histogram([tuple(b) for b in levels["all"]["histogram"]],
                                                  f"query id {q}: executions by duration")))

    md += ["", "## Tiers: CPU, disk and links per load level", "", "Each tier is a namespace of its own. CPU: its "
           "processes' time on a CPU over every sample interval, as a share of its capacity; saturated when most "
           "samples sit at 90 % or more. Disk: their reads and writes at the block layer; link: the bytes its veth "
           "moved both ways (MB/s). With a disk read cap (replicas) or a link cap, their p90 utilisation of it and "
           "the share of samples at 90 % or more (the busier direction of the link; ! saturated).", "",
           "| tier | CPUs | clients | samples | p50 | p90 | max | samples ≥ 90 % | saturated | "
           "disk read / write MB/s | link MB/s | disk cap: p90, ≥ 90 % | link cap: p90, ≥ 90 % |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for node, t in sorted(result["tiers"].items()):
        for c, u in t["levels"].items():
            net = f"{u['net_mb_s']:.2f}" if "net_mb_s" in u else "-"
            capped = [f"{pct(u[r]['p90'])} of {t['capacity_mb_s'][r]:g} MB/s, {pct(u[r]['saturated_share'])}"
                      + (" !" if u[r]["saturated"] else "") if r in u else "-" for r in ("disk", "link")]
            md.append(f"| {node} | {t['capacity_cpus']:g} | {c} | {u['samples']} | {pct(u['p50'])} | {pct(u['p90'])} | "
                      f"{pct(u['max'])} | {pct(u['saturated_share'])} | {'yes' if u['saturated'] else 'no'} | "
                      f"{u.get('disk_read_mb_s', 0):.2f} / {u.get('disk_write_mb_s', 0):.2f} | {net} | "
                      + " | ".join(capped) + " |")

    md += ["", "## Saturation in short windows", "", "Each replica in windows of the sampler's interval: saturated "
           "at 90 % or more of its CPUs (or, with their caps, of its disk read rate or link); a saturated window is single (one replica), concurrent (several) or "
           "oscillating (another replica than in the saturated window just before).", "",
           "| clients | window | windows | saturated | single | concurrent | oscillating | mean utilisation |",
           "|---|---|---|---|---|---|---|---|"]
    for c, w in result.get("saturation", {}).items():
        mean = ", ".join(f"{n} {pct(u)}" for n, u in w["mean_util"].items())
        md.append(f"| {c} | {w['window_ms']:g} ms | {w['windows']} | {w['saturated']} | {w['single']} | "
                  f"{w['concurrent']} | {w['oscillating']} | {mean} |")
        if w["saturated"]:
            iv = w["window_ms"] / 1e3
            rows = [(n, [(t, t + iv) for t in ts], svg.SERIES_COLORS[i % len(svg.SERIES_COLORS)])
                    for i, (n, ts) in enumerate(w["saturated_windows"].items())]
            charts.append((len(md), svg.interval_strip(rows, (0, w["windows"] * iv),
                                                       f"{c} clients: saturated windows per replica")))
    for c, w in result.get("saturation", {}).items():
        for e in w["episodes"][:5]:
            said = "; ".join(f"{n} {analyse.RESOURCE_NAMES[r.get('resource', 'cpu')]} {pct(r['util'])}, run queue {r['runqueue']:.2f}, disk reads "
                             f"{r.get('disk_read_mb_s', 0):g} MB/s, {r['in_flight']:.1f} in flight, "
                             f"{r['completed']} done, running " + ", ".join(f"{q} {ms:g} ms" for q, ms in r["statements"])
                             for n, r in e["replicas"].items())
            md.append(f"- {c} clients, {e['t_s']:g} s into the run, {e['kind']}: {said}")

    md += ["", "## The balancer's policy", ""] + policy(result)

    md += ["", "## Rare heavy statements", ""]
    if not result["rare_heavy"]:
        md.append("None: no statement was at least 10 times its peers' median, rare and a tenth of the time.")
    for f in result["rare_heavy"]:
        nodes = ", ".join(f"{n} {v['n']:,}" for n, v in sorted(f["nodes"].items()))
        md += [f"- **query id {f['query_id']}** `{_text(f['text'], 120)}`: p50 {duration(f['p50_ns'])}, "
               f"{f['ratio']:,.0f} times its peers' median p50 ({duration(f['peer_p50_ns'])}; "
               f"{f['orders']:g} orders of magnitude), {pct(f['frequency'])} of the executions but "
               f"{pct(f['db_share'])} of the time in the databases, {pct(f['cpu_share'])} of the CPU of the "
               "servers that ran it; "
               f"ran on {nodes}."]
        for e in f.get("evidence", []):
            md.append(f"  - evidence: {e}")
        for a in f["advice"]:
            md.append(f"  - advice: {a}")
    md += ["", "## What this run does not measure", ""]
    if not result.get("balancer"):
        md.append("- pgpool's own share of a round trip apart from the network's and pgbench's: the round trips "
                  "above hold all three (`--trace` measures it from pgpool's kernel trace).")
    cfg = result["config"]
    for what, cap, option in (("the replicas' disk reads", "replica_read_mbps", "--replica-read-mbps"),
                              ("the links", "link_mbit", "--link-mbit")):
        if not cfg.get(cap):
            md.append(f"- Saturation of {what}: their throughput is above, but without a cap ({option}) they have "
                      "no capacity, and the windows and bottlenecks leave them out.")
    return md, charts


def balancer(result: dict) -> list[str]:
    """pgpool's own time per query id from its kernel trace (mwinv/ntier/balancer.py), the links' check
    and the check against its CPU."""
    b = result.get("balancer")
    if not b:
        return ["Not measured: run with `--trace` (pgpool's reads and writes, linked to the backends' "
                "executions by the sessions' TCP connections)."]
    md = [f"From pgpool's kernel trace: {b['statements']:,} statements through it, {b['linked']:,} linked by "
          f"their backend connection to an execution, {b['inside']:,} of those inside the forward and the reply "
          "(the link's check). Own time: request received → forwarded (inbound) plus reply received → returned "
          "(outbound); the backend's is from the forward to the reply.", "",
          "| query id | statement | executions | own p50 | p90 | p99 | max | inbound p50 | outbound p50 | "
          "backend p50 |", "|---|---|---|---|---|---|---|---|---|---|"]
    for q, levels in sorted(b["own"].items(), key=lambda kv: -kv[1]["all"]["total_ns"]):
        s = levels["all"]
        md.append(f"| {q} | {_text(result['texts'].get(q, ''), 50)} | " + " | ".join(_pcts(s)) + " | "
                  + " | ".join(duration(b[part][q]["all"]["p50_ns"])
                               for part in ("inbound", "outbound", "backend_wait"))
                  + " |")
    gap = b.get("client_gap", {})
    md += ["", "| clients | own time | pgpool's children on a CPU / in the run queue (schedstat) | own of on a CPU | "
           "client and network between statements, p50 / p99 |", "|---|---|---|---|---|"]
    for c, k in b.get("check", {}).items():
        g = gap.get(c)
        md.append(f"| {c} | {duration(k['own_ns'])} ({k['statements']:,}) | {duration(k['run_ns'])} / "
                  f"{duration(k['runqueue_ns'])} | {pct(k['own_of_run'] or 0)} | "
                  + (f"{duration(g['p50_ns'])} / {duration(g['p99_ns'])}" if g else "-") + " |")
    md += ["", "Own time is pgpool running or waiting to run, at most its CPU and run-queue time together; the rest "
           "of its CPU went into the reads it blocked in (their syscalls and wake-ups), counted in the backend's "
           "and the client's time."]
    return md


def policy(result: dict) -> list[str]:
    """Per level, how unevenly the replicas were loaded under this policy, and what per-statement
    balancing by the weights predicts: the replicas' CPU added up and split by weight (a lower bound
    where a replica was saturated: its demand was more than it could take)."""
    cfg = result["config"]
    replicas = [f"r{i}" for i in range(1, cfg["replicas"] + 1)]
    weights = cfg["weights"] or [1.0] * len(replicas)
    cap = cfg["replica_cpu"] or 1.0
    out = []
    for c, w in result.get("saturation", {}).items():
        util = w["mean_util"]
        if len(replicas) < 2 or not all(r in util for r in replicas):
            continue
        busiest = max(replicas, key=lambda r: util[r])
        total = sum(util[r] * cap for r in replicas)
        predicted = {r: total * wt / sum(weights) / cap for r, wt in zip(replicas, weights)}
        lv = next(x for x in result["levels"] if str(x["clients"]) == c)
        said = (f"- {c} clients, per {cfg['policy']}: {busiest} averaged {pct(util[busiest])} of its CPU, "
                + ", ".join(f"{r} {pct(util[r])}" for r in replicas if r != busiest)
                + f"; sessions {', '.join(f'{r} {n}' for r, n in sorted(lv['sessions_by_node'].items())) or '-'}.")
        if cfg["policy"] == "session" and util[busiest] - min(util.values()) >= 0.2:
            said += (" Sticky sessions leave the load where the sessions landed: per statement "
                     "(`--policy statement`) the same work split by weight predicts "
                     + ", ".join(f"{r} {pct(predicted[r])}" for r in replicas)
                     + (" or more (a saturated replica's demand exceeded what it took)" if w["saturated"] else "") + ".")
        out.append(said)
    return out or ["- One replica, or no utilisation samples: nothing to balance."]


def write(out: str | Path, result: dict) -> list[str]:
    """report.md and report.html in out; returns the markdown lines (for the terminal)."""
    md, charts = markdown(result)
    out = Path(out)
    privfile.write(out / "report.md", "\n".join(md) + "\n")
    privfile.write(out / "report.html", page(md, charts))
    return md
