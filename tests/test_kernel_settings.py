"""Kernel settings as an experiment's factor (issue 35): written, read back and restored on this host's real
knobs (a loop device's readahead, vm.dirty_background_ratio: safe to change for seconds), refused values
one-line errors before anything starts, a kill -9 undone by `mwinv clean`, and an experiment of two
cells whose manifest holds the value read back, the knob restored after the run and after SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mwinv import serverdir
from mwinv.capture.tables import Capture
from mwinv.errors import MwinvError
from mwinv.kernel_settings import KernelSettings, check, knob, read

MWINV = str(Path(sys.executable).parent / "mwinv")
DIRTY_BG = Path("/proc/sys/vm/dirty_background_ratio")
LOOP_RA = Path("/sys/block/loop0/queue/read_ahead_kb")


@pytest.fixture
def originals():
    """The knobs these tests touch, written back whatever the test does."""
    saved = {p: p.read_text().strip() for p in (DIRTY_BG, LOOP_RA, knob("block.read_ahead_kb").path)}
    yield saved
    for p, v in saved.items():
        if p.read_text().strip() != v:
            p.write_text(v)


def _records() -> list[Path]:
    return sorted(serverdir.settings_dir().glob("*.json"))


def test_apply_reads_back_and_restores(originals):
    bg = int(originals[DIRTY_BG])
    new_bg, new_ra = (bg - 1 if bg > 1 else bg + 1), (256 if originals[LOOP_RA] != "256" else 512)
    before = _records()
    with KernelSettings({"vm.dirty_background_ratio": new_bg, "block.loop0.read_ahead_kb": new_ra}).apply() as ks:
        assert DIRTY_BG.read_text().strip() == str(new_bg) and LOOP_RA.read_text().strip() == str(new_ra)
        held = ks.in_force()
        assert held["vm.dirty_background_ratio"] == {
            "path": str(DIRTY_BG), "value": str(new_bg), "before": str(bg),
            "scope": "host (every node of this one-host cluster)"}
        assert held["block.loop0.read_ahead_kb"]["value"] == str(new_ra)
        assert held["block.loop0.read_ahead_kb"]["scope"].startswith("device loop0")
        (rec,) = set(_records()) - set(before)   # the old values, for `mwinv clean` after a kill -9
        assert {o["knob"]: o["before"] for o in json.loads(rec.read_text())["settings"]} == {
            "vm.dirty_background_ratio": str(bg), "block.loop0.read_ahead_kb": originals[LOOP_RA]}
    assert DIRTY_BG.read_text().strip() == originals[DIRTY_BG] and LOOP_RA.read_text().strip() == originals[LOOP_RA]
    assert _records() == before


def test_a_limit_in_bytes_restores_the_ratio_it_zeroed(originals):
    """Writing vm.dirty_background_bytes zeroes the ratio; its old 0 cannot be written back (the kernel's
    minimum is two pages): the ratio is."""
    with KernelSettings({"vm.dirty_background_bytes": 64 << 20}).apply():
        assert DIRTY_BG.read_text().strip() == "0"
    assert DIRTY_BG.read_text().strip() == originals[DIRTY_BG]
    assert read(Path("/proc/sys/vm/dirty_background_bytes")) == "0"


@pytest.mark.parametrize("level, error", [
    ({"vm.dirty_background_ratio": -1}, "vm.dirty_background_ratio = -1: the kernel refuses it (Invalid argument)"),
    ({"vm.dirty_background_ratio": 101}, "vm.dirty_background_ratio = 101: the kernel refuses it (Invalid argument)"),
    ({"block.loop0.read_ahead_kb": 5}, "block.loop0.read_ahead_kb = 5: the kernel holds 4 instead"),
])
def test_a_refused_value_is_an_error_and_changes_nothing(originals, level, error):
    with pytest.raises(MwinvError) as exc:
        check([{}, level], "plan.toml")
    assert str(exc.value) == f"plan.toml: {error}"
    assert DIRTY_BG.read_text().strip() == originals[DIRTY_BG] and LOOP_RA.read_text().strip() == originals[LOOP_RA]


@pytest.mark.parametrize("kernel, error", [
    ("[{}, {vm.dirty_background_ratio = 101}]", "vm.dirty_background_ratio = 101: the kernel refuses it"),
    ("[{vm.no_such_knob = 1}]", "vm.no_such_knob: not a kernel setting mwinv knows (one of sysctl names"),
    ('[{"block.loop0.read_ahead_kb" = "1 2"}]', "block.loop0.read_ahead_kb = '1 2': not a kernel setting's value"),
])
def test_plan_errors_come_before_any_cluster(tmp_path, originals, kernel, error):
    plan = tmp_path / "plan.toml"
    plan.write_text(f'scale = 0.01\nqueries = [6]\n[factors]\nnodes = [1]\nkernel = {kernel}\n')
    r = subprocess.run([MWINV, "experiment", "run", str(plan), "-o", str(tmp_path / "out")], capture_output=True,
                       text=True, timeout=60)
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and r.stderr.count("\n") <= 2 and "Traceback" not in r.stderr, r.stderr
    assert last.startswith(f"mwinv: error: {plan}: [factors] kernel: {error}"), r.stderr
    assert "network" not in r.stderr and not (tmp_path / "out" / "results").exists()
    assert DIRTY_BG.read_text().strip() == originals[DIRTY_BG]


def test_kill_9_then_clean_restores(originals):
    new = "256" if originals[LOOP_RA] != "256" else "512"
    proc = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom mwinv.kernel_settings import KernelSettings\n"
                             f"KernelSettings({{'block.loop0.read_ahead_kb': {new}}}).apply()\n"
                             "print('applied', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "applied"
    finally:
        proc.kill()
        proc.wait()
    assert LOOP_RA.read_text().strip() == new   # a kill -9 restores nothing
    r = subprocess.run([MWINV, "clean"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"kernel setting block.loop0.read_ahead_kb = {originals[LOOP_RA]} restored" in r.stdout, r.stdout
    assert LOOP_RA.read_text().strip() == originals[LOOP_RA]


def test_a_knob_another_run_holds_is_refused(originals):
    """Two runs setting one knob would each restore what the other wrote (the second's "before" is the
    first's value): while a live run holds it, another is refused in one line and writes nothing."""
    new = "256" if originals[LOOP_RA] != "256" else "512"
    proc = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom mwinv.kernel_settings import KernelSettings\n"
                             f"with KernelSettings({{'block.loop0.read_ahead_kb': {new}}}).apply():\n"
                             "    print('applied', flush=True)\n    sys.stdin.readline()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "applied"
        before = _records()
        with pytest.raises(MwinvError, match=rf"block.loop0.read_ahead_kb is set by another mwinv run \(pid {proc.pid}"):
            KernelSettings({"vm.dirty_background_ratio": 5, "block.loop0.read_ahead_kb": 128}).apply()
        assert LOOP_RA.read_text().strip() == new and _records() == before
        assert DIRTY_BG.read_text().strip() == originals[DIRTY_BG]
    finally:
        proc.communicate("\n", timeout=30)
    assert proc.returncode == 0 and LOOP_RA.read_text().strip() == originals[LOOP_RA]
    KernelSettings({"block.loop0.read_ahead_kb": new}).apply().restore()   # free again once it has restored


def _plan(tmp_path: Path, ra: int, repetitions: int = 1) -> Path:
    plan = tmp_path / "plan.toml"
    plan.write_text(f'name = "ra"\nscale = 0.01\nqueries = [6]\nrepetitions = {repetitions}\n[factors]\nnodes = [1]\n'
                    f'kernel = [{{block.read_ahead_kb = {ra}}}, {{}}]\n')
    return plan


def _other_ra(originals) -> int:
    return 4096 if originals[knob("block.read_ahead_kb").path] != "4096" else 2048


def test_an_experiment_records_the_setting_and_restores_it(tmp_path, originals):
    """Two cells on one cluster, the data disk's readahead changed in the first: its manifest holds the value
    read back, the other cell's none, the report compares the two, and the disk has its old readahead."""
    ra_path, ra = knob("block.read_ahead_kb").path, _other_ra(originals)
    out = tmp_path / "out"
    r = subprocess.run([MWINV, "experiment", "run", str(_plan(tmp_path, ra)), "-o", str(out)], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stderr.count("TPC-H SF 0.01") == 1, r.stderr   # one cluster: the cells differ in settings only
    held = {}
    for cell in (out / "cells").iterdir():
        m = Capture(cell / "capture").manifest()
        held[json.dumps(m["kernel_settings"])] = m["kernel_settings"]
    with_setting = next(v for v in held.values() if v)
    assert with_setting["block.read_ahead_kb"]["value"] == str(ra)
    assert with_setting["block.read_ahead_kb"]["before"] == originals[ra_path]
    assert with_setting["block.read_ahead_kb"]["path"] == str(ra_path) and {} in held.values()
    assert ra_path.read_text().strip() == originals[ra_path]
    md = (out / "report" / "report.md").read_text()
    assert "## Kernel settings checked by running" in md
    assert f"| block.read_ahead_kb={ra} | Q6 |" in md and "applies to every node" in md
    assert "block.read_ahead_kb=" in (out / "report" / "results.csv").read_text()


def test_sigterm_during_a_cell_restores_the_setting(tmp_path, originals):
    ra_path, ra = knob("block.read_ahead_kb").path, _other_ra(originals)
    proc = subprocess.Popen([MWINV, "experiment", "run", str(_plan(tmp_path, ra, repetitions=50)), "-o",
                             str(tmp_path / "out")], stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if "capture of node d1" in line:
                break
        time.sleep(1)
        assert ra_path.read_text().strip() == str(ra)   # in force while the cell runs
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=120)[1]
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err[-3000:]
    assert ra_path.read_text().strip() == originals[ra_path]
    assert not [r for r in _records() if r.name.startswith(f"{proc.pid}-")]


def test_the_report_sets_the_measured_gain_beside_the_advice(tmp_path):
    """A baseline whose data nodes were advised to change readahead (25 ms expected), a cell that ran a readahead
    setting and one that ran another knob: the advice is checked only where its knob was changed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mwinv.experiment.report import render, summarize
    from mwinv.experiment.results import RESULT_SCHEMA

    # per node and rule; the nodes work side by side: the expected gain is the largest node's (d1: 25 ms)
    advice = json.dumps([{"node": "d1", "rule": "kernel.readahead", "expected_gain_ns": 15_000_000},
                         {"node": "d2", "rule": "kernel.readahead", "expected_gain_ns": 20_000_000},
                         {"node": "d1", "rule": "kernel.readahead", "expected_gain_ns": 10_000_000}])
    (tmp_path / "results").mkdir()
    for cell, kernel, wall, adv in (("base", "default", 100_000_000, advice),
                                    ("ra", "block.read_ahead_kb=1024", 85_000_000, None),
                                    ("dirty", "vm.dirty_ratio=5", 99_000_000, None),
                                    ("ra128", "block.read_ahead_kb=128", 110_000_000, None)):
        row = {"experiment": "k", "cell": cell, "nodes": 1, "scheme": "2-part", "node_cpu": 0.5,
               "node_memory_mb": 512, "streams": 1, "cold": False, "kernel": kernel, "query": 6, "repetition": 0,
               "stream": 0, "wall_ns": wall, "timed_out": False, "kernel_advice": adv}
        pq.write_table(pa.Table.from_pylist([row], schema=RESULT_SCHEMA), tmp_path / "results" / f"{cell}.parquet")
    checks = {c["setting"]: c for c in summarize(tmp_path)["kernel_checks"]}
    assert checks["block.read_ahead_kb=1024"]["verdict"] == "gain" and checks["block.read_ahead_kb=1024"]["advised"]
    assert checks["vm.dirty_ratio=5"]["verdict"] == "no gain (within noise)" and not checks["vm.dirty_ratio=5"]["advised"]
    md = render(tmp_path)[1].read_text()
    assert ("| block.read_ahead_kb=1024 | Q6 | 100.0 | 85.0 | -15% | kernel.readahead (d1), kernel.readahead (d2), "
            "kernel.readahead (d1) | 25.0 | gain: 15.0 ms of ≤ 25.0 expected (60%) |") in md, md
    assert "| vm.dirty_ratio=5 | Q6 | 100.0 | 99.0 | -1% | - | - | no gain (within noise) |" in md
    assert "| block.read_ahead_kb=128 | Q6 | 100.0 | 110.0 | +10% | " in md   # slower: no share of the bound
    assert "| 25.0 | slower: -10.0 ms (≤ 25.0 expected) |" in md, md
