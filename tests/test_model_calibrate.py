"""Calibration measures what it claims: a disk throttled by blkio (O_DIRECT reads bypass the page cache,
so the throttle shows), a veth link shaped by tbf, and the `mwinv calibrate` command."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mwinv.cgroup import Cgroup, block_device_of
from mwinv.calibrate import calibrate_disk, calibrate_link

sys.path.insert(0, str(Path(__file__).parent))
from model_capture import calibrate_disk_in_cgroup, veth_namespace  # noqa: E402

ROOT = Path(__file__).parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.skipif(not Path("/sys/fs/cgroup/blkio/tasks").exists(), reason="cgroup v1 blkio is not mounted")
def test_disk_rate_follows_a_blkio_throttle(tmp_path):
    limit = 8 * 2**20
    free = calibrate_disk(tmp_path, file_mb=16, random_reads=100)
    cg = Cgroup("mwinv-test-calibrate", read_bps={block_device_of(tmp_path): limit}).create()
    try:
        throttled = calibrate_disk_in_cgroup(cg, tmp_path)
    finally:
        cg.remove()
    # Through the page cache the reads would not see the throttle at all; with O_DIRECT they do. (On this
    # kernel a 4 MiB O_DIRECT request got about half the configured rate in some sessions and 1.10x it in
    # one (blk-throttle's slices let a pass start with a burst); the calibration reports what a
    # process really gets, which is the figure the model needs. Unthrottled, this disk reads ~2 GB/s.)
    assert 0.3 * limit <= throttled["disk_rate_bps"] <= 1.3 * limit, throttled
    assert free["disk_rate_bps"] > 1.5 * throttled["disk_rate_bps"], free  # (other tests share the disk)
    assert throttled["rand_access_s"] >= 0 and throttled["rand_latency_p50_s"] > 0
    assert not list(tmp_path.glob(".mwinv-calibrate-*"))  # the test file is removed


def test_link_rate_follows_tbf_on_a_veth(tmp_path):
    with veth_namespace("10.213.77") as (ns, host_if, _ns_if, _host_ip, ns_ip):
        unshaped = calibrate_link(f"{ns}:{ns_ip}", bulk_mb=8, pings=50)
        subprocess.run(["tc", "qdisc", "add", "dev", host_if, "root", "tbf", "rate", "16mbit", "burst", "256kb",
                        "latency", "400ms"], check=True, capture_output=True)
        shaped = calibrate_link(f"{ns}:{ns_ip}", bulk_mb=4, pings=50)
    assert shaped["netns"] == ns and shaped["address"] == ns_ip
    # 16 Mbit/s = 2 MB/s at most; what one TCP stream gets through tbf on a VM depends on the burst
    # and on timer load (measured 0.96-1.4 MB/s): the calibration reports what a connection really gets
    assert 0.3 * 2e6 <= shaped["rate_bps"] <= 1.1 * 2e6, shaped
    # without the shaper one stream gets well past the shaper's 2 MB/s (8.5 MB/s over a veth in a slow CI run)
    assert unshaped["rate_bps"] > 2 * 2e6 and unshaped["rate_bps"] > 2.5 * shaped["rate_bps"], (unshaped, shaped)
    assert 0 < unshaped["latency_s"] < 0.01


def test_calibrate_command_stores_it_in_the_manifest(tmp_path):
    cmd = [sys.executable, "-c", "from mwinv.cli.main import main; main()", "calibrate"]
    proc = subprocess.run(cmd + [str(tmp_path / "cap")], capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    cal = json.loads((tmp_path / "cap" / "manifest.json").read_text())["calibration"]
    assert cal["disk"]["disk_rate_bps"] > 0 and cal["cpu"]["cpu_speed_factor"] > 0
    assert cal["links"]["127.0.0.1"]["rate_bps"] > 0
    assert "MiB/s sequential" in proc.stdout
    bad = subprocess.run(cmd + [str(tmp_path / "cap"), "--link", "192.0.2.254"], capture_output=True, text=True,
                         env=ENV, timeout=300)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].startswith("mwinv: error: link 192.0.2.254: cannot bind")
    assert "Traceback" not in bad.stderr
