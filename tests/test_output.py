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

