"""Golden-file tests of the kernel trace parsers (no root needed): each binary trace is checked
row by row against `trace-cmd report`'s text of the same file (an independent implementation,
libtraceevent), parsed by our text parser."""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

from mwinv.capture.tables import Capture
from mwinv.engines.postgresql.kernel import POSTGRESQL
from mwinv.kernel_trace.parse import parse_trace
from mwinv.kernel_trace.perf import iter_perf_samples

GOLDEN = Path(__file__).parent / "golden"
BIN = Path(sys.executable).parent


def unxz(name: str, tmp_path: Path) -> Path:
    out = tmp_path / name.removesuffix(".xz")
    out.write_bytes(lzma.decompress((GOLDEN / name).read_bytes()))
    return out


def parsed(path: Path, tmp_path: Path, name: str, **kw):
    cap = Capture(tmp_path / name).create()
    res = parse_trace(path, cap, node="n1", **kw)
    return res, cap


def rows(cap: Capture, cols: list[str]) -> list[tuple]:
    """The rows in (µs, cpu) order: text traces have µs only; per-CPU order is kept (stable sort)."""
    d = cap.read("kernel_event").to_pydict()
    d["ts_us"] = [(v + 500) // 1000 for v in d["ts_ns"]]
    order = sorted(range(len(d["ts_us"])), key=lambda i: (d["ts_us"][i], d["cpu"][i]))
    return [tuple(d[c][i] for c in cols) for i in order]


def unplus(states: list[tuple]) -> list[tuple]:
    """prev_state without the preempted mark: by the kernel's own print fmt (prev_state & (max
    flag << 1)) a preempted task is "R+", which trace-cmd 3.1.6 prints as "R"."""
    return [(s[0].rstrip("+") if s[0] else s[0],) for s in states]


# trace-cmd 3.1.6's sched_switch plugin has an old letter table; this kernel's print fmt says
# 0x80 = "I" (idle) and 0x20 = "Z" (zombie) where the plugin prints "W" and "X".
_TRACE_CMD_LETTERS = {"W": "I", "X": "Z"}

COMMON = ["ts_us", "cpu", "pid", "event", "prev_pid", "next_pid", "target_pid"]


def test_trappy_binary_equals_trace_cmd_report(tmp_path):
    res, binary = parsed(GOLDEN / "trappy_raw_trace.dat", tmp_path, "bin")
    res_txt, text = parsed(GOLDEN / "trappy_raw_trace.report.txt", tmp_path, "txt")
    assert res.fault is None and res_txt.fault is None
    assert res.events == res_txt.events == 757
    assert res.clock == "local"
    b, t = rows(binary, COMMON), rows(text, COMMON)
    assert b == t
    assert unplus(rows(binary, ["prev_state"])) == rows(text, ["prev_state"])
    counts = pc.value_counts(binary.read("kernel_event")["event"]).to_pylist()
    assert {c["values"]: c["counts"] for c in counts} == {"sched_switch": 755, "bprint": 2}
    procs = {r["pid"]: r["comm"] for r in binary.read("process").to_pylist()}
    assert procs[4734] == "ls" and procs[18] == "migration/2"   # saved_cmdlines: its last comm, as in the report


def test_pg_trace_binary_equals_trace_cmd_report(tmp_path):
    dat = unxz("pg_tpch_q6_q3.trace.dat.xz", tmp_path)
    res, binary = parsed(dat, tmp_path, "bin", procs_file=GOLDEN / "pg_tpch_q6_q3.procs.json", role=POSTGRESQL.role)
    res_txt, text = parsed(unxz("pg_tpch_q6_q3.report.txt.xz", tmp_path), tmp_path, "txt")
    assert res.fault is None and res_txt.fault is None and res.lost_events == 0
    assert res.clock == "mono"
    assert res.events == res_txt.events == 2234
    cols = COMMON + ["dev", "sector", "nr_bytes", "rwbs", "syscall_ret"]
    assert rows(binary, cols) == rows(text, cols)
    # syscalls: numbered from the event name in text, arguments as the binary parser writes them
    # (futex's own print format leaves out some arguments and prints `op` symbolically)
    calls = [(b, t) for b, t in zip(rows(binary, ["event", "syscall_nr", "fields"]), rows(text, ["event", "syscall_nr", "fields"]))
             if b[0].startswith("sys_") and b[0] != "sys_enter_futex"]
    assert len(calls) == 982 and all(b == t for b, t in calls)
    assert ("sys_enter_pread64", 17, "__syscall_nr=17 fd=17 buf=139731754991872 count=8192 pos=811008") in \
        {b for b, _ in calls}
    assert unplus(rows(binary, ["prev_state"])) == [(_TRACE_CMD_LETTERS.get(s, s),) for (s,) in rows(text, ["prev_state"])]
    # the same stacks, frame by frame (binary: symbolised from the file's kallsyms)
    bst = {tuple(r["frames"]) for r in binary.read("kernel_stack").to_pylist()}
    tst = {tuple(r["frames"]) for r in text.read("kernel_stack").to_pylist()}
    assert bst == tst and len(bst) == res.stacks == 12
    assert rows(binary, ["stack_id"]) == rows(text, ["stack_id"])   # ids are made of the frame names
    assert any(f[0] == "__schedule" for f in bst) and any("blk_mq_start_request" in f for f in bst)
    ev = binary.read("kernel_event")
    ids = set(pc.drop_null(ev["stack_id"]).to_pylist())
    assert ids and ids <= {r["stack_id"] for r in binary.read("kernel_stack").to_pylist()}
    # syscall exits carry their return value: pread64 of 8 kB pages
    rets = pc.filter(ev["syscall_ret"], pc.equal(ev["event"], "sys_exit_pread64")).to_pylist()
    assert len(rets) == 190 and rets.count(8192) > 150
    # processes: roles from the recorder's /proc snapshot, backends forked during the run
    roles = {r["pid"]: r["role"] for r in binary.read("process").to_pylist()}
    assert {"postmaster", "checkpointer", "walwriter", "backend"} <= set(roles.values())
    # a backend read only before it set its process title (it shows the postmaster's command line)
    procs = json.loads((GOLDEN / "pg_tpch_q6_q3.procs.json").read_text())
    procs["12139"]["cmdline"] = procs["12014"]["cmdline"]
    (tmp_path / "untitled.procs.json").write_text(json.dumps(procs))
    _, untitled = parsed(dat, tmp_path, "untitled", procs_file=tmp_path / "untitled.procs.json",
                         role=POSTGRESQL.role)
    roles = {r["pid"]: r["role"] for r in untitled.read("process").to_pylist()}
    assert roles[12139] == "backend" and roles[12014] == "postmaster"


def test_lisa_raw_ftrace_text(tmp_path):
    res, cap = parsed(GOLDEN / "lisa_trace.txt", tmp_path, "lisa")
    assert res.fault is None and res.events == 2941
    ev = cap.read("kernel_event").to_pylist()
    first = ev[0]
    assert (first["ts_ns"], first["cpu"], first["pid"], first["event"], first["prev_pid"], first["next_pid"]) == \
        (76_211_513_000, 1, 1701, "sched_switch", 1701, 0)
    wake = ev[1]
    assert (wake["event"], wake["target_pid"], wake["cpu"]) == ("sched_wakeup", 1642, 2)
    counts = {}
    for e in ev:
        counts[e["event"]] = counts.get(e["event"], 0) + 1
    assert counts == {"sched_switch": 1856, "sched_wakeup": 1068, "print": 14, "sched_overutilized": 3}
    prints = [e["fields"] for e in ev if e["event"] == "print"]
    assert any("TRACE_MARKER_START" in p for p in prints)


def test_perf_script_samples():
    text = lzma.decompress((GOLDEN / "pg_tpch_q6_q3.perf-script.txt.xz").read_bytes()).decode()
    samples = list(iter_perf_samples(iter(text.splitlines(keepends=True))))
    assert len(samples) == 189
    ts, cpu, tid, frames, in_kernel = samples[0]
    assert (ts, cpu, tid, frames, in_kernel) == (6_865_438_472_629, 0, 12019, [], False)
    kernel = [s for s in samples if s[4]]
    assert kernel and all(s[3] for s in kernel)
    assert all(not f.startswith(("0x", "[unknown")) for s in kernel for f in s[3][:1])


@pytest.mark.parametrize("cut,message", [
    (2_400_000, "offset 2396160: truncated: CPU 1 data ends early"),
    (1000, "offset 456: truncated"),
])
def test_truncated_tracedat_is_one_line_error_and_keeps_what_was_parsed(tmp_path, cut, message):
    bad = tmp_path / "trunc.dat"
    bad.write_bytes((GOLDEN / "trappy_raw_trace.dat").read_bytes()[:cut])
    out = tmp_path / "cap"
    proc = subprocess.run([BIN / "mwinv-trace", "parse", str(bad), "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    err = proc.stderr.strip().splitlines()[-1]
    assert err.startswith(f"mwinv-trace: error: {bad}: {message}")
    if cut > 1000:
        assert 0 < Capture(out).read("kernel_event").num_rows < 757


def test_corrupt_page_names_offset(tmp_path):
    data = bytearray((GOLDEN / "trappy_raw_trace.dat").read_bytes())
    page = 2375680 + 4096 * 3              # CPU 1's fourth page
    data[page + 8:page + 12] = b"\xff\xff\xff\x07"   # commit larger than a page
    bad = tmp_path / "corrupt.dat"
    bad.write_bytes(data)
    res, cap = parsed(bad, tmp_path, "cap")
    assert res.fault == f"{bad}: offset {page + 8}: corrupt ring-buffer page (CPU 1)"
    assert 0 < cap.read("kernel_event").num_rows < 757


def test_not_a_trace_and_unknown_format(tmp_path):
    junk = tmp_path / "junk.txt"
    junk.write_text("# comment\nhello world\n")
    res, _ = parsed(junk, tmp_path, "a")
    assert res.fault == f"{junk}: offset 10: line 2: not a trace event line: 'hello world'"
    data = bytearray((GOLDEN / "trappy_raw_trace.dat").read_bytes())
    i = data.index(b"name: sched_switch")
    data[i:i + 5] = b"nope:"            # an event format without a name line
    bad = tmp_path / "badfmt.dat"
    bad.write_bytes(data)
    proc = subprocess.run([BIN / "mwinv-trace", "parse", str(bad), "--out", str(tmp_path / "b")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "unknown event format (no name/ID line)" in proc.stderr.strip().splitlines()[-1]
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["format"] == "mwinv-capture"


def test_integer_fields_text_at_the_limits():
    # one record, the widest values (20 digits, a sign): the text must fit the space reserved for it
    import numpy as np

    from mwinv.kernel_trace.ringwalk import format_int_fields

    buf = np.frombuffer((2**64 - 1).to_bytes(8, "little") + (-(2**63)).to_bytes(8, "little", signed=True)
                        + (-5).to_bytes(4, "little", signed=True) + (200).to_bytes(1, "little"), np.uint8)
    fields = [("__probe_ip", 0, 8, False), ("a", 8, 8, True), ("b", 16, 4, True), ("c", 20, 1, False)]
    assert format_int_fields(buf, np.array([0]), fields[:1]).to_pylist() == [f"__probe_ip={2**64 - 1}"]
    assert format_int_fields(buf, np.array([0]), fields).to_pylist() == \
        [f"__probe_ip={2**64 - 1} a={-(2**63)} b=-5 c=200"]


def test_process_roles_of_children_forked_during_a_capture():
    """A backend forked and gone between two polls of /proc has no /proc record: the trace's fork event
    names the postmaster as its parent, and that makes it a connection's backend (the recorder's other
    processes start with the server). One read before it set its title shows the postmaster's command line."""
    from mwinv.engines.mariadb.kernel import MARIADB
    from mwinv.kernel_trace.decode import DecodeState
    from mwinv.kernel_trace.parse import process_rows

    state = DecodeState("n1", {})
    state.forks.update({200: 100, 201: 100, 300: 999})  # 300: a child of a process not ours
    state.first_ts.update({200: 5, 201: 6, 300: 7})
    post = "/usr/lib/postgresql/15/bin/postgres -D /data"
    procs = {100: {"comm": "postgres", "ppid": 1, "cmdline": post},
             150: {"comm": "postgres", "ppid": 100, "cmdline": "postgres: checkpointer"},
             201: {"comm": "postgres", "ppid": 100, "cmdline": post}}
    roles = {r["pid"]: r["role"] for r in process_rows(state, procs, POSTGRESQL.role).to_pylist()}
    assert roles == {100: "postmaster", 150: "checkpointer", 200: "backend", 201: "backend"}
    # the parser itself knows no DBMS: another engine's roles, or none
    maria = {100: {"comm": "mariadbd", "ppid": 1, "cmdline": "/usr/sbin/mariadbd --datadir=/d"}}
    # (200 and 201 were forked by it in this trace: pids the recorder did not read, without a role)
    assert {r["pid"]: r["role"] for r in process_rows(state, maria, MARIADB.role).to_pylist()} == \
        {100: "server", 200: None, 201: None}
    assert {r["role"] for r in process_rows(state, procs).to_pylist()} == {None}


def test_an_empty_trace_is_said_not_parsed_as_no_events(tmp_path):
    empty = tmp_path / "trace.dat"
    empty.write_bytes(b"")
    res, _ = parsed(empty, tmp_path, "a")
    assert res.events == 0 and res.fault == f"{empty}: empty file (0 bytes): no trace was written into it"
    proc = subprocess.run([BIN / "mwinv-trace", "parse", str(empty), "--out", str(tmp_path / "b")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"mwinv-trace: error: {empty}: empty file (0 bytes)")


def test_the_function_entries_fields_in_real_traces(tmp_path):
    """The function tracer's entries (ftrace `function`) are decoded from the fields of each trace's own
    format: in a real arm64 trace (trappy) and a real x86 one recorded here, ip and parent_ip are unsigned
    8-byte fields at offsets 8 and 16 and the decoder finds that format; neither trace holds such entries (no
    trace.dat with them was found, and this kernel refuses the tracer: docs/kernel-advice.md), so no
    kernel_function_call is written and every event is still an event."""
    from mwinv.kernel_trace.decode import DecodeState
    from mwinv.kernel_trace.tracedat import read_tracedat

    for path, events in ((GOLDEN / "trappy_raw_trace.dat", 757), (unxz("pg_tpch_q6_q3.trace.dat.xz", tmp_path), None)):
        td = read_tracedat(path)
        fmt = td.formats[DecodeState("n1", td.formats).function_type]
        assert (fmt.system, fmt.name) == ("ftrace", "function")
        assert [(f.offset, f.size, f.signed) for f in (fmt.fields["ip"], fmt.fields["parent_ip"])] == \
            [(8, 8, False), (16, 8, False)]
        res, cap = parsed(path, tmp_path, path.stem)
        assert not cap.parts("kernel_function_call") and res.events == cap.read("kernel_event").num_rows
        assert events is None or res.events == events
