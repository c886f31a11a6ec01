"""The rules of the Trace Event format (the JSON Perfetto UI and chrome://tracing read) that mwinv's
timeline must keep, checked on a parsed file: fields each phase requires, µs times, non-negative
durations, slices on one track nested (a child inside its parent, siblings apart), every flow start with
its finish, each end inside a slice of its own track (a flow binds to the slice enclosing it)."""

from __future__ import annotations

from collections import defaultdict

EPS = 1e-6   # µs with ns digits: a sum of two floats may pass a third by 1e-14
REQUIRED = {"X": ("name", "cat", "pid", "tid", "ts", "dur"), "C": ("name", "pid", "ts", "args"),
            "s": ("name", "cat", "id", "pid", "tid", "ts"), "f": ("name", "cat", "id", "pid", "tid", "ts"),
            "M": ("name", "pid", "args")}


def check(doc: dict) -> dict[tuple, list[dict]]:
    """Asserts the rules; returns each track's slices ((pid, tid) -> X events by start)."""
    assert isinstance(doc["traceEvents"], list) and doc["traceEvents"]
    tracks: dict[tuple, list[dict]] = defaultdict(list)
    for e in doc["traceEvents"]:
        assert e["ph"] in REQUIRED, e
        missing = [k for k in REQUIRED[e["ph"]] if k not in e]
        assert not missing, (missing, e)
        if "ts" in e:
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            tracks[(e["pid"], e["tid"])].append(e)
        elif e["ph"] == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values()), e
        elif e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index"), e
    for slices in tracks.values():
        slices.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_: list[dict] = []
        for e in slices:
            while open_ and e["ts"] >= _end(open_[-1]) - EPS:
                open_.pop()
            if open_:   # inside the innermost open slice, wholly
                assert _end(e) <= _end(open_[-1]) + EPS, (e, open_[-1])
            open_.append(e)
    starts = {(e["cat"], e["name"], e["id"]): e for e in doc["traceEvents"] if e["ph"] == "s"}
    finishes = {(e["cat"], e["name"], e["id"]): e for e in doc["traceEvents"] if e["ph"] == "f"}
    assert set(starts) == set(finishes)
    for end in (*starts.values(), *finishes.values()):
        assert enclosing(tracks, end), end
    return tracks


def enclosing(tracks: dict[tuple, list[dict]], e: dict) -> dict | None:
    """The outermost slice on e's track that holds e's time."""
    return next((x for x in tracks.get((e["pid"], e["tid"]), []) if x["ts"] - EPS <= e["ts"] <= _end(x) + EPS), None)


def _end(e: dict) -> float:
    return e["ts"] + e["dur"]
