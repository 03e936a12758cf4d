"""The Pareto frontier of measured load points. No I/O but the CSV text.

A point is on a frontier when no other point is at least as good on both axes and better on
one. Frontiers kept (each point is a stage or sweep point's summary):

- ``ttft``, ``tpot``, ``e2e``: requests/s (more is better) vs that metric's p99 (less is better);
- ``tokens``: output tokens/s per user (more is better) vs total output tokens/s (more is
  better). Tokens/s per user = output tokens / E2E of the mean request (what one user sees).
"""

from __future__ import annotations

import csv
import io
from typing import Any

FRONTIERS = ("ttft", "tpot", "e2e", "tokens")


def per_user_tokens_s(point: dict[str, Any]) -> float | None:
    e2e = (point.get("e2e") or {}).get("mean")
    n = point.get("successes") or 0
    if not e2e or not n:
        return None
    return (point.get("output_tokens") or 0) / n / (e2e / 1000)


def axes(point: dict[str, Any], frontier: str) -> tuple[float, float] | None:
    """(x to maximise, y to minimise) of a point for a frontier, or None when it lacks data."""
    if frontier == "tokens":
        x, y = point.get("output_tokens_per_s"), per_user_tokens_s(point)
        return None if x is None or y is None else (x, -y)
    x, y = point.get("requests_per_s"), (point.get(frontier) or {}).get("p99")
    return None if x is None or y is None or not point.get("requests") else (x, y)


def frontier(points: list[dict[str, Any]], which: str) -> list[int]:
    """Indexes (into ``points``) of the points on the frontier, by increasing x."""
    pts = [(i, a) for i, p in enumerate(points) if (a := axes(p, which)) is not None]
    out = []
    for i, (x, y) in pts:
        dominated = any(x2 >= x and y2 <= y and (x2 > x or y2 < y) for j, (x2, y2) in pts if j != i)
        if not dominated:
            out.append(i)
    return sorted(out, key=lambda i: axes(points[i], which)[0])  # type: ignore[index]


def frontiers(points: list[dict[str, Any]]) -> dict[str, list[int]]:
    return {f: frontier(points, f) for f in FRONTIERS}


PARETO_CSV = ["index", "load", "requests", "requests_per_s", "output_tokens_per_s", "output_tokens_per_s_per_user",
              "ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms", "slo_share_meeting_all", "passed",
              *[f"on_{f}_frontier" for f in FRONTIERS]]


def pareto_csv(points: list[dict[str, Any]], kind: str) -> str:
    fr = frontiers(points)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(PARETO_CSV)
    for i, p in enumerate(points):
        row = [p.get("index", i), p.get(kind), p.get("requests"), p.get("requests_per_s"), p.get("output_tokens_per_s"),
               per_user_tokens_s(p), (p.get("ttft") or {}).get("p99"), (p.get("tpot") or {}).get("p99"),
               (p.get("e2e") or {}).get("p99"), (p.get("slo") or {}).get("share_meeting_all"), p.get("passed")]
        row += [int(i in fr[f]) for f in FRONTIERS]
        w.writerow(["" if v is None else f"{v:.6g}" if isinstance(v, float) else v for v in row])
    return out.getvalue()
