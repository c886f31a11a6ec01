"""Output that reads right (issue 36): progress lines as a user reads them."""

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
