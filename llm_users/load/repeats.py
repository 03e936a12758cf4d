"""Repeats and confidence (``--llm-repeat K``): pure statistics over K measurements of one point.

Each point (a plain run's load, a stage, a sweep point) is measured K times, consecutively,
each repeat with its own settle window. Per metric the interval is **Student-t 95% over the K
repeats' own figures**: ``mean +- t(0.975, K-1) * sd / sqrt(K)`` (``sd`` the sample standard
deviation). With K = 1 there is no interval (``low`` = ``high`` = None).

The metrics: :data:`CI_METRICS` (throughput, output tokens/s, TTFT/TPOT/E2E p99, goodput, the
share of requests meeting every SLO). :func:`fold` turns a point's pooled summary (all its
repeats' requests together: exact percentiles, rates over the summed measured seconds) and its
repeats' summaries into the ``stages[i]`` entry: the pooled keys plus ``ci`` and ``repeats``.

The knee with its interval (:func:`knee_interval`, a sweep measured with repeats): a point
passes on the mean of its repeats' share meeting every SLO; the interval runs from ``low`` =
the highest load whose share's CI lower bound is at or above the target (surely passes; None
when none does) to ``high`` = the lowest load above ``low`` whose share's CI upper bound is below
the target (surely fails; None when none does). Between them the data cannot tell pass from fail.
"""

from __future__ import annotations

import math
from typing import Any

# t(0.975, df) for df = 1..30 (two-sided 95%)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)

CI_METRICS = ("throughput_rps", "output_tokens_per_s", "ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms", "goodput",
              "share_meeting_all")


def t975(df: int) -> float:
    """The two-sided 95% Student-t quantile for ``df`` degrees of freedom (df >= 1); beyond 30,
    ``1.96 + 2.5 / df`` (within 0.002 of the exact value)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.5 / df


def mean_ci(values: list[float]) -> dict[str, float | None] | None:
    """``{"mean", "low", "high"}`` of the values (None ones dropped): Student-t 95%; with one
    value ``low`` and ``high`` are None; None when there is no value."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    m = sum(xs) / len(xs)
    if len(xs) == 1:
        return {"mean": m, "low": None, "high": None}
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    half = t975(len(xs) - 1) * sd / math.sqrt(len(xs))
    return {"mean": m, "low": m - half, "high": m + half}


def figures(stage: dict[str, Any]) -> dict[str, float | None]:
    """One repeat's figures (from its stage summary), by :data:`CI_METRICS` name."""
    slo = stage.get("slo") or {}
    return {"throughput_rps": stage.get("requests_per_s"), "output_tokens_per_s": stage.get("output_tokens_per_s"),
            "ttft_p99_ms": (stage.get("ttft") or {}).get("p99"), "tpot_p99_ms": (stage.get("tpot") or {}).get("p99"),
            "e2e_p99_ms": (stage.get("e2e") or {}).get("p99"), "goodput": slo.get("goodput_rps"),
            "share_meeting_all": slo.get("share_meeting_all")}


def ci_block(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"repeats": K, "method": ..., metric: {"mean", "low", "high"}, ...}`` over the repeats'
    stage summaries (a metric none of them has is left out)."""
    per = [figures(r) for r in repeats]
    out: dict[str, Any] = {"repeats": len(repeats), "method": "Student-t 95% over the repeats' own figures"}
    for m in CI_METRICS:
        ci = mean_ci([f[m] for f in per])
        if ci is not None:
            out[m] = ci
    return out


def fold(pooled: dict[str, Any], repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """The point's entry: the pooled summary's keys, ``ci`` and ``repeats`` (each repeat's
    figures, with its own ``start``, ``end``, ``requests`` and ``measured_s``)."""
    out = dict(pooled)
    out["ci"] = ci_block(repeats)
    out["repeats"] = [{"start": r.get("start"), "end": r.get("end"), "requests": r.get("requests"),
                       "measured_s": r.get("measured_s"), **figures(r)} for r in repeats]
    return out


def passes_on_mean(repeats: list[dict[str, Any]], target: float, min_requests: int) -> tuple[bool, float | None]:
    """A repeated sweep point's judgement: at least ``min_requests`` measured over its repeats and
    the mean over the repeats of the share meeting every SLO at or above ``target``."""
    ci = mean_ci([figures(r)["share_meeting_all"] for r in repeats])
    mean = None if ci is None else ci["mean"]
    enough = sum(r.get("requests") or 0 for r in repeats) >= min_requests
    return (enough and mean is not None and mean >= target), mean


def knee_interval(points: list[dict[str, Any]], key: str, target: float) -> dict[str, Any]:
    """``{"low", "high", "rule"}`` from the points' ``ci.share_meeting_all`` (see the module's
    docstring). A point without an interval (one repeat) counts by its mean."""
    def bounds(p: dict[str, Any]) -> tuple[float, float] | None:
        share = ((p.get("ci") or {}).get("share_meeting_all")) or None
        if share is None:
            return None
        lo = share["low"] if share["low"] is not None else share["mean"]
        hi = share["high"] if share["high"] is not None else share["mean"]
        return lo, hi

    judged = sorted(((p[key], b) for p in points if (b := bounds(p)) is not None), key=lambda x: x[0])
    sure_pass = [load for load, (lo, _) in judged if lo >= target]
    low = max(sure_pass) if sure_pass else None
    sure_fail = [load for load, (_, hi) in judged if hi < target and (low is None or load > low)]
    high = min(sure_fail) if sure_fail else None
    return {"low": low, "high": high,
            "rule": "low: highest load whose share meeting every SLO has its 95% CI lower bound >= target; "
                    "high: lowest load above it whose CI upper bound < target"}
