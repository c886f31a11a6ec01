"""The manifest's schema (docs/capture.md), checked where a manifest is read: a field of the wrong
type is a one-line error naming the file and the field's path, never a traceback deep in the
correlator. Keys the schema does not name are kept unchecked (other runs record their own)."""

from __future__ import annotations

import math
from pathlib import Path

from mwinv.errors import MwinvError

# A spec: a type name ("str", "int", "ns", "wall_ns", "number", "bool", "any"), a tuple of allowed
# constants, a dict of field -> (spec, required), ["list", item], ["map", value] (any keys), or
# ["null", spec] (None allowed).
INT64 = 1 << 63
OFFSET = {"at_ns": ("ns", True), "offset_ns": ("ns", True), "error_ns": ("ns", True)}
NODE = {
    "clock": (("mono", "realtime"), False),
    "kernel": ("str", False),
    "postmaster_pid": (["null", "int"], False),
    "software": (["map", ["null", "str"]], False),
    "start_ns": (["null", "ns"], False),
    "end_ns": (["null", "ns"], False),
    "wall_minus_mono_start": (["null", OFFSET], False),
    "wall_minus_mono_end": (["null", OFFSET], False),
    "clock_offset_start": (["null", OFFSET], False),
    "clock_offset_end": (["null", OFFSET], False),
    "tracer": ("str", False),
    "events": (["list", "str"], False),
    "stacks": ("bool", False),
    "perf_samples": ("int", False),
    "duty": (["null", "number"], False),
    "event_budget": (["null", "number"], False),
    "duty_changes": (["list", {"at_ns": ("ns", True), "duty": ("number", True),
                               "events_per_s_per_cpu": ("number", True),
                               "statement_median_ms": ("number", False)}], False),
    "pids": (["list", "int"], False),
    "skipped": (["map", "str"], False),
    "sample_interval_s": (["null", "number"], False),
    "seq_source": ("str", False),
    "statements_lost": (["null", "str"], False),
    "statement_reader": ("str", False),
    "oracle_files": (["list", {"path": ("str", True)}], False),
    "slow_logs": (["list", "str"], False),
    "engine": ("str", False),
    "kernel_unparsed": (["null", "str"], False),
    "kernel_recovered": ("str", False),
    "kernel_errors": ("str", False),
    # the recorder's function tracer (kernel_trace/recorder.py): whether it ran, and why not
    "function_tracer": (["null", {"ran": ("bool", True), "why_not": (["null", "str"], True),
                                  "filter": (["list", "str"], False)}], False),
}
CALIBRATION = {   # as `mwinv calibrate` writes it
    "disk": ({"disk_rate_bps": ("number", True), "rand_access_s": ("number", True),
              "seq_access_s": ("number", False)}, True),
    "cpu": ({"cpu_speed_factor": ("number", True), "cpus": (["null", "int"], False)}, True),
    "links": (["map", {"latency_s": ("number", True), "rate_bps": ("number", True)}], False),
}
MANIFEST = {
    "format": (("mwinv-capture",), True),
    "version": ((1,), True),
    "created_wall_ns": ("wall_ns", True),
    "nodes": (["map", NODE], True),
    "capture_kind": ("str", False),
    "clock_source": ("str", False),
    "coordinator": ("str", False),
    "run_id": (["null", "str"], False),
    "cpus": (["null", "int"], False),
    "settings": (["map", "any"], False),
    "calibration": (["null", CALIBRATION], False),
    "perf_sample_period_ns": ("ns", False),
    # the kernel settings an experiment's cell ran with, as read back (mwinv/kernel_settings.py)
    "kernel_settings": (["map", {"path": ("str", True), "value": ("str", True), "before": ("str", True),
                                 "scope": ("str", True)}], False),
}


def _kind(v) -> str:
    if v is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(v), type(v).__name__)


def _check(value, spec, where: str) -> str | None:
    """The first problem of `value` against `spec`, as '<path>: expected ..., got ...', else None."""
    def wrong(expected: str) -> str:
        shown = repr(value) if len(repr(value)) <= 40 else _kind(value)
        return f"{where or 'top level'}: expected {expected}, got {shown}"

    if isinstance(spec, tuple):
        # bool is an int in Python: True must not pass for version 1
        return None if any(value == c and type(value) is type(c) for c in spec) else \
            wrong(" or ".join(repr(c) for c in spec))
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return wrong("an object")
        for key, (sub, required) in spec.items():
            if key not in value:
                if required:
                    return f"{where + '.' if where else ''}{key}: missing"
                continue
            if problem := _check(value[key], sub, f"{where}.{key}" if where else key):
                return problem
        return None
    if isinstance(spec, list):
        how, sub = spec
        if how == "null":
            return None if value is None else _check(value, sub, where)
        if how == "list":
            if not isinstance(value, list):
                return wrong("a list")
            items = enumerate(value)
        else:
            if not isinstance(value, dict):
                return wrong("an object")
            items = value.items()
        for k, item in items:
            if problem := _check(item, sub, f"{where}[{k}]" if how == "list" else f"{where}.{k}"):
                return problem
        return None
    if spec == "any":
        return None
    if spec == "str":
        return None if isinstance(value, str) else wrong("a string")
    if spec == "bool":
        return None if isinstance(value, bool) else wrong("a boolean")
    if spec == "int":
        return None if isinstance(value, int) and not isinstance(value, bool) else wrong("an integer")
    if spec in ("ns", "wall_ns"):
        # a time goes into a BIGINT column or a date: beyond int64 it failed there, not here
        low = 0 if spec == "wall_ns" else -INT64
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value < INT64
        return None if ok else wrong("a time in ns" + (" since 1970" if low == 0 else "") + " (64-bit)")
    if spec == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return None if ok else wrong("a finite number")
    raise AssertionError(f"unknown spec {spec!r}")


def check_manifest(data, path: Path) -> dict:
    """`data` (a parsed manifest.json) if it fits the schema, else a one-line error naming `path` and
    the field."""
    if problem := _check(data, MANIFEST, ""):
        raise MwinvError(f"{path}: {problem}")
    # a node's name becomes a file name when its parts are written (<table>/<node>-00000.parquet): a
    # quote is fine there (names never go into SQL text), a separator or a parent is not
    for node in data["nodes"]:
        if not node or node in (".", "..") or "/" in node or "\0" in node or len(node.encode()) > 200:
            raise MwinvError(f"{path}: nodes: {node!r} cannot be a file name")
    return data
