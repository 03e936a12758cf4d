"""What a run's records say: the clients' per-request records loaded, their stamps against the
simulator's trace (TTFT and ITL errors, chunk rates), our client's loop-lag trace lined up with
its late stamps, and the percentile and median they are read with."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson


def ours_stamps(d: dict[str, Any]) -> tuple[str, int, list[int]] | None:
    """One of our requests.jsonl records as (request id, t0_ns, absolute perf_counter_ns stamps
    of its token-bearing chunks: t0 + TTFT, then the ITL gaps); None when it had no token."""
    if d.get("ttft_ns") is None:
        return None
    t = d["t0_ns"] + d["ttft_ns"]
    stamps = [t]
    for gap in d["itl_ns"]:
        t += gap
        stamps.append(t)
    return d["request_id"], d["t0_ns"], stamps


def load_client_records(kind: str, path: Path) -> list[tuple[str, int, list[int]]]:
    """(request id, t0_ns, absolute stamps of the token-bearing chunks) per request."""
    out: list[tuple[str, int, list[int]]] = []
    if not path.exists():
        return out
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            d = orjson.loads(line)
            if kind != "ours":
                out.append((d["id"], d["t0"], d["chunks"]))
            elif (stamped := ours_stamps(d)) is not None:
                out.append(stamped)
    return out


def pct(values: list[int], p: float) -> float | None:
    """Nearest-rank percentile in ms of values in ns."""
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k] / 1e6


def median(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def analyse(records: list[tuple[str, int, list[int]]], trace: list[dict[str, Any]], ws: int, we: int,
            itl_ms: float) -> dict[str, Any]:
    """Client stamps against the simulator's, for chunks stamped inside the window [ws, we)."""
    truth: dict[str, list[int]] = {}
    sim_chunks = 0
    sim_gaps: list[int] = []
    for t in trace:
        if "times_ns" in t:  # GET /_sim/trace?compact=1
            times = [x for x, k in zip(t["times_ns"], t["tokens"], strict=True) if k > 0]
        else:
            times = [c[0] for c in t.get("chunks") or () if c[1] > 0]
        truth[t["request_id"]] = times
        for i, x in enumerate(times):
            if ws <= x < we:
                sim_chunks += 1
                if i:
                    sim_gaps.append(x - times[i - 1])
    ttft_err: list[int] = []
    itl_err: list[int] = []
    lag: list[int] = []
    chunks = unmatched = count_mismatch = 0
    requests_in_window = 0
    for rid, t0, c in records:
        chunks += sum(1 for x in c if ws <= x < we)
        requests_in_window += ws <= t0 < we
        s = truth.get(rid)
        if s is None:
            unmatched += 1
            continue
        if len(s) != len(c):
            count_mismatch += 1
        m = min(len(s), len(c))
        if m and ws <= c[0] < we:
            ttft_err.append(c[0] - s[0])
        for k in range(m):
            if ws <= c[k] < we:
                lag.append(c[k] - s[k])
                if k:
                    itl_err.append((c[k] - c[k - 1]) - (s[k] - s[k - 1]))
    win_s = (we - ws) / 1e9
    return {
        "requests": len(records),
        "requests_in_window": requests_in_window,
        "unmatched": unmatched,
        "chunk_count_mismatch": count_mismatch,
        "chunks": chunks,
        "chunks_per_s": chunks / win_s,
        "sim_chunks_per_s": sim_chunks / win_s,
        "sim_gap_p50_ms": pct(sim_gaps, 50),
        "sim_gap_p99_ms": pct(sim_gaps, 99),
        "sim_late": (pct(sim_gaps, 50) or itl_ms) > 1.05 * itl_ms,
        "ttft_err_n": len(ttft_err),
        "ttft_err_p50_ms": pct(ttft_err, 50),
        "ttft_err_p99_ms": pct(ttft_err, 99),
        "ttft_err_p999_ms": pct(ttft_err, 99.9),
        "ttft_err_max_ms": max(ttft_err) / 1e6 if ttft_err else None,
        "ttft_err_min_ms": min(ttft_err) / 1e6 if ttft_err else None,  # < 0: a stamp before the write
        "itl_err_n": len(itl_err),
        "itl_err_p50_ms": pct(itl_err, 50),
        "itl_err_p99_ms": pct(itl_err, 99),
        "itl_err_p999_ms": pct(itl_err, 99.9),
        "chunk_delay_p50_ms": pct(lag, 50),
        "chunk_delay_p99_ms": pct(lag, 99),
        "chunk_delay_max_ms": max(lag) / 1e6 if lag else None,
        "chunk_delay_min_ms": min(lag) / 1e6 if lag else None,  # < 0: a chunk stamped before the write
    }


