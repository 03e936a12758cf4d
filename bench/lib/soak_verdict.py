"""The soak's pure parts (bench/soak.py, issue 33 item 7): the mixed closed/open stage plans,
the flatness verdict on each process's RSS and open fds after warm-up, and the records-vs-served
accounting. No I/O, no processes: tests/test_soak_verdict.py checks them on synthetic series.

Flatness: RSS is judged on its *slope*, not on a band: the Theil-Sen estimate (the median of the
slopes between every pair of samples) after the warm-up, in percent of the median RSS per hour.
A band (max - min within 10 %) passes a slow leak in a short run and fails a flat process that
had one spike in a long one; a least-squares slope is pulled by a spike too. Theil-Sen ignores
up to 29 % of outliers. Open fds follow the load, so they are compared phase by phase at equal
load: no later phase of a kind may have a higher floor than the first one (``fds_by_phase``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: RSS may grow at most this many percent of itself per hour after warm-up
RSS_BOUND_PCT_PER_H = 1.0


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of the soak: who runs (``closed``, ``open`` or ``mixed``: both) and for how long."""

    kind: str
    start_s: float
    duration_s: float


def phases(duration_s: float, phase_s: float) -> list[Phase]:
    """Closed-loop and open-loop phases taking turns, ``phase_s`` each, about ``duration_s`` in
    all (at least 2 phases), the last one ``mixed`` (both runs on): a stage plan whose last
    stage has no load would hold the run for its tail until a request comes back, which none
    does (at most 60 s)."""
    if phase_s <= 0 or duration_s <= 0:
        raise ValueError("the duration and the phase must be > 0")
    n = max(2, round(duration_s / phase_s))
    out = []
    for i in range(n):
        kind = "mixed" if i == n - 1 else ("closed" if i % 2 == 0 else "open")
        out.append(Phase(kind, i * phase_s, phase_s))
    return out


def _fmt(x: float) -> str:
    return f"{x:g}"


def stage_plan(plan: Sequence[Phase], run: str, low: float, high: float) -> str:
    """The ``--llm-stages`` text of one run (``closed``: users, ``open``: requests/s): in each
    of its own phases the load steps from ``low`` to ``high`` (two stages, half the phase each);
    in the other run's phases it is 0; in the ``mixed`` last phase it is ``low``."""
    stages: list[tuple[float, float]] = []
    for p in plan:
        if p.kind == "mixed":
            stages.append((low, p.duration_s))
        elif p.kind == run:
            stages += [(low, p.duration_s / 2), (high, p.duration_s / 2)]
        else:
            stages.append((0.0, p.duration_s))
    merged: list[tuple[float, float]] = []
    for load, d in stages:  # two idle phases never follow each other, but keep the plan short anyway
        if merged and merged[-1][0] == load:
            merged[-1] = (load, merged[-1][1] + d)
        else:
            merged.append((load, d))
    return ",".join(f"{_fmt(load)}:{_fmt(round(d, 3))}s" for load, d in merged)


