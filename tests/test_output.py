"""Output that reads right (issue 36): progress lines as a user reads them."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden" / "pg_small_capture"


def test_correlate_progress_lines_name_no_source_file(tmp_path):
    shutil.copytree(GOLDEN, tmp_path / "cap")
    r = subprocess.run([sys.executable, str(Path(sys.executable).parent / "mwinv-correlate"), str(tmp_path / "cap")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "attributing statement time" in r.stderr
    assert not re.search(r"\w+\.py:\d+", r.stderr), r.stderr


def test_a_progress_step_is_printed_as_it_is():
    """A cell id in brackets was taken for rich markup and dropped ("cell 1/6 : nodes=1")."""
    code = ("from mwinv.cli.common import progress_console, progress_logger\n"
            "progress_logger(progress_console())('cell 1/6 [ab12cd34ef]: nodes=1 [bold]x[/bold]')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "cell 1/6 [ab12cd34ef]: nodes=1 [bold]x[/bold]" in r.stderr


def test_the_demo_logs_its_steps_without_source_file(tmp_path):
    """`mwinv demo` showed 'demo.py:44' after each step. An engine's demo that lays down the golden capture
    (and logs a step, as the engines' demos do) run by mwinv.demo.run: no source file and line anywhere."""
    (tmp_path / "golden_demo.py").write_text(
        "import shutil\n"
        "from mwinv.cli.common import progress_logger\n"
        "def demo(scale, capture_dir, console, nodes=0):\n"
        "    progress_logger(console)('loading [the golden capture]')\n"
        f"    shutil.copytree({str(GOLDEN)!r}, capture_dir)\n")
    code = ("from mwinv import demo\nfrom mwinv.engines import registry\n"
            "known = registry.engines()\n"
            "registry.engines = lambda: {**known, 'golden': registry.Registration(name='golden', demo='golden_demo:demo')}\n"
            f"demo.run('golden', 0.01, {str(tmp_path / 'out')!r})")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "COLUMNS": "120", "PYTHONPATH": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "loading [the golden capture]" in r.stdout and "attributing statement time" in r.stdout
    assert "report: " in r.stdout
    assert not re.search(r"\w+\.py:\d+", r.stdout), r.stdout


KERNEL_FUNCTIONS = [("native_queued_spin_lock_slowpath", 0.41, "perf"), ("copy_user_enhanced_fast_string", 0.2, "perf"),
                    ("__x64_sys_futex", 0.1, "wait stacks")]


def test_kernel_function_names_are_not_broken_mid_word_at_80_columns():
    """At 80 columns 'native_queued_spin_lock_slowpath' came out as 'native_queued' / '_spin_lock_sl' /
    'owpath 41%': a name is cut with an ellipsis (the JSON and the report have it whole), its share on the
    next line."""
    code = f"""
from rich.console import Console
from mwinv.capture.tables import ATTRIBUTION_COMPONENTS
from mwinv.correlator import terminal
from mwinv.correlator.pipeline import StatementSummary
s = StatementSummary(42, "SELECT sum(l_quantity) FROM lineitem WHERE l_suppkey BETWEEN 1 AND 40", "pg", 3,
                     2_000_000_000, {{c: 10**8 for c in ATTRIBUTION_COMPONENTS}}, 0, {KERNEL_FUNCTIONS!r}, 7)
Console().print(terminal.top_table([s], "top"))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    cells = [line.split("│")[-2].strip() for line in r.stdout.splitlines() if line.count("│") == 8]
    names = [f for f, _, _ in KERNEL_FUNCTIONS]
    assert max(map(len, r.stdout.splitlines())) <= 80
    for f in names:
        shown = [c for c in cells if c == f or (c.endswith("…") and f.startswith(c[:-1]))]
        assert len(shown) == 1 and len(shown[0]) > 8, (f, cells)
    for c in cells:   # every other line of the column is a share and its source, or empty
        assert not c or any(f.startswith(c.rstrip("…")) for f in names) or re.match(r"\d+% \(|stacks\)", c), cells
