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
     "nodes.pg.start_ns: expected a time in ns (64-bit), got 'twenty'"),
    (lambda m: {**m, "created_wall_ns": 10 ** 30},   # a date past 2262: the report's date failed
     "created_wall_ns: expected a time in ns since 1970 (64-bit), got 1000000000000000000000000000000"),
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


PLAN = {"name": '"p"', "scale": "0.01", "queries": "[1, 6]", "timeout_s": "60"}


@pytest.mark.parametrize("line, said", [
    ('scale = "abc"', 'scale = \'abc\': a positive number'),
    ("scale = inf", "scale = inf: a positive number"),
    ('timeout_s = "1m"', "timeout_s = '1m': a positive number of seconds"),
    ("timeout_s = -5", "timeout_s = -5: a positive number of seconds"),
    ("queries = [1.7]", "queries = [1.7]: a non-empty list"),
    ("queries = []", "queries = []: a non-empty list"),
    ("factors = 3", "factors = 3: a table of factors"),
    ("[factors]\nnode_cpu = [0]", "[factors] node_cpu: 0 is not a number of CPUs, 0.01 or more"),
    ("[factors]\nnode_cpu = [-1.0]", "[factors] node_cpu: -1.0 is not a number of CPUs"),
    ("[factors]\nnode_memory_mb = [0]", "[factors] node_memory_mb: 0 is not a positive integer"),
    ("[factors]\nlink_mbit = [-100]", "[factors] link_mbit: -100 is not a positive number"),
    ("[factors]\nlink_latency_ms = [-5]", "[factors] link_latency_ms: -5 is not a number of ms, 0 or more"),
    ("[factors]\nstreams = [0]", "[factors] streams: 0 is not an integer from 1 to 64"),
    ("[factors]\nnodes = [true]", "[factors] nodes: True is not an integer"),
    ("[factors]\ncold = [1]", "[factors] cold: 1 is not true or false"),
])
def test_plan_value_out_of_its_domain(tmp_path, line, said):
    from mwinv.experiment.plan import load_plan

    key = line.split(" ")[0]
    top = "".join(f"{k} = {v}\n" for k, v in PLAN.items() if k != key)
    body = top + line + "\n" if line.startswith(("[", "factors")) else top + line + "\n[factors]\nnodes = [1]\n"
    plan = tmp_path / "plan.toml"
    plan.write_text(body)
    with pytest.raises(MwinvError) as err:
        load_plan(plan)
    assert str(err.value).startswith(f"{plan}: {said}"), err.value


def test_example_plans_load():
    """Every shipped plan loads with the loader `mwinv experiment run` picks for it, into cells."""
    from mwinv.experiment.plan import load_plan
    from mwinv.ntier import plan as ntier_plan

    for p in (Path(__file__).parent.parent / "examples" / "plans").glob("*.toml"):
        assert (ntier_plan.load(p)["cells"] if ntier_plan.is_ntier_plan(p) else load_plan(p).cells()), p