def theil_sen(points: Sequence[tuple[float, float]]) -> float:
    """Median of the slopes between every pair of points with distinct x (0.0 when there are
    fewer than two)."""
    slopes = []
    for i, (x1, y1) in enumerate(points):
        for x2, y2 in points[i + 1:]:
            if x2 != x1:
                slopes.append((y2 - y1) / (x2 - x1))
    if not slopes:
        return 0.0
    slopes.sort()
    n = len(slopes)
    return slopes[n // 2] if n % 2 else (slopes[n // 2 - 1] + slopes[n // 2]) / 2


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


#: an idle connection pool may keep a connection or two more after a rare burst (open loop, SDK
#: pools); a leak grows with every cycle and passes this within a few
FD_SLACK = 2


def fds_by_phase(
    samples: Sequence[tuple[float, int]], plan: Sequence[Phase], warmup_s: float, fd_slack: int = FD_SLACK,
) -> dict[str, Any]:
    """Open fds follow the load (a closed-loop user holds a connection, a stopped one closes it,
    an open-loop pool grows to its busiest moment), so they are compared at equal load: per
    phase kind, every phase that lies wholly after the warm-up against the first such phase of
    its kind, on its *floor* (the fewest fds in the phase): a leaked fd is never closed, so it
    raises the floor of every later phase, while the peak moves with the bursts. ``constant``
    when no later floor exceeds the first by more than ``fd_slack``. ``judged`` needs two
    phases of one kind (the ``mixed`` last phase has no partner)."""
    per_kind: dict[str, list[tuple[int, int]]] = {}
    for p in plan:
        if p.kind == "mixed" or p.start_s < warmup_s:
            continue
        fds = [f for t, f in samples if p.start_s <= t < p.start_s + p.duration_s]
        if fds:
            per_kind.setdefault(p.kind, []).append((min(fds), max(fds)))
    judged = any(len(v) >= 2 for v in per_kind.values())
    growth = max((lo - ranges[0][0] for ranges in per_kind.values() for lo, _ in ranges[1:]), default=0)
    return {"fds_judged": judged, "fds_floor_growth": growth, "fds_constant": judged and growth <= fd_slack,
            "fds_by_phase_kind": {k: [list(r) for r in v] for k, v in per_kind.items()}}


def flatness(
    samples: Iterable[tuple[float, float | None, int | None]],
    warmup_s: float,
    rss_bound_pct_per_h: float = RSS_BOUND_PCT_PER_H,
    fd_slack: int = FD_SLACK,
    plan: Sequence[Phase] | None = None,
    end_s: float | None = None,
) -> dict[str, Any]:
    """One process's verdict from its ``(t_s, rss_mb, fds)`` samples (None: not readable then).

    Only samples at ``warmup_s <= t_s <= end_s`` count (``end_s``: the plan's end; after it the
    runs write their reports, a peak that is not a leak). ``rss_slope_pct_per_h``: the Theil-Sen
    slope in percent of the median RSS per hour; flat when it is at most ``rss_bound_pct_per_h``
    (a shrinking process is flat). fds: with ``plan``, compared phase by phase at equal load
    (:func:`fds_by_phase`); without one, constant when max - min <= ``fd_slack``. ``judged`` is
    False (and so is ``flat``) with fewer than 3 samples after warm-up."""
    every = [(t, r, f) for t, r, f in samples if r is not None]
    after = [(t, r, f) for t, r, f in every if t >= warmup_s and (end_s is None or t <= end_s)]
    out: dict[str, Any] = {"samples": len(after), "warmup_s": warmup_s, "judged": len(after) >= 3,
                           "rss_peak_mb": round(max((r for _, r, _ in every), default=0.0), 2)}
    if not after:
        out.update(flat=False, rss_flat=False, fds_constant=False)
        return out
    rss = [(t / 3600.0, r) for t, r, _ in after]
    level = _median([r for _, r in rss])
    slope_mb_h = theil_sen(rss)
    pct = 100.0 * slope_mb_h / level if level > 0 else 0.0
    fds = [f for _, _, f in after if f is not None]
    rss_flat = pct <= rss_bound_pct_per_h
    out.update(
        window_s=round(after[-1][0] - after[0][0], 1),
        rss_first_mb=round(after[0][1], 2), rss_last_mb=round(after[-1][1], 2),
        rss_min_mb=round(min(r for _, r in rss), 2), rss_max_mb=round(max(r for _, r in rss), 2),
        rss_median_mb=round(level, 2), rss_slope_mb_per_h=round(slope_mb_h, 3),
        rss_slope_pct_per_h=round(pct, 3), rss_bound_pct_per_h=rss_bound_pct_per_h, rss_flat=rss_flat,
        fds_first=fds[0] if fds else None, fds_last=fds[-1] if fds else None,
        fds_min=min(fds) if fds else None, fds_max=max(fds) if fds else None, fd_slack=fd_slack,
    )
    if plan is not None:
        out.update(fds_by_phase([(t, f) for t, _, f in after if f is not None], plan, warmup_s, fd_slack))
    else:
        out["fds_constant"] = bool(fds) and max(fds) - min(fds) <= fd_slack
    out["flat"] = out["judged"] and rss_flat and out["fds_constant"]
    return out


def accounting(records: Iterable[Mapping[str, Any]], sim_stats: Mapping[str, Any]) -> dict[str, Any]:
    """Records (every run's requests.jsonl, merged on each master) against the simulator's
    ``/_sim/stats``. Every request the simulator started is one record, none twice: ``ok``
    records == ``served``; the ones cut by a stop (a stage's users stopped, the run's end) are
    ``interrupted`` records, which the simulator counts as ``aborted``; failed ones (status
    ``error``) are its ``errors`` plus any it counted aborted for a client-side failure.
    ``exact`` when records == started, ok == served and no request_id repeats."""
    by_status: dict[str, int] = {}
    ids: set[str] = set()
    dupes = total = 0
    for r in records:
        total += 1
        st = str(r.get("status", "ok"))
        by_status[st] = by_status.get(st, 0) + 1
        rid = r.get("request_id")
        if rid in ids:
            dupes += 1
        elif rid is not None:
            ids.add(str(rid))
    started, served = int(sim_stats.get("started", 0)), int(sim_stats.get("served", 0))
    ok = by_status.get("ok", 0)
    out = {
        "records": total, "records_by_status": dict(sorted(by_status.items())), "duplicates": dupes,
        "sim_started": started, "sim_served": served, "sim_aborted": int(sim_stats.get("aborted", 0)),
        "sim_errors": int(sim_stats.get("errors", 0)), "sim_in_flight_at_end": int(sim_stats.get("active", 0)),
        "ok_equals_served": ok == served, "records_equal_started": total == started,
        "cut_by_stop": by_status.get("interrupted", 0),
    }
    out["exact"] = out["ok_equals_served"] and out["records_equal_started"] and dupes == 0
    return out


def leftovers(seen: Mapping[int, int], alive: Mapping[int, int | None]) -> list[int]:
    """Pids of the run's processes still there at the end: seen during the soak (pid -> start
    time in clock ticks) and alive now with the same start time (a reused pid is another
    process)."""
    return sorted(pid for pid, start in seen.items() if alive.get(pid) == start)
