"""The knee explains itself: what changed in the server (and the GPU, and the client and network)
between the last load that met the SLOs and the first that broke them, in one sentence.

Two parts, both pure (no Locust, gevent or I/O):

- :func:`window_figures`: a stage's or sweep point's ``server_metrics``, the scraped series of
  the run's timeline (``server_*`` from the LLM server's /metrics, ``gpu_*`` from the GPU
  sidecar: exporters/) over the point's measured window: mean and max of each column.
- :func:`explain`: two points' figures (the knee, the first failing load above it) in, the
  sentence out, e.g. ``TPOT p95 passes 50 ms from 48 u (41.2 -> 63.0 ms): queueing in the
  server (waiting requests 0 -> 12, queue time p99 0.0 -> 1800 ms), KV cache 97%; client and
  network flat at 0.4 -> 0.4 ms``.

The rule (docs/metrics.md, "Why the knee"): each cause is named when its figures moved by more
than noise between the two points: *queueing* (waiting requests up by more than half a request
and at least one on average, or the queue-time p99 at least doubled and up 5 ms), *KV cache
full* (usage at least 95%), *preemptions* (any per second), *decode slowing as the batch grows*
(the server's time per token, else our TPOT p50 where the server tells its batch, up 15% while
the running batch grew),
*prefill* (its p99 up 50% and 5 ms). Per-request server timings in the records
(``server_timings``: ``queue_ns``, ``prefill_ns``, ``decode_ns``; summarised per point as
``server_timings``) come first (queue p99); the /metrics series otherwise (the queue time's
mean over the window: its histogram's buckets, 0.3 s wide at the bottom in vLLM, are too coarse
for a p99). The residual "client and network" (our TTFT less the server's queue and prefill, per
request) needs the per-request timings; it is said to be flat when it moved less than 1 ms and
20%, and left out when the server reports no timings. GPU utilisation and memory are added when
a sidecar was scraped; a saturated load generator (the run's self-check) is said, since its own
delay is then in our latencies. Where the server says nothing, the sentence says so rather than
guessing.
"""

from __future__ import annotations

import math
from typing import Any

from llm_users.outputs.study_slo import kind_of, load_label, slo_limits, target_percentile, verdicts

Figures = dict[str, dict[str, float]]
#: a server quantile's bucket bounds beside its ``<q>_ms`` (exporters/series.py)
_BOUNDS = ("_lo_ms", "_hi_ms")


def window_figures(extra: dict[int, dict[str, float]], start: float, end: float) -> Figures:
    """Mean and max of every scraped column over a point's measured window ``[start, end)``: the
    seconds whose middle lies in it (a second's row holds its last scrape, so a second that began
    before the window, in the settle time, would speak for the load before); the second holding
    the window's middle when the window is under a second. Empty when nothing was scraped then.
    A quantile read from the server's buckets (``<q>_ms`` beside ``<q>_lo_ms``) averages its
    estimates only; its seconds of a bound only are ``below_samples``/``below_ms`` (first bucket)
    or ``above_samples``/``above_ms`` (+Inf), as summary.json's ``server.series`` (docs/prometheus.md)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    maxima: dict[str, float] = {}
    bounds: dict[str, dict[str, float]] = {}
    lo, hi = math.ceil(start - 0.5), math.ceil(end - 0.5)
    seconds = range(lo, hi) if hi > lo else (int((start + end) / 2),)
    for t in seconds:
        row = extra.get(t) or {}
        for k, v in row.items():
            if not isinstance(v, int | float) or isinstance(v, bool):
                continue  # a second a column had no value (a rate not computed, a stage's empty cell)
            if k.endswith(_BOUNDS):
                q = k[: -len("_lo_ms")]
                if k.endswith("_lo_ms") and q + "_ms" not in row:  # the quantile was a bound only
                    side, bound = ("below", row[q + "_hi_ms"]) if q + "_hi_ms" in row else ("above", v)
                    b = bounds.setdefault(q + "_ms", {})
                    b[side + "_samples"] = b.get(side + "_samples", 0) + 1
                    b[side + "_ms"] = max(b.get(side + "_ms", bound), bound)
                continue
            sums[k] = sums.get(k, 0.0) + v
            counts[k] = counts.get(k, 0) + 1
            maxima[k] = max(maxima.get(k, v), v)
    out: Figures = {k: {"mean": sums[k] / counts[k], "max": maxima[k], "samples": counts[k]} for k in sums}
    for k, b in bounds.items():
        out[k] = {**out.get(k, {"samples": 0}), **b}
    return dict(sorted(out.items()))


def attach_window_figures(points: list[dict[str, Any]], extra: dict[int, dict[str, float]]) -> None:
    """Each point's ``server_metrics`` over its measured window (skipped when none were scraped)."""
    for p in points:
        start = p.get("start")
        if start is None:
            continue
        begin = start + (p.get("settle_s") or 0.0)
        figs = window_figures(extra, begin, begin + (p.get("measured_s") or 0.0))
        if figs:
            p["server_metrics"] = figs


