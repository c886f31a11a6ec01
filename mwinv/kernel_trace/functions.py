"""The function tracer's entries, decoded into exact per-function counts and times (docs/kernel-advice.md):
where the kernel allows it (not here: EPERM), its counts replace perf's sampled stacks as the kernel-knob
rules' evidence.

Two text formats of ftrace's `trace` file (and `trace-cmd report`):

- `function`: one line per call, `comm-pid [cpu] flags ts: func <-parent`: counts per function and
  caller, no time;
- `function_graph`: `[ts |] cpu) [comm-pid |] duration | func() {`, `func();` (a leaf, with its time)
  and `}` (with the time of the call it closes, `/* func */` where funcgraph-tail is on), indented by
  depth: calls, inclusive time and self time (inclusive less the traced children's). A close whose
  opening line is not in the trace (tracing began inside it, or the buffer dropped it) counts the call
  and its inclusive time; its self time is not known and is left out.

Both read per CPU in order, as the trace file lists them."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

SOURCE_FUNCTION = "ftrace-function"        # statement_kernel_function sources of the function tracer
SOURCE_GRAPH = "ftrace-function-graph"
STACK_DEPTH = 8                            # frames kept in a row's example stack, as statement_kernel_function

_FUNCTION = re.compile(r"^\s*(?P<comm>.*?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?:\S{4,6}\s+)?(?P<ts>\d+\.\d+):\s+"
                       r"(?:function:\s+)?(?P<func>[\w.]+)(?:\s+<-(?P<parent>[\w.]+))?\s*$")
# the duration field: blank, or a time in us with an optional delay mark (+ > 10 us, ! > 100 us, # > 1 ms,
# * > 10 ms, @ > 100 ms, $ > 1 s)
_GRAPH = re.compile(r"^\s*(?:(?P<ts>\d+\.\d+)\s*\|\s*)?(?P<cpu>\d+)\)\s+(?:(?P<proc>\S+-\d+)\s+\|\s+)?"
                    r"(?:[+!#*@$]\s*)?(?P<us>\d+(?:\.\d+)?)?\s*(?:us)?\s*\|(?P<body>.*)$")
_REPORT_GRAPH = re.compile(r"^\s*(?P<proc>.*?-\d+)\s+\[(?P<cpu>\d+)\]\s+(?:\S{4,6}\s+)?(?P<ts>\d+\.\d+):\s+"
                           r"funcgraph_(?:entry|exit):\s+(?:[+!#*@$]\s*)?(?P<us>\d+(?:\.\d+)?)?\s*(?:us)?\s*\|"
                           r"(?P<body>.*)$")
_OPEN = re.compile(r"^(?P<func>[\w.]+)\(\) \{$")
_LEAF = re.compile(r"^(?P<func>[\w.]+)\(\);$")
_CLOSE = re.compile(r"^\}(?: /\* (?P<func>[\w.]+) \*/)?$")


@dataclass
class FunctionStats:
    calls: int = 0
    incl_ns: int = 0
    self_ns: int = 0
    unmatched: int = 0                      # closes without their opening line: no self time
    callers: Counter = field(default_factory=Counter)
    stacks: Counter = field(default_factory=Counter)   # call paths, the function first


def function_counts(lines: Iterable[str]) -> dict[str, FunctionStats]:
    """The `function` tracer's lines: per function its calls and their callers (other lines skipped)."""
    out: dict[str, FunctionStats] = {}
    for line in lines:
        m = _FUNCTION.match(line)
        if not m or line.lstrip().startswith("#"):
            continue
        st = out.setdefault(m["func"], FunctionStats())
        st.calls += 1
        if m["parent"]:
            st.callers[m["parent"]] += 1
            st.stacks[(m["func"], m["parent"])] += 1
    return out


def graph_times(lines: Iterable[str]) -> dict[str, FunctionStats]:
    """The `function_graph` tracer's lines (either text format): per function its calls, inclusive and self
    time in ns, callers and call paths."""
    out: dict[str, FunctionStats] = {}
    stacks: dict[str, list[list]] = {}      # per CPU: [depth, function, children's ns] of the open calls
    for line in lines:
        m = _GRAPH.match(line) or _REPORT_GRAPH.match(line)
        if not m or line.lstrip().startswith("#"):
            continue
        body = m["body"]
        text = body.strip()
        depth = (len(body) - len(body.lstrip(" "))) // 2
        ns = round(float(m["us"]) * 1000) if m["us"] else None
        stack = stacks.setdefault(m["cpu"], [])
        closing = _CLOSE.match(text)
        # calls whose close is not in the trace: deeper than this line, or at its depth unless it closes one
        while stack and (stack[-1][0] > depth or (stack[-1][0] == depth and not closing)):
            stack.pop()
        if (o := _OPEN.match(text)) is not None:
            stack.append([depth, o["func"], 0])
            continue
        leaf, close = _LEAF.match(text), closing
        if ns is None or not (leaf or close):
            continue   # a comment, a marker ("=> comm-pid"), an event printed into the graph
        if leaf:
            func, children, matched = leaf["func"], 0, True
        elif stack and stack[-1][0] == depth:
            _, func, children = stack.pop()
            matched = True
        else:
            func, children, matched = close["func"] or "?", 0, False
        path = [func] + [f for _, f, _ in reversed(stack)]
        st = out.setdefault(func, FunctionStats())
        st.calls += 1
        st.incl_ns += ns
        if matched:
            st.self_ns += max(0, ns - children)
        else:
            st.unmatched += 1
        if len(path) > 1:
            st.callers[path[1]] += 1
        st.stacks[tuple(path[:STACK_DEPTH])] += 1
        if stack:
            stack[-1][2] += ns
    return out


def kernel_function_rows(stats: dict[str, FunctionStats], source: str) -> list[dict]:
    """statement_kernel_function's columns (function, stack, samples, ns, share, source) from decoded stats,
    for one statement's stretch of the trace: samples are the calls, ns the self time (function_graph;
    None for the function tracer, which times nothing), share the function's part of the traced self
    time. The example stack is the most frequent call path (ties: the first by name)."""
    total = sum(s.self_ns for s in stats.values())
    rows = []
    for func, st in sorted(stats.items()):
        path = min(st.stacks.items(), key=lambda kv: (-kv[1], kv[0]))[0] if st.stacks else (func,)
        timed = source == SOURCE_GRAPH
        rows.append({"function": func, "stack": " <- ".join(path), "samples": st.calls,
                     "ns": st.self_ns if timed else None,
                     "share": st.self_ns / total if timed and total else None, "source": source})
    return rows
