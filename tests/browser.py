"""Headless Chromium for the tests of the HTML reports: the DOM it builds from a report file (its
inline SVG charts parsed and rendered), and the marker that skips where it is not installed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="chromium is not installed")


def dump_dom(html: Path) -> str:
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", html.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout
