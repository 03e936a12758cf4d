"""The SLO verdict of a study's points (stages, steps, sweep points), shared by the report and
the console: per point pass or fail and *which* SLO failed, in words a person reads
("fail: ttft p95 812 ms > 500 ms (81% met)"), the knee, and the labels of the load points.

Rules (docs/studies.md, "Reading a study"):

- a sweep point's verdict is the sweep's own (``passed``, ``reason``); a stage has none, so it
  passes when the share of its measured requests meeting every SLO is at least
  :data:`STAGE_TARGET` (the sweep's default target); with fewer than :data:`MIN_REQUESTS`
  measured it is "not enough data" (``passed`` None), never a miss;
- an SLO "failed" at a point when the share of requests meeting it alone is below the target;
  it is shown by the percentile the target names (target 0.95 -> p95: 95% of requests meet
  the limit exactly when the p95 is within it) against the limit. ITL's SLO limits each
  request's largest gap, which no percentile of the gaps shows: only its share is given;
- the knee of stages: the highest load that passed below the lowest load that failed (a
  sweep's knee is its own ``knee.point``);
- a study's overall goodput pools points at different loads: it is no capacity figure and
  is shown only labelled so (:func:`pooled_goodput_text`); the per-point goodput is the one
  to read. summary.json flags it: ``overall.slo.pooled_over_loads``.

Pure: reads summary dicts only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

STAGE_TARGET = 0.95
MIN_REQUESTS = 5  # as the sweep's (load/sweep.py); kept here so this module imports no Locust
_PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99), ("p99.9", 0.999))


@dataclass(frozen=True, slots=True)
class PointVerdict:
    index: int
    load: float
    passed: bool | None  # None: not judged (no SLOs, no data, run stopped)
    text: str  # "pass: 97.0% met every SLO" | "fail: ttft p95 812 ms > 500 ms (81% met)" | ...
    knee: bool = False


def kind_of(points: list[dict[str, Any]]) -> str:
    """The load key of the points: ``concurrency`` (sweep), ``rate`` or ``users``."""
    if not points:
        return "users"
    p = points[0]
    return "concurrency" if "concurrency" in p else "rate" if "rate" in p else "users"


def load_label(point: dict[str, Any], kind: str | None = None) -> str:
    """A point's load, short: '16 u' (users), '7.5 r/s' (arrival rate)."""
    k = kind or kind_of([point])
    v = point.get(k)
    if v is None:
        return "?"
    return f"{v:g} r/s" if k == "rate" else f"{v:g} u"


def target_percentile(target: float) -> str:
    """The percentile a share target names: 0.95 -> 'p95' (the smallest listed one >= it)."""
    for name, q in _PERCENTILES:
        if q >= target - 1e-9:
            return name
    return _PERCENTILES[-1][0]


def ms(v: float | None) -> str:
    """Milliseconds, as many digits as matter: 812, 30.9, 4.25."""
    if v is None:
        return "-"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def slo_limits(summary: dict[str, Any]) -> dict[str, float]:
    """The run's SLO limits in ms (metric -> limit), empty without ``--llm-slo``."""
    return dict(((summary.get("overall") or {}).get("slo") or {}).get("limits_ms") or {})


def slo_misses(point: dict[str, Any], limits_ms: dict[str, float], target: float) -> list[str]:
    """The SLOs this point missed, one phrase each: 'ttft p95 812 ms > 500 ms (81% met)'."""
    slo = point.get("slo") or {}
    shares = slo.get("share_meeting") or {}
    pk = target_percentile(target)
    out = []
    for metric, limit in limits_ms.items():
        share = shares.get(metric)
        if share is None or share >= target:
            continue
        v = None if metric == "itl" else (point.get(metric) or {}).get(pk)
        if v is not None and v > limit:
            out.append(f"{metric} {pk} {ms(v)} ms > {limit:g} ms ({share:.0%} met)")
        else:
            what = "largest ITL" if metric == "itl" else metric
            out.append(f"{what} ≤ {limit:g} ms met by {share:.1%} < {target:.0%}")
    fails, n = point.get("failures") or 0, point.get("requests") or 0
    if fails and n and (n - fails) / n < target:
        out.append(f"{fails} of {n} requests failed")
    if not out:  # every SLO alone held, together they did not
        all_share = slo.get("share_meeting_all")
        if all_share is not None and all_share < target:
            out.append(f"every SLO together met by {all_share:.1%} < {target:.0%}")
    return out


def point_verdict(point: dict[str, Any], limits_ms: dict[str, float], target: float,
                  kind: str | None = None) -> PointVerdict:
    """Pass or fail of one point, and why, from its own figures (and the sweep's judgement)."""
    k = kind or kind_of([point])
    index, load = point.get("index", 0), point.get(k) or 0
    share = (point.get("slo") or {}).get("share_meeting_all")
    if "passed" in point:  # a sweep point: the sweep judged it
        passed, reason = point["passed"], str(point.get("reason") or "")
        if passed is None:
            return PointVerdict(index, load, None, reason or "not judged")
    elif not limits_ms:
        return PointVerdict(index, load, None, "")
    else:
        n = point.get("requests") or 0
        if n < MIN_REQUESTS or share is None:  # too few to judge: never a miss
            return PointVerdict(index, load, None, f"not enough data: {n} requests measured, {MIN_REQUESTS} needed"
                                if n < MIN_REQUESTS else "not enough data: no SLO figures")
        passed, reason = share >= target, ""
    if passed:
        return PointVerdict(index, load, True, f"pass: {share:.1%} met every SLO" if share is not None else "pass")
    misses = slo_misses(point, limits_ms, target)
    if reason.startswith("over-saturated"):
        note = str(point.get("note") or "")
        detail = note.split(": ", 1)[1] if note.startswith("over-saturated: ") else \
            "latency grew without bound; ended early"
        misses.insert(0, f"over-saturated ({detail})")
    return PointVerdict(index, load, False, "fail: " + ("; ".join(misses) or reason or "SLOs missed"))


def stage_knee(verdicts: list[PointVerdict]) -> int | None:
    """The index of the highest-load passing point below every failing one, or None."""
    failing = [v.load for v in verdicts if v.passed is False]
    ceiling = min(failing) if failing else float("inf")
    good = [v for v in verdicts if v.passed and v.load < ceiling]
    return max(good, key=lambda v: v.load).index if good else None


def verdicts(summary: dict[str, Any], points: list[dict[str, Any]]) -> list[PointVerdict]:
    """Every point's verdict, the knee marked (the sweep's own, or :func:`stage_knee`); empty
    when the run has no SLOs."""
    limits = slo_limits(summary)
    if not limits or not points:
        return []
    sw = summary.get("sweep") or {}
    target = sw.get("target", STAGE_TARGET) if sw else STAGE_TARGET
    kind = kind_of(points)
    out = [point_verdict(p, limits, target, kind) for p in points]
    knee = (sw.get("knee") or {}).get("point") if sw else stage_knee(out)
    return [PointVerdict(v.index, v.load, v.passed, v.text, v.index == knee) for v in out]


def knee_sentence(summary: dict[str, Any], points: list[dict[str, Any]]) -> str | None:
    """'knee: 21 u (stage 3), goodput 512 req/s' for stages, or None (no SLOs, no knee);
    the sweep's knee has its own line."""
    vs = verdicts(summary, points)
    if not vs:
        return None
    kind = kind_of(points)
    knee = next((p for p, v in zip(points, vs, strict=True) if v.knee), None)
    target = (summary.get("sweep") or {}).get("target", STAGE_TARGET)
    if knee is None:
        if not any(v.passed is False for v in vs):  # none failed either: no miss to report
            return f"no stage had enough data to judge (at least {MIN_REQUESTS} measured requests)"
        return f"no stage met the SLOs for {target:.0%} of its requests"
    good = (knee.get("slo") or {}).get("goodput_rps")
    return (f"knee (highest load meeting the SLOs for {target:.0%} of requests, below every failing one): "
            f"{load_label(knee, kind)} (stage {knee.get('index')})"
            + (f", goodput {good:.2f} req/s" if good is not None else ""))


def pooled_goodput_text(summary: dict[str, Any]) -> str | None:
    """The study's overall goodput, labelled as what it is, or None (no SLOs, not a study)."""
    slo = (summary.get("overall") or {}).get("slo") or {}
    points = summary.get("stages") or []
    if not slo or not points or slo.get("goodput_rps") is None:
        return None
    share = slo.get("share_meeting_all")
    unit = "sweep points" if summary.get("sweep") else "stages"
    return (f"pooled over all {len(points)} {unit} at different loads (not a capacity figure; read the "
            f"per-point goodput and the knee): {slo['goodput_rps']:.2f} req/s met every SLO"
            + (f", {share:.1%} of requests" if share is not None else ""))


def headline_cells(summary: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The report's headline cells about goodput for a study (label, value, small print): the
    knee's goodput, how many points passed, and the pooled goodput labelled as such."""
    sw = summary.get("sweep") or {}
    points = sw.get("points") or summary.get("stages") or []
    vs = verdicts(summary, points)
    kind = kind_of(points)
    word = "sweep points" if sw else "stages"
    knee = next((p for p, v in zip(points, vs, strict=True) if v.knee), None)
    out: list[tuple[str, str, str]] = []
    if knee is not None:
        slo = knee.get("slo") or {}
        good, share = slo.get("goodput_rps"), slo.get("share_meeting_all")
        out.append(("Goodput at the knee", "-" if good is None else f"{good:.2f} req/s",
                    f"at {load_label(knee, kind)}" + ("" if share is None else f", {share:.1%} met every SLO")))
    else:
        out.append(("Goodput at the knee", "-", f"no {word[:-1]} met the SLOs"))
    target = sw.get("target", STAGE_TARGET) if sw else STAGE_TARGET
    out.append(("Points meeting the SLOs", f"{sum(1 for v in vs if v.passed)} of {len(vs)}",
                f"{word} with ≥ {target:.0%} of requests meeting every SLO"))
    pooled = ((summary.get("overall") or {}).get("slo") or {}).get("goodput_rps")
    if pooled is not None:
        out.append(("Goodput, pooled", f"{pooled:.2f} req/s",
                    f"over all {len(points)} {word} at different loads: not a capacity figure"))
    return out