# what the sentence reads from a point --------------------------------------------------------------
def _m(p: dict[str, Any], col: str, how: str = "mean") -> float | None:
    v = ((p.get("server_metrics") or {}).get(col) or {}).get(how)
    return None if v is None else float(v)


def _timing(p: dict[str, Any], part: str, key: str) -> float | None:
    v = ((p.get("server_timings") or {}).get(part) or {}).get(key)
    return None if v is None else float(v)


def _gpu(p: dict[str, Any], suffix: str, how: str) -> float | None:
    vals = [
        v.get(how)
        for k, v in (p.get("server_metrics") or {}).items()
        if k.startswith("gpu_") and k.endswith(suffix) and v.get(how) is not None
    ]
    return sum(vals) / len(vals) if vals else None


def figures(p: dict[str, Any]) -> dict[str, float | None]:
    """The figures the sentence compares, from one point (None: not known)."""
    queue_p99 = _timing(p, "queue", "p99")
    prefill_p99 = _timing(p, "prefill", "p99")
    per_token = _m(p, "server_itl_mean_ms")
    if per_token is None:
        per_token = _m(p, "server_tpot_mean_ms")
    return {
        "waiting": _m(p, "server_num_requests_waiting"),
        "running": _m(p, "server_num_requests_running"),
        "kv": _m(p, "server_kv_cache_usage_ratio", "max"),
        "preemptions": _m(p, "server_preemptions_per_s"),
        # per request (the server's timings): p99; from /metrics: the mean (its buckets are coarse)
        "queue_p99": queue_p99,
        "queue_mean": _m(p, "server_queue_time_mean_ms"),
        "prefill_p99": prefill_p99 if prefill_p99 is not None else _m(p, "server_prefill_time_p99_ms", "max"),
        "per_token": per_token,
        "tpot_p50": (p.get("tpot") or {}).get("p50"),
        "residual": _timing(p, "client_network", "p50"),
        "gpu_util": _gpu(p, "_utilization_ratio", "mean"),
        "gpu_mem": _gpu(p, "_memory_used_ratio", "max"),
    }


def _num(v: float | None, unit: str = "") -> str:
    if v is None:
        return "?"
    return (f"{v:.0f}" if abs(v) >= 100 or v == int(v) else f"{v:.1f}") + unit


def _change(b: float | None, a: float | None, unit: str = "") -> str:
    return _num(a, unit) if b is None else f"{_num(b)} -> {_num(a, unit)}"


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{100 * v:.0f}%"


def causes(b: dict[str, float | None], a: dict[str, float | None]) -> list[str]:
    """The causes whose figures moved, in words with their figures (``b``: the knee, may be all
    None when the first point failed; ``a``: the first failing point)."""
    out: list[str] = []
    wb, wa = b["waiting"], a["waiting"]
    qname, qb, qa = "queue time p99", b["queue_p99"], a["queue_p99"]
    if qa is None:
        qname, qb, qa = "queue time mean", b["queue_mean"], a["queue_mean"]
    queued = (wa is not None and wa >= 1 and wa > (wb or 0) + 0.5) or (
        qa is not None and qa >= 2 * (qb or 0) and qa >= (qb or 0) + 5
    )
    if queued:
        figs = []
        if wa is not None:
            figs.append(f"waiting requests {_change(wb, wa)}")
        if qa is not None:
            figs.append(f"{qname} {_change(qb, qa, ' ms')}")
        out.append("queueing in the server (" + ", ".join(figs) + ")")
    if a["kv"] is not None and a["kv"] >= 0.95:
        out.append(f"KV cache {_pct(a['kv'])}")
    if a["preemptions"]:
        out.append(f"preemptions {a['preemptions']:.1f}/s")
    rb, ra = b["running"], a["running"]
    tb, ta = b["per_token"], a["per_token"]
    what = "server time per token"
    if (tb is None or ta is None) and ra is not None:  # a server with a batch but no per-token time
        tb, ta, what = b["tpot_p50"], a["tpot_p50"], "our TPOT p50"
    grew = ra is None or rb is None or ra > rb + 0.5
    if (
        tb is not None
        and ta is not None
        and tb > 0
        and ta >= 1.15 * tb
        and grew
        and not (queued and ra == rb)
    ):
        running = f"running requests {_change(rb, ra)}, " if ra is not None else ""
        out.append(f"decode slowing as the batch grows ({running}{what} {_change(tb, ta, ' ms')})")
    pb, pa = b["prefill_p99"], a["prefill_p99"]
    if pa is not None and pb is not None and pa >= 1.5 * pb and pa >= pb + 5:
        out.append(f"prefill slower (prefill p99 {_change(pb, pa, ' ms')})")
    return out


