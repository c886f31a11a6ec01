"""The report's SVG charts: axis labels from the data."""

import re

from mwinv.correlator.svg import line_chart


def _y_labels(svg: str) -> list[str]:
    return re.findall(r'text-anchor="end">([^<]+)</text>', svg)


def test_line_chart_axis():
    # peak 100 with 5 % headroom: 0, 52.5, 105
    assert _y_labels(line_chart({"read": [(0.0, 0.0), (1.0, 100.0)]}, "n1: Disk", "MiB/s")) == ["0", "52.5", "105"]
    # a resource that stayed idle gets a 0..1 axis, not 1e-09 steps
    assert _y_labels(line_chart({"read": [(0.0, 0.0), (1.0, 0.0)]}, "n1: Disk", "MiB/s")) == ["0", "0.5", "1"]
    assert line_chart({}, "n1: Disk", "MiB/s") == ""