@pytest.mark.parametrize("args, said", [
    (["--scale", "0"], "scale factor must be a finite number > 0, got 0"),
    (["--scale", "inf"], "scale factor must be a finite number > 0, got inf"),
    (["--node-cpu", "-1"], "--node-cpu: -1.0 is not a number of CPUs, 0.01 or more"),
])
def test_cluster_up_refuses_a_bad_value_before_any_server_starts(args, said):
    """The refusal comes first: before the fix, `--scale 0` started the network and every server and
    was refused when the data was generated."""
    import subprocess
    import sys

    r = subprocess.run([str(Path(sys.executable).parent / "mwinv"), "cluster", "up", *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == f"mwinv: error: {said}", r.stderr
    assert "server" not in r.stdout + r.stderr


def _rewrite_part(cap: Capture, table: str, change) -> Path:
    import pyarrow.parquet as pq

    (part,) = cap.parts(table)
    pq.write_table(change(pq.read_table(part)), part)
    return part


def test_column_of_the_wrong_type_is_named(tmp_path):
    import pyarrow as pa

    from mwinv.correlator.pipeline import correlate

    cap = copy_capture(tmp_path)
    part = _rewrite_part(cap, "statement", lambda t: t.set_column(
        t.column_names.index("start_ns"), "start_ns", t["start_ns"].cast(pa.string())))
    said = f"{part}: column start_ns holds string values, expected integer"
    with pytest.raises(MwinvError) as err:
        cap.read("statement")
    assert str(err.value) == said
    with pytest.raises(MwinvError) as err:   # before: DuckDB compared the times as strings
        correlate(cap.path)
    assert str(err.value) == said


def test_renamed_column_is_named(tmp_path):
    cap = copy_capture(tmp_path)
    part = _rewrite_part(cap, "trace_window", lambda t: t.rename_columns(["node", "lo", "high"]))
    with pytest.raises(MwinvError, match=f"^{part}: no column hi \\(but a column high, not one of the table's\\)$"):
        cap.read("trace_window")


def test_part_of_an_older_recorder_reads_its_newer_columns_as_null(tmp_path):
    from mwinv.correlator.pipeline import correlate

    cap = copy_capture(tmp_path)
    _rewrite_part(cap, "statement", lambda t: t.drop_columns(["client_wait_ns", "parse_ns"]))
    t = cap.read("statement")
    assert t.num_rows and t["client_wait_ns"].null_count == t.num_rows
    db = correlate(cap.path, write=False)
    assert db.sql("SELECT count(*), count(client_wait_ns) FROM statement").fetchone() == (t.num_rows, 0)


def _rewritten_part(tmp_path: Path):
    """A copy of the golden capture with its process_sample part written again as the recorders write
    parts now: (capture, table, its rows, the part)."""
    cap = copy_capture(tmp_path)
    table = "process_sample"
    original = cap.read(table)
    (old,) = cap.parts(table)
    old.unlink()
    return cap, table, original, cap.write_part(table, original, node="pg")


def test_flipped_bit_in_a_page_is_found(tmp_path):
    """A part as the recorders write it, one bit flipped where Arrow without the page checksums reads
    other values (found by trying each byte): the reader and the correlator name the part."""
    import pyarrow.parquet as pq

    from mwinv.correlator.pipeline import correlate

    cap, table, original, part = _rewritten_part(tmp_path)
    raw = part.read_bytes()
    for at in range(4, len(raw)):
        flipped = bytearray(raw)
        flipped[at] ^= 0x04
        part.write_bytes(flipped)
        try:
            if not pq.read_table(part).equals(original):
                break
        except (OSError, ValueError):
            continue
    else:
        pytest.fail("no flip read as other values")
    with pytest.raises(MwinvError, match=f"^{part}: unreadable Parquet part \\(.*CRC"):
        cap.read(table)
    with pytest.raises(MwinvError, match=f"^{part}: unreadable Parquet part"):
        correlate(cap.path)


def test_a_part_that_matches_its_seal_is_not_read_through(tmp_path, monkeypatch):
    """A part write_part wrote is sealed (its CRC-32 and size beside it): the check reads it through only
    when its bytes no longer match, and a seal that is a symlink is no seal; a moved or removed part
    takes its seal along."""
    import pyarrow.parquet as pq

    cap, table, original, part = _rewritten_part(tmp_path)
    seal = part.with_name(part.name + ".crc")
    assert seal.stat().st_mode & 0o777 == 0o600
    read_through = []
    real = pq.ParquetFile.iter_batches
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", lambda *a, **k: read_through.append(1) or real(*a, **k))
    cap.check(table)
    assert not read_through
    raw = part.read_bytes()
    part.write_bytes(raw[:-9] + bytes([raw[-9] ^ 1]) + raw[-8:])   # the footer's last byte: no page's
    with pytest.raises(MwinvError, match=f"^{part}: "):
        cap.check(table)
    part.write_bytes(raw)
    seal.unlink()
    (tmp_path / "elsewhere").write_text(seal.name)
    seal.symlink_to(tmp_path / "elsewhere")
    cap.check(table)
    assert read_through
    seal.unlink()

    other = Capture(tmp_path / "other").create(node="pg")
    moved = other.write_part(table, original, node="pg")
    cap.take_parts(other)
    assert not moved.exists() and not moved.with_name(moved.name + ".crc").exists()
    (_, taken) = cap.parts(table)
    assert taken.with_name(taken.name + ".crc").exists()
    read_through.clear()
    cap.check(table)
    assert len(read_through) == 1   # the first part, now without its seal
    cap.remove_part(taken)
    assert not taken.exists() and not taken.with_name(taken.name + ".crc").exists()


def _edited(src: Path, tmp_path: Path, line: int, old: str, new: str) -> Path:
    lines = src.read_text().split("\n")
    assert old in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    out = tmp_path / src.name
    out.write_text("\n".join(lines))
    return out


def test_oracle_trace_number_that_is_not_one(tmp_path):
    """A WAIT line's tim= of a corrupt file: that line is reported malformed, the rest imported (before:
    a ValueError traceback)."""
    from mwinv.engines.oracle import importer

    src = GOLDEN / "oracle_10046" / "trctools_simple_trace.trc"
    path = _edited(src, tmp_path, 42, "tim=5793511831255", "tim=%5793511831255")
    (done,) = importer.import_files(tmp_path / "cap", [path])
    assert f"{path}:42: malformed line" in done.problems and done.statements


def test_oracle_trace_number_out_of_range(tmp_path):
    from mwinv.engines.oracle import importer

    src = GOLDEN / "oracle_10046" / "trctools_simple_trace.trc"
    path = _edited(src, tmp_path, 43, "r=10,", "r=99999999999999999999999,")
    with pytest.raises(MwinvError, match=f"^{path}: column rows: 100000000000000000000003 is out of its range"):
        importer.import_files(tmp_path / "cap", [path])
    assert not Capture(tmp_path / "cap").has("statement")   # no table half imported


@pytest.mark.parametrize("old, new", [("Rows_sent: 0", "Rows_sent: abc"), ("Query_time: 0.000022", "Query_time: inf"),
                                      ("Query_time: 0.000022", "Query_time: -1")])
def test_slow_log_value_that_is_not_one(tmp_path, old, new):
    from mwinv.engines.mariadb import slowlog

    path = _edited(GOLDEN / "mysql_slowlog" / "percona-go-mysql_slow019.log", tmp_path, 12, old, new)
    with pytest.raises(MwinvError, match=f"^{path}:10: entry without a valid Query_time, Lock_time or "
                                         "Rows_sent; the other 3 entries were read"):
        slowlog.read(path, tmp_path / "cap")
    assert Capture(tmp_path / "cap").read("statement").num_rows == 3


@pytest.fixture
def tiny_fs(tmp_path):
    """A real small file system (tmpfs, 4 MB) to fill; always unmounted."""
    import subprocess

    mnt = tmp_path / "fs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4M", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def fill(fs: Path, leave: int) -> Path:
    """All but `leave` bytes of `fs` taken by one file (removed to make room again)."""
    import os

    st = os.statvfs(fs)
    filler = fs / "filler"
    filler.write_bytes(bytes(st.f_bavail * st.f_frsize - leave))
    return filler


def no_tmp(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.suffix == ".tmp" or p.name.endswith(".tmp")]


@pytest.mark.parametrize("leave", [8192, 0])
def test_full_disk_during_a_correlation(tiny_fs, leave):
    """One line naming the file, no temporary file left, the capture's tables kept; the next correlation,
    with room again, finishes (before: a chained OSError traceback). With no room at all the session's own
    DuckDB file is the one refused, which DuckDB names only in its text."""
    import subprocess
    import sys

    shutil.copytree(CAPTURE, tiny_fs / "cap")
    filler = fill(tiny_fs, leave)
    correlate = [str(Path(sys.executable).parent / "mwinv-correlate"), str(tiny_fs / "cap")]
    r = subprocess.run(correlate, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    line = r.stderr.strip().splitlines()[-1]   # after the progress lines
    assert line.startswith(f"mwinv-correlate: error: no space left on device writing {tiny_fs / 'cap'}/"), line
    assert not no_tmp(tiny_fs) and Capture(tiny_fs / "cap").read("statement").equals(Capture(CAPTURE).read("statement"))
    filler.unlink()
    r = subprocess.run(correlate, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert Capture(tiny_fs / "cap").has("statement_attribution")


def test_full_disk_writing_the_manifest(tiny_fs):
    cap = Capture(tiny_fs / "cap").create(capture_kind="node")
    before = cap.manifest_path.read_bytes()
    fill(tiny_fs, 0)
    with pytest.raises(MwinvError, match=f"^no space left on device writing {cap.manifest_path}$"):
        cap.update_manifest(settings={f"k{i}": "v" * 100 for i in range(200)})
    assert cap.manifest_path.read_bytes() == before and not no_tmp(tiny_fs)   # before: a 0-byte manifest.tmp


def test_full_disk_during_a_kernel_trace_parse(tiny_fs):
    from mwinv.kernel_trace.parse import parse_trace

    cap = Capture(tiny_fs / "cap").create()
    fill(tiny_fs, 0)
    with pytest.raises(MwinvError, match=f"^no space left on device writing {cap.path}/kernel_event/n1-00000"):
        parse_trace(GOLDEN / "trappy_raw_trace.dat", cap, node="n1")
    assert not no_tmp(tiny_fs) and cap.manifest()["format"] == "mwinv-capture"


def test_full_disk_during_a_capture_parse_is_finished_by_the_next_correlation(tiny_fs):
    """A node's trace assembled but not parsed when the disk filled: nothing half parsed is kept, the
    manifest says so, and the next correlation with room parses it whole (before: the rows parsed
    so far stayed and nothing parsed the rest)."""
    from mwinv.correlator.pipeline import correlate
    from mwinv.kernel_trace.parse import count_events
    from mwinv.node_capture import UNPARSED

    cap = Capture(tiny_fs / "cap").create(capture_kind="node")
    kdir = cap.path / "kernel" / "n1"
    kdir.mkdir(parents=True)
    shutil.copy(GOLDEN / "trappy_raw_trace.dat", kdir / "trace.dat")
    (kdir / "formats.json").write_text("{}")
    (kdir / "recorder.json").write_text("{}")
    cap.update_manifest(nodes={"n1": {"clock": "mono", "kernel_unparsed": UNPARSED.format("n1")}})
    filler = fill(tiny_fs, 12288)   # room for the events' part and its seal, not for the processes' after it
    with pytest.raises(MwinvError, match=f"^no space left on device writing {kdir}/parsed/process/"):
        correlate(cap.path)
    assert not cap.has("kernel_event") and not (kdir / "parsed").exists() and not no_tmp(tiny_fs)
    assert cap.manifest()["nodes"]["n1"]["kernel_unparsed"] == UNPARSED.format("n1")
    filler.unlink()
    correlate(cap.path)
    assert cap.read("kernel_event").num_rows == count_events(kdir / "trace.dat")
    info = cap.manifest()["nodes"]["n1"]
    assert "kernel_unparsed" not in info and "parsed afterwards from kernel/n1/trace.dat" in info["kernel_recovered"]


def test_report_of_a_manifest_without_nodes(tmp_path):
    """nodes = {} (valid): the report names the nodes from the data (before: TypeError, set + list)."""
    from mwinv.correlator.report import render_report

    cap = copy_capture(tmp_path)
    m = cap.manifest()
    cap.write_manifest({**m, "nodes": {}})
    _, md = render_report(cap.path, tmp_path / "report")
    assert "**nodes**: pg" in md.read_text()


def test_manifest_calibration_without_the_cpu_factor(tmp_path):
    """The report printed calibration.cpu.cpu_speed_factor and raised KeyError without it."""
    cap = copy_capture(tmp_path)
    m = cap.manifest()
    cap.manifest_path.write_text(json.dumps({**m, "calibration": {**m["calibration"], "cpu": {"cpus": 2}}}))
    with pytest.raises(MwinvError, match="manifest.json: calibration.cpu.cpu_speed_factor: missing$"):
        cap.manifest()


def test_text_trace_number_out_of_range(tmp_path):
    """A text trace line with a pid too large for its column: the parse says which line and keeps the
    events before it (before: an OverflowError from Arrow, nothing written)."""
    from mwinv.kernel_trace.parse import parse_trace

    path = _edited(GOLDEN / "lisa_trace.txt", tmp_path, 1758, "pid=479 ", "pid=99999999999999999999 ")
    cap = Capture(tmp_path / "cap").create()
    res = parse_trace(path, cap, node="n1")
    assert res.fault.endswith("line 1758: a number out of range"), res.fault
    assert res.events == cap.read("kernel_event").num_rows > 1000


@pytest.mark.parametrize("at, old, new, said", [
    (14, None, b"\0\0\0\0", "offset 12: corrupt header (long size 8, page size 0)"),            # before: ZeroDivisionError
    (None, b"field:char next_comm[16]", b"field:char next_comX[16]",
     "the format of event sched:sched_switch has no field next_comm"),                            # before: KeyError
])
def test_trace_dat_corrupt_header(tmp_path, at, old, new, said):
    from mwinv.kernel_trace.parse import parse_trace

    raw = bytearray((GOLDEN / "trappy_raw_trace.dat").read_bytes())
    at = raw.index(old) if at is None else at
    raw[at:at + len(new)] = new
    path = tmp_path / "trace.dat"
    path.write_bytes(raw)
    with pytest.raises(MwinvError) as err:
        parse_trace(path, Capture(tmp_path / "cap").create(), node="n1")
    assert str(err.value).startswith(f"{path}: {said}"), err.value


@pytest.fixture
def pg_mwinv():
    """A fresh server with the mwinv extension preloaded."""
    from mwinv.engines.postgresql.server import PgServer

    with PgServer(name="pytest-inputs", shared_preload_libraries=["mwinv"], gucs={"compute_query_id": "on"}) as s:
        yield s


def test_full_disk_during_a_real_capture(pg_mwinv, tmp_path):
    """mwinv-trace capture on a file system too small for its trace.dat (which holds the kernel's
    symbols): one line, the statements kept, the raw kernel pages kept and said to be
    unparsed; with room again, the next correlation assembles and parses them."""
    import os
    import subprocess
    import sys

    symbols = len(Path("/proc/kallsyms").read_bytes())
    mnt = tmp_path / "fs"
    mnt.mkdir()
    # room for everything but trace.dat: the kernel's symbols alone take more
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={symbols // 2}", "tmpfs", str(mnt)], check=True)
    try:
        bin_ = Path(sys.executable).parent
        out = mnt / "cap"
        r = subprocess.run([bin_ / "mwinv-trace", "capture", str(out), "--conninfo", pg_mwinv.conninfo(), "--",
                            "psql", "-c", "SELECT count(*) FROM generate_series(1, 100000)", pg_mwinv.conninfo()],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip().splitlines()[-1] == \
            f"mwinv-trace: error: kernel: no space left on device writing {out}/kernel/{os.uname().nodename}/trace.dat"
        cap = Capture(out)
        assert cap.has("statement") and not cap.has("kernel_event")
        assert list(out.glob("kernel/*/cpu*.raw")) and not no_tmp(out)
        assert "kernel trace not parsed" in next(iter(cap.manifest()["nodes"].values()))["kernel_unparsed"]
        subprocess.run(["mount", "-o", f"remount,size={4 * symbols}", str(mnt)], check=True)
        r = subprocess.run([bin_ / "mwinv-correlate", str(out)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert cap.has("kernel_event") and not list(out.glob("kernel/*/cpu*.raw"))
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)
