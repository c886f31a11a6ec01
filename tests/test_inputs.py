"""Bad input is one line naming the file and the field, line or part, never a traceback; nothing
written before it is lost (no root needed, except for the full disk, a real small tmpfs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mwinv.capture.tables import Capture
from mwinv.errors import MwinvError

GOLDEN = Path(__file__).parent / "golden"
CAPTURE = GOLDEN / "pg_small_capture"


def copy_capture(tmp_path: Path, name: str = "cap") -> Capture:
    shutil.copytree(CAPTURE, tmp_path / name)
    return Capture(tmp_path / name)


@pytest.mark.parametrize("change, field", [
    (lambda m: [m], "top level: expected an object, got a list"),
    (lambda m: {**m, "nodes": "pg"}, "nodes: expected an object, got 'pg'"),
    (lambda m: {**m, "nodes": {"pg": {**m["nodes"]["pg"], "start_ns": "twenty"}}},
     "nodes.pg.start_ns: expected an integer, got 'twenty'"),
    (lambda m: {**m, "nodes": {"pg": {**m["nodes"]["pg"], "clock": 3}}}, "nodes.pg.clock: expected 'mono' or"),
    (lambda m: {**m, "calibration": {**m["calibration"], "disk": {"disk_rate_bps": "fast", "rand_access_s": 1}}},
     "calibration.disk.disk_rate_bps: expected a finite number, got 'fast'"),
    (lambda m: {**m, "nodes": {"pg": {**m["nodes"]["pg"], "duty_changes": [{"at_ns": 1}]}}},
     "nodes.pg.duty_changes[0].duty: missing"),
    (lambda m: {k: v for k, v in m.items() if k != "format"}, "format: missing"),
])
def test_manifest_field_of_the_wrong_type(tmp_path, change, field):
    cap = copy_capture(tmp_path)
    m = json.loads(cap.manifest_path.read_text())
    cap.manifest_path.write_text(json.dumps(change(m)))
    with pytest.raises(MwinvError) as err:
        cap.manifest()
    assert str(err.value).startswith(f"{cap.manifest_path}: {field}"), err.value


def test_manifest_not_utf8(tmp_path):
    cap = copy_capture(tmp_path)
    cap.manifest_path.write_bytes(b'{"format": "\xff"}')
    with pytest.raises(MwinvError, match="manifest.json: byte 12: not UTF-8"):
        cap.manifest()