def lag_figures(path: Path, records: list[tuple[str, int, list[int]]], trace: list[dict[str, Any]], ws: int,
                we: int, ttft_p99_ms: float | None, late_bound_ms: float = 1.0) -> dict[str, Any]:
    """Our client's loop-lag trace (the self-check's probes, gc passes, our periodic work; see
    llm_users/health/lagtrace.py) over the window, and the late first-token stamps lined up with it:
    each stamp in the TTFT error tail (at or above the run's p99, at least 1 ms late) is put to
    the event that overlaps [simulator write, client stamp] most (``late_bound_ms`` lowers the
    1 ms floor, to name sub-millisecond tails); when none does, to whether
    the loop was seen blocked then (a late probe) or not (the stamp queued behind other
    ready work: CPU)."""
    out: dict[str, Any] = {"loop_lag_p99_ms": None, "loop_lag_p999_ms": None, "loop_lag_max_ms": None}
    if not path.exists():
        return out
    from bench.lib.llm_imports import OFF_CPU, LagTrace

    lt = LagTrace.from_dict(orjson.loads(path.read_bytes()))
    lags = [lag for due, lag in zip(lt.probe_due, lt.probe_lag, strict=True) if ws <= due < we]
    out.update({"loop_lag_p99_ms": pct(lags, 99), "loop_lag_p999_ms": pct(lags, 99.9),
                "loop_lag_max_ms": max(lags) / 1e6 if lags else None, "loop_probes": len(lags)})
    gcs: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for st, en, g in zip(lt.gc_start, lt.gc_end, lt.gc_gen, strict=True):
        if ws <= st < we:
            t = gcs[f"gen{g}"]
            t[0] += 1
            t[1] += (en - st) / 1e6
            t[2] = max(t[2], (en - st) / 1e6)
    out["gc_passes_over_0_1ms"] = {k: {"count": v[0], "total_ms": round(v[1], 3), "max_ms": round(v[2], 3)}
                                   for k, v in sorted(gcs.items())}
    spans: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for i, st, en in zip(lt.span_id, lt.span_start, lt.span_end, strict=True):
        if ws <= st < we:
            t = spans[lt.names[i]]
            t[0] += 1
            t[1] += (en - st) / 1e6
            t[2] = max(t[2], (en - st) / 1e6)
    out["tasks_over_0_1ms"] = {k: {"count": v[0], "total_ms": round(v[1], 3), "max_ms": round(v[2], 3)}
                               for k, v in sorted(spans.items(), key=lambda kv: -kv[1][1])[:12]}
    truth: dict[str, int] = {}
    for t in trace:
        times = t.get("times_ns") or [c[0] for c in t.get("chunks") or ()]
        toks = t.get("tokens") or [c[1] for c in t.get("chunks") or ()]
        first = next((x for x, k in zip(times, toks, strict=True) if k > 0), None)
        if first is not None:
            truth[t["request_id"]] = first
    bound = max(int(late_bound_ms * 1e6), int((ttft_p99_ms or 0) * 1e6))
    causes: dict[str, int] = defaultdict(int)
    late_probes = [(d, d + g, i) for i, (d, g) in enumerate(zip(lt.probe_due, lt.probe_lag, strict=True))
                   if g >= lt.late_ns]
    for rid, _t0, stamps in records:
        s0 = truth.get(rid)
        if s0 is None or not stamps or not ws <= stamps[0] < we or stamps[0] - s0 < bound:
            continue
        cause = lt.cause(s0, stamps[0])
        if cause == "unattributed":
            blocked = [i for a, b, i in late_probes if a < stamps[0] and b > s0]
            if not blocked:
                cause = "no loop stall (queued behind ready work)"
            elif any(lt.probe_cause(i) == OFF_CPU for i in blocked):
                cause = OFF_CPU
            else:
                cause = "loop blocked, cause unknown"
        causes[cause] += 1
    out["late_ttft_bound_ms"] = bound / 1e6
    out["late_ttft_causes"] = dict(sorted(causes.items(), key=lambda kv: -kv[1]))
    return out