def explain(
    before: dict[str, Any] | None, after: dict[str, Any], slo_phrase: str, client_saturated: bool = False
) -> str:
    """One sentence: ``slo_phrase`` (what broke, from which load), then what changed between the
    knee (``before``; None when the first point already failed) and the first failing point.
    ``client_saturated`` (the run's self-check): the load generator's own delay is in our figures,
    which the sentence says, so a latency that rose while the server's figures did not move is
    not read as the server's."""
    b = figures(before) if before is not None else dict.fromkeys(figures(after))
    a = figures(after)
    server_known = any(a[k] is not None for k in ("waiting", "running", "queue_p99", "per_token", "kv"))
    found = causes(b, a)
    if found:
        text = f"{slo_phrase}: " + ", ".join(found)
    elif server_known:
        text = f"{slo_phrase}: the server's queue, batch and per-token time did not move"
    else:
        text = (
            f"{slo_phrase}: the server's own figures are not known (no /metrics scraped, no "
            f"server timings), so the cause cannot be named"
        )
    extras = []
    if a["residual"] is not None:
        rb, ra = b["residual"], a["residual"]
        flat = rb is not None and abs(ra - rb) < max(1.0, 0.2 * abs(rb))
        extras.append(f"client and network {'flat at' if flat else 'at'} {_change(rb, ra, ' ms')}")
    if client_saturated:
        extras.append("the load generator was saturated (self-check): its own delay is in our latencies")
    if a["gpu_util"] is not None:
        gpu = f"GPU utilisation {_pct(b['gpu_util']) + ' -> ' if b['gpu_util'] is not None else ''}{_pct(a['gpu_util'])}"
        if a["gpu_mem"] is not None:
            gpu += f", memory {_pct(a['gpu_mem'])}"
        extras.append(gpu)
    return text + ("; " + "; ".join(extras) if extras else "")


def slo_phrase(
    summary: dict[str, Any], failing: dict[str, Any], before: dict[str, Any] | None, kind: str
) -> str:
    """'TPOT p95 passes 50 ms from 48 u (41.2 -> 63.0 ms)': the first SLO the failing point broke."""
    limits = slo_limits(summary)
    target = (summary.get("sweep") or {}).get("target", 0.95)
    pk = target_percentile(target)
    shares = (failing.get("slo") or {}).get("share_meeting") or {}
    broke = [m for m in limits if shares.get(m) is not None and shares[m] < target]
    metric = broke[0] if broke else "latency"  # no SLO alone broke (failed requests): name none
    where = load_label(failing, kind)
    if metric not in limits:
        return f"the SLOs break from {where}"
    va = None if metric == "itl" else (failing.get(metric) or {}).get(pk)
    vb = None if metric == "itl" or before is None else (before.get(metric) or {}).get(pk)
    head = f"{metric.upper()} {pk} passes {limits[metric]:g} ms from {where}"
    return head + (f" ({_change(vb, va, ' ms')})" if va is not None else "")


def knee_block(summary: dict[str, Any], points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The study's ``knee`` with its ``explanation``: the knee (last load meeting the SLOs below
    every failing one) and the first failing load above it; None without SLOs or a failing point."""
    vs = verdicts(summary, points)
    if not vs:
        return None
    kind = kind_of(points)
    knee_i = next((i for i, v in enumerate(vs) if v.knee), None)
    knee_load = vs[knee_i].load if knee_i is not None else float("-inf")
    failing = [i for i, v in enumerate(vs) if v.passed is False and v.load > knee_load]
    if not failing:
        return None
    fi = min(failing, key=lambda i: vs[i].load)
    before = points[knee_i] if knee_i is not None else None
    after = points[fi]
    return {
        "point": None if knee_i is None else vs[knee_i].index,
        kind: None if knee_i is None else vs[knee_i].load,
        "first_failing_point": vs[fi].index,
        f"first_failing_{kind}": vs[fi].load,
        "explanation": explain(
            before,
            after,
            slo_phrase(summary, after, before, kind),
            bool((summary.get("self_check") or {}).get("saturated")),
        ),
    }


def annotate(summary: dict[str, Any], extra: dict[int, dict[str, float]]) -> None:
    """Put each stage's or sweep point's ``server_metrics`` and the study's ``knee`` (with its
    ``explanation``; a sweep's own ``knee`` gets the explanation too) into the summary."""
    sweep = summary.get("sweep") or {}
    points = sweep.get("points") or summary.get("stages") or []
    if not points:
        return
    attach_window_figures(points, extra)
    if sweep and summary.get("stages") and summary["stages"] is not points:
        attach_window_figures(summary["stages"], extra)
    block = knee_block(summary, points)
    if block is None:
        return
    summary["knee"] = block
    if isinstance(sweep.get("knee"), dict):
        sweep["knee"]["explanation"] = block["explanation"]
