"""outputs/html_base.py: what every page shares: a table cell's number format, a figure as inline
SVG (no header, no metadata, the figure closed), and the chart over time (its series, the users'
axis, the outages shaded, the notes in the legend; nothing drawn when no series has a value)."""

from __future__ import annotations

import re

from llm_users.outputs.html_base import CSS, fmt, plt, svg, time_chart


def texts(page: str) -> list[str]:
    """The texts a chart holds (matplotlib writes each as an SVG comment)."""
    return re.findall(r"<!-- (.*?) -->", page)


def test_a_cell_is_a_dash_three_decimals_below_ten_one_above() -> None:
    assert [fmt(None), fmt(1.23456), fmt(9.9994), fmt(12.345), fmt(1234.56)] == ["-", "1.235", "9.999", "12.3", "1234.6"]
    assert fmt(7) == "7" and fmt("ok") == "ok" and fmt(True) == "True"  # only floats are rounded


def test_a_figure_is_inline_svg_with_no_header_or_metadata_and_is_closed() -> None:
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    before = len(plt.get_fignums())
    out = svg(fig)
    assert out.startswith("<svg") and out.rstrip().endswith("</svg>")
    assert "<?xml" not in out and "<!DOCTYPE" not in out and "<metadata>" not in out
    assert len(plt.get_fignums()) == before - 1
    assert ".charts{" in CSS and ".bad{" in CSS


ROWS = [{"time": 1000.0 + i, "ttft": 40.0 + i, "tpot": None, "users": 2 + i} for i in range(5)]


def test_nothing_to_draw_is_none() -> None:
    open_figures = len(plt.get_fignums())
    assert time_chart([], {"ttft": "TTFT"}, "ms", "Latency") is None
    assert time_chart(ROWS, {"tpot": "TPOT"}, "ms", "Latency") is None  # no value in any row
    assert len(plt.get_fignums()) == open_figures  # the empty figure was closed


def test_series_users_outages_and_notes() -> None:
    page = time_chart(ROWS, {"ttft": "TTFT p50", "tpot": "TPOT p50"}, "ms", "Latency over time",
                      shade=[(1001.0, 1002.0)], notes=["server queue p99: not drawn"])
    assert page is not None
    got = texts(page)
    assert "Latency over time" in got and "TTFT p50" in got and "seconds since start" in got
    assert "TPOT p50" not in got  # a series with no value has no legend line
    assert "active users" in got  # the second axis
    assert "outage" in got and "server queue p99: not drawn" in got
    open_loop = texts(time_chart(ROWS, {"ttft": "TTFT p50"}, "ms", "t", users=False) or "")
    assert "active users" not in open_loop and "outage" not in open_loop
