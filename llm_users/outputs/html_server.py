"""report.html's charts of the scraped series (exporters/: the LLM server's /metrics, the GPU
sidecars): the server's figures beside ours, its batch and queue, and every ``server_*`` and
``gpu_*`` column, one chart per unit (never milliseconds and ratios on one axis).

A quantile read from the server's histogram (``<q>_ms`` with ``<q>_lo_ms`` and ``<q>_hi_ms``, the
bucket it fell in: docs/prometheus.md) is drawn only where it is an estimate, between two finite
bounds: its line marked approximate, its bucket shaded. Where it fell in the first bucket (all
known: ``< hi``) or the +Inf one (``> lo``) nothing is drawn, and the legend says so with the
bound: a point there would be a number nobody measured (an empty vLLM queue read 150 ms).
"""

from __future__ import annotations

from typing import Any

from llm_users.outputs.html_base import time_chart

#: a bucket quantile's bound columns, beside its ``<q>_ms`` (exporters/series.py writes them)
LO, HI = "_lo_ms", "_hi_ms"
#: the unit of a scraped column, by the end of its name: (ending, axis label, chart title's unit)
UNITS = (
    ("_ms", "ms", "ms"),
    ("_ratio", "ratio (0..1)", "ratios"),
    ("_watts", "W", "watts"),
    ("tokens_per_s", "tokens/s", "tokens/s"),
    ("preemptions_per_s", "preemptions/s", "preemptions/s"),
    ("_requests_running", "requests", "requests"),
    ("_requests_waiting", "requests", "requests"),
)
TITLE = "Server and GPU series"


def bucket_quantiles(rows: list[dict[str, Any]]) -> list[str]:
    """The ``<q>_ms`` columns that are bucket quantiles (a ``<q>_lo_ms`` beside them)."""
    return sorted({k[: -len(LO)] + "_ms" for r in rows for k in r if k.endswith(LO)})


def _bands(keys: list[str]) -> dict[str, tuple[str, str]]:
    return {k: (k[:-3] + LO, k[:-3] + HI) for k in keys}


def bound_note(rows: list[dict[str, Any]], key: str, label: str) -> str | None:
    """The legend line of the seconds where quantile ``key`` was a bucket's bound only, e.g.
    ``server queue time p99: < 300 ms in 12 s (first bucket), not drawn``; None when none."""
    q = key[:-3]
    bound = [r for r in rows if r.get(q + LO) is not None and r.get(key) is None]
    below = [r[q + HI] for r in bound if r.get(q + HI) is not None]
    above = [r[q + LO] for r in bound if r.get(q + HI) is None]
    parts = [f"< {max(below):g} ms in {len(below)} s (first bucket)"] if below else []
    parts += [f"> {max(above):g} ms in {len(above)} s (+Inf bucket)"] if above else []
    return f"{label}: {', '.join(parts)}, not drawn" if parts else None


def _with_quantiles(rows: list[dict[str, Any]], series: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """``series`` with each bucket quantile's label marked approximate, and the notes of their bounds."""
    quantiles = set(bucket_quantiles(rows))
    labels = {
        k: (f"{v} ≈ (interpolated; shaded: its bucket)" if k in quantiles else v) for k, v in series.items()
    }
    notes = [n for k, v in series.items() if k in quantiles and (n := bound_note(rows, k, v))]
    return labels, notes


def server_charts(rows: list[dict[str, Any]], users: bool, marks: list[float]) -> list[str | None]:
    """The server's own figures (its /metrics, scraped: exporters/) beside ours on the same time
    axis: its queue and TTFT against our TTFT p99, and its running and waiting requests."""
    if not any(k.startswith("server_") for r in rows for k in r):
        return []
    latency = {
        "ttft_p99_ms": "our TTFT p99",
        "server_ttft_mean_ms": "server TTFT mean",
        "server_queue_time_mean_ms": "server queue time mean",
        "server_queue_time_p99_ms": "server queue time p99",
        "server_prefill_time_p99_ms": "server prefill p99",
    }
    labels, notes = _with_quantiles(rows, latency)
    return [
        time_chart(
            rows,
            labels,
            "ms",
            "Server latency beside ours",
            users,
            marks,
            bands=_bands(bucket_quantiles(rows)),
            notes=notes,
        ),
        time_chart(
            rows,
            {
                "server_num_requests_running": "server running requests",
                "server_num_requests_waiting": "server waiting requests",
            },
            "requests",
            "Server batch and queue",
            users,
            marks,
        ),
    ]


def unit_of(col: str) -> tuple[str, str]:
    """(axis label, title unit) of a scraped column; its own name for one of no known unit."""
    return next(((axis, title) for end, axis, title in UNITS if col.endswith(end)), ("value", col))


def scraped_charts(rows: list[dict[str, Any]], users: bool, marks: list[float]) -> list[str | None]:
    """Every ``gpu_*`` and ``server_*`` column, one chart per unit ("Server and GPU series: ms",
    ": ratios", ...); a bucket quantile's bounds shade its line rather than being lines of their own."""
    cols = sorted(
        {k for r in rows for k in r if k.startswith(("gpu_", "server_")) and not k.endswith((LO, HI))}
    )
    quantiles = bucket_quantiles(rows)
    cols += [q for q in quantiles if q not in cols]  # a quantile that was never a value: its note
    groups: dict[tuple[str, str], list[str]] = {}
    for c in cols:
        groups.setdefault(unit_of(c), []).append(c)
    charts = []
    for (axis, unit), keys in groups.items():
        labels, notes = _with_quantiles(rows, {k: k for k in keys})
        charts.append(
            time_chart(
                rows,
                labels,
                axis,
                f"{TITLE}: {unit}",
                users,
                marks,
                bands=_bands([k for k in keys if k in quantiles]),
                notes=notes,
            )
        )
    return charts
