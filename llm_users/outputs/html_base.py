"""What every HTML page of ours shares (report.html, its sections, llm-compare's page): the
page's CSS, matplotlib set up for SVG (the ``report`` extra), a figure as inline SVG, the
number format of the tables and the chart over time (the self-check's sentence in its level's
colour is the first screen's: ``html_headline.verdict``). Pages and sections import this; it imports none of them.
"""

from __future__ import annotations

import io
import re
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["CSS", "fmt", "plt", "svg", "time_chart"]

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.bad{background:#fde2e2;padding:.6em;border:1px solid #e99}.ok{background:#e3f6e3;padding:.6em;border:1px solid #9c9}.note{background:#eef3fb;padding:.6em;border:1px solid #9ab}
.charts{display:flex;flex-wrap:wrap;gap:1em}table.first th{text-align:left}.chart svg{width:560px;height:auto}
"""


def svg(fig: Any) -> str:
    """The figure as an inline ``<svg>`` (no XML header, no metadata); the figure is closed."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)


def fmt(v: Any) -> str:
    """A table cell: '-' for None, 3 decimals below 10, 1 above."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if v < 10 else f"{v:.1f}"
    return str(v)


def time_chart(
    rows: list[dict[str, Any]],
    series: dict[str, str],
    ylabel: str,
    title: str,
    users: bool = True,
    marks: list[float] | None = None,
    shade: list[tuple[float, float]] | None = None,
    bands: dict[str, tuple[str, str]] | None = None,
    notes: list[str] | None = None,
) -> str | None:
    """Per-second series (``rows`` keys -> labels) against seconds since start, with the active
    users on a second axis (``users``: off for open loop, whose users idle) and a dashed line at
    each of ``marks`` (Unix times: stage or sweep-point starts), each of ``shade`` ((start, end)
    Unix times: the outages) shaded red; ``bands``: series key -> (low key, high key), shaded in
    the series' colour where it has a value (the bucket an interpolated quantile lies in);
    ``notes``: legend lines with no line drawn (what was left out); None when no series has a value."""
    if not rows:
        return None
    t0 = rows[0]["time"]
    xs = [r["time"] - t0 for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    drawn, low = False, 0.0
    nan = float("nan")
    for key, label in series.items():
        ys = [r.get(key) for r in rows]
        if any(y is not None for y in ys):
            dot = "." if key in (bands or {}) else None  # an estimate between gaps may be one second long
            (line,) = ax.plot(
                xs, [nan if y is None else y for y in ys], label=label, marker=dot, markersize=3
            )
            drawn, low = True, min([low, *(y for y in ys if y is not None)])
            if key in (bands or {}):
                lo, hi = bands[key]  # type: ignore[index]
                edge = [
                    [nan if r.get(key) is None or r.get(k) is None else r[k] for r in rows] for k in (lo, hi)
                ]
                ax.fill_between(xs, edge[0], edge[1], color=line.get_color(), alpha=0.15, linewidth=0)
    if not drawn:
        plt.close(fig)
        return None
    for note in notes or ():
        ax.plot([], [], " ", label=note)
    if low >= 0:
        ax.set_ylim(bottom=0)  # counts, rates and times: from zero, so a small wobble looks small
    for a, b in shade or ():
        ax.axvspan(a - t0, max(b, a + 0.5) - t0, color="#e33", alpha=0.15, label="outage")
    for m in marks or ():
        ax.axvline(m - t0, color="#999", linestyle="--", linewidth=0.7)
    counts = [r.get("users") for r in rows] if users else []
    if any(u is not None for u in counts):
        ax2 = ax.twinx()
        ax2.plot(
            xs, [float("nan") if u is None else u for u in counts], color="grey", linestyle=":", label="users"
        )
        ax2.set_ylabel("active users")
        ax2.set_ylim(bottom=0, top=max(u or 0 for u in counts) * 1.15 + 1)
    ax.set_xlabel("seconds since start")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return svg(fig)
