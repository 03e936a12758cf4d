"""The SLO sweep's search rules, pure: the stated tolerance, when the bisection stops, the next
probe, one point's pass or fail, and the over-saturation guard's two signals.

The sweep (:mod:`.sweep`) is the bisection search of issue 29 ("search the max load under an
SLO"): ``--llm-sweep concurrency|rate`` probes geometrically, then bisects between the highest
passing and the lowest failing load until the bracket is within ``--llm-sweep-tolerance``
(:class:`Tolerance`: an absolute step in the sweep's unit, users or req/s, or a share of the
load, ``5%``; default 1 user / 5%). The max load under the SLOs is then the highest passing
load, and the true limit lies in ``[lo, hi)``: within ``hi - lo <= tolerance`` above it.

Every point is judged by one function, :func:`point_passes`, from its summary (a single
measurement or, with repeats, their mean), so the search does not care how the figures came.
Its verdict has three states: pass, fail, and *not enough data* (fewer than
:data:`MIN_REQUESTS` measured requests), which is never a miss. A point whose window ends with
too few requests back is measured longer, once, when ``-t`` leaves room (:func:`lengthen_s`;
its window closes as soon as enough came back);
a point still short of data moves neither end of the bracket: the search goes on above it
(more load, more requests a second; :func:`next_load`'s ``unsure``), and when nothing is left
to probe it stops saying so (:func:`not_enough_text`). The verdict sentences
(:func:`verdict_text`, :func:`max_load_text`) never call a load a miss that was not one.

The plan: ``-t`` is split into ``--llm-sweep-points`` points; a point needs its settle window,
at least :data:`MIN_MEASURE_S` measured and the tail of its requests (:func:`point_floor_s`);
a plan whose points cannot hold that is resized at start to the points that fit
(:func:`fit_points`, :func:`plan_note`: one console line).

The guard (:func:`guard_check`) ends a point early when the load cannot be held:

- open loop: the requests in flight grow (arrivals due on the schedule outpace completions by
  more than :data:`GUARD_INFLIGHT_SHARE` of the arrivals and at least :data:`GUARD_INFLIGHT_MIN`
  requests) *and* the latency from the schedule rises with them (the later half of the measured
  requests' median >= :data:`GUARD_RISE` x the earlier half's, or most of the measured requests
  due have not come back at all): a queue that only grows;
- closed loop: the users hold the in-flight count at the user count, so it cannot grow; the
  server's queue shows in TTFT alone, so its rule is stricter: the later half's median >= 1.5x
  the earlier half's and, at that slope, more than :data:`GUARD_GROWTH` x the earlier half's
  median over the point.

No Locust, no gevent, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llm_users.errors import ConfigError
from llm_users.load.plans import SETTLE_SHARE

MIN_REQUESTS = 5
MIN_MEASURE_S = 1.0  # the shortest measurement window a sweep plans for a point
MIN_TAIL_S = 0.5  # the shortest tail after a point's window (beside the shipping delay)
LENGTHEN_MARGIN = 2.0  # a lengthened point may run twice what its rate needs (it closes when enough came back)
RATE_RESOLUTION = 0.05  # the default rate tolerance: 5% of the load
GUARD_GROWTH = 2.0
GUARD_HALF_RATIO = 1.5
GUARD_INFLIGHT_SHARE = 0.10
GUARD_INFLIGHT_MIN = 5
GUARD_RISE = 1.2  # open loop: the latency rises with the in-flight count


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How close the bisection gets: ``hi - lo <= value`` (absolute, in the sweep's unit) or
    ``hi - lo <= value * lo`` (relative). Concurrency never goes below one user."""

    value: float
    relative: bool

    def width(self, kind: str, lo: float) -> float:
        """The widest bracket that counts as converged at ``lo``."""
        w = self.value * lo if self.relative else self.value
        return max(w, 1.0) if kind == "users" else w

    def text(self, kind: str) -> str:
        """'5%', '1 user', '2 users', '0.5 req/s'."""
        if self.relative:
            return f"{self.value * 100:g}%"
        if kind == "users":
            return f"{self.value:g} user" + ("" if self.value == 1 else "s")
        return f"{self.value:g} req/s"


def default_tolerance(kind: str) -> Tolerance:
    """One user (concurrency), 5% (rate): the sweep's rule before the option existed."""
    return Tolerance(1.0, False) if kind == "users" else Tolerance(RATE_RESOLUTION, True)


def parse_tolerance(text: Any, mode: str | None) -> Tolerance | None:
    """``--llm-sweep-tolerance``: ``1`` (users, concurrency), ``0.5`` (req/s, rate) or ``5%``;
    None when not given (the default for the mode). Whole users only for concurrency."""
    if text is None or str(text).strip() == "":
        return None
    s = str(text).strip()
    rel = s.endswith("%")
    try:
        v = float(s[:-1] if rel else s)
    except ValueError:
        v = -1.0
    if rel:
        if not 0 < v <= 100:
            raise ConfigError(f"--llm-sweep-tolerance as a share must be in (0%, 100%], got {s!r}")
        return Tolerance(v / 100, True)
    if not v > 0:
        raise ConfigError(f"--llm-sweep-tolerance must be a load step > 0 (users or req/s) or a share "
                          f"such as 5%, got {s!r}")
    if mode == "concurrency" and v != int(v):
        raise ConfigError(f"--llm-sweep-tolerance for a concurrency sweep is whole users (or a share such "
                          f"as 5%), got {s!r}")
    return Tolerance(v, False)


def converged(lo: float | None, hi: float | None, kind: str, tol: Tolerance) -> bool:
    """The bracket [lo, hi) is within the tolerance (both ends measured)."""
    if lo is None or hi is None:
        return False
    return hi - lo <= tol.width(kind, lo) + 1e-9


def next_load(lo: float | None, hi: float | None, kind: str, tol: Tolerance,
              unsure: float | None = None) -> tuple[float | None, str | None]:
    """The next probe and, when there is none, why the search stops: doubling until a point
    fails, halving until one passes, then the bracket's middle until it is within ``tol``.
    ``unsure``: the highest load in ``(lo, hi)`` measured without enough data: it moves neither
    end; the search goes on above it (twice it, or the middle of it and ``hi``: more load, more
    requests a second) and stops, saying so, when nothing is left between it and ``hi``."""
    whole = kind == "users"
    if unsure is not None and (lo is None or unsure > lo) and (hi is None or unsure < hi):
        if hi is None:
            return (float(int(unsure * 2)) if whole else unsure * 2), None
        mid = float(int((unsure + hi) / 2)) if whole else (unsure + hi) / 2
        if converged(unsure, hi, kind, tol) or mid <= unsure:
            return None, not_enough_text(unsure, kind)
        return mid, None
    if hi is None:
        assert lo is not None
        return (float(int(lo * 2)) if whole else lo * 2), None
    if lo is None:
        nxt = int(hi / 2) if whole else hi / 2
        if nxt < (1 if whole else 1e-3):
            return None, "even the lowest load misses the SLOs"
        return float(nxt), None
    if converged(lo, hi, kind, tol):
        return None, "converged"
    mid = float(int((lo + hi) / 2)) if whole else (lo + hi) / 2
    if whole and mid <= lo:  # users: nothing between two neighbours
        return None, "converged"
    return mid, None


def load_text(load: float, kind: str) -> str:
    """'1 user', '16 users', '7.5 req/s'."""
    if kind == "users":
        return f"{load:g} user" + ("" if load == 1 else "s")
    return f"{load:g} req/s"


def requests_text(n: int) -> str:
    """'1 request', '2 requests'."""
    return f"{n} request" if n == 1 else f"{n} requests"


def not_enough_text(load: float, kind: str, n: int | None = None) -> str:
    """'not enough data at 1 user (2 requests measured, 5 needed): lengthen -t or use fewer
    --llm-sweep-points'."""
    got = f" ({requests_text(n)} measured, {MIN_REQUESTS} needed)" if n is not None else ""
    return (f"not enough data at {load_text(load, kind)}{got}: lengthen -t or use fewer "
            f"--llm-sweep-points")


def point_passes(point: dict[str, Any], target: float, saturated: bool = False) -> tuple[bool | None, str]:
    """One point's verdict and its reason, from its summary (``requests``, ``slo.share_meeting_all``):
    True when the share meeting every SLO >= ``target``, False below it or when the guard ended
    the point; None (not enough data, never a miss) with fewer than :data:`MIN_REQUESTS`
    measured. With repeats, pass the mean of the repeats' figures."""
    if saturated:
        return False, "over-saturated"
    n = point.get("requests") or 0
    share = (point.get("slo") or {}).get("share_meeting_all")
    if n < MIN_REQUESTS:
        return None, f"not enough data: {requests_text(n)} measured, {MIN_REQUESTS} needed"
    if share is None:
        return None, "not enough data: no SLO figures"
    return share >= target, f"{share:.1%} met the SLOs"


def verdict_word(passed: bool | None) -> str:
    """summary.json ``sweep.points[i].verdict``: 'pass', 'fail' or 'not enough data'."""
    return "pass" if passed else "fail" if passed is False else "not enough data"


def lengthen_s(n: int, seen_s: float, window_s: float, measure_s: float, room_s: float,
               rate_hint: float | None = None) -> float | None:
    """How much longer, at most, a point is measured (once; its window closes as soon as
    :data:`MIN_REQUESTS` are back), or None: enough expected, or ``-t`` leaves no room.
    ``n`` measured requests came back in the first ``seen_s`` of its ``window_s``; at that
    rate (none back: ``rate_hint``, the requests a second its load brings at the E2E seen)
    the window is expected to hold ``rate x window_s`` (each counted when it comes back, in
    the tail too); when that is short of
    :data:`MIN_REQUESTS`, the time the rate needs for the rest, twice over (at least the
    window again, ``measure_s``; four windows when nothing tells the rate). What ``room_s``
    leaves when that is less, as long as it still covers the need (one window, unknown rate)."""
    rate = n / seen_s if n > 0 and seen_s > 0 else rate_hint
    if rate:
        expected = max(n, rate * window_s)
        if expected >= MIN_REQUESTS:
            return None
        need = (MIN_REQUESTS - expected) / rate
        want = max(LENGTHEN_MARGIN * need, measure_s)
    elif n >= MIN_REQUESTS:
        return None
    else:
        need, want = measure_s, 4 * measure_s
    if room_s >= want:
        return want
    return room_s if room_s >= need else None


def point_floor_s(settle_s: float | None, ship_delay_s: float) -> float:
    """The shortest point a sweep plans: its settle window (``settle_s``, or the default share
    of the point), :data:`MIN_MEASURE_S` measured, and the shortest tail (the shipping delay
    and :data:`MIN_TAIL_S`)."""
    tail = ship_delay_s + MIN_TAIL_S
    if settle_s is None:
        return (MIN_MEASURE_S + tail) / (1 - SETTLE_SHARE)
    return settle_s + MIN_MEASURE_S + tail


def fit_points(budget_s: float, points: int, repeat: int, settle_s: float | None, ship_delay_s: float) -> int:
    """The points ``budget_s`` holds, at most ``points``, each ``repeat`` measurements of at
    least :func:`point_floor_s` (0: not even one)."""
    return min(points, int(budget_s / (repeat * point_floor_s(settle_s, ship_delay_s)) + 1e-9))


def plan_note(run_time_s: float, asked: int, fit: int, point_s: float, repeat: int = 1) -> str:
    """The start line of a resized plan: 'SLO sweep: -t 12s holds 4 points of 2.5 s (a settle
    window, at least 1 s measured and its requests' tail), not the 12 asked; sweeping 4 points
    (for more, lengthen -t)'."""
    each = f"{repeat} measurements of {point_s:.1f} s" if repeat > 1 else f"{point_s:.1f} s"
    word = "point" if fit == 1 else "points"
    return (f"SLO sweep: -t {run_time_s:g}s holds {fit} {word} of {each} (a settle window, at least "
            f"{MIN_MEASURE_S:g} s measured and its requests' tail), not the {asked} asked; sweeping {fit} "
            f"{word} (for more, lengthen -t)")


def latency_growth(samples: list[tuple[float, float]], t0: float, now: float,
                   measure_s: float) -> tuple[bool, float | None]:
    """Whether the latency samples ``(start time, latency)`` since ``t0`` climb without bound,
    and the ratio of the later half's median to the earlier half's (None: too few samples).
    The halves are of the samples (by start time), not of the clock: when the latency climbs,
    the latest requests are still running, and a half of the clock would hold none of them."""
    ordered = sorted(samples)
    a, b = ordered[:len(ordered) // 2], ordered[len(ordered) // 2:]
    if len(a) < 5 or len(b) < 5 or now - t0 < 1.0:
        return False, None
    ma, mb = sorted(v for _, v in a)[len(a) // 2], sorted(v for _, v in b)[len(b) // 2]
    if ma <= 0:
        return False, None
    ratio = mb / ma
    dt = sum(t for t, _ in b) / len(b) - sum(t for t, _ in a) / len(a)
    if dt <= 0 or ratio < GUARD_HALF_RATIO:
        return False, ratio
    return (mb - ma) / dt * measure_s > GUARD_GROWTH * ma, ratio


def inflight_growth(rate: float, ends: list[float], since: float, until: float) -> tuple[bool, float | None]:
    """Open loop: whether the requests in flight (or waiting) grew over ``[since, until]``, and
    by how many per second: arrivals due on the schedule (``rate`` x the span) less the
    completions whose end falls in it (None: the span is too short to tell)."""
    span = until - since
    if span < 1.0 or rate <= 0:
        return False, None
    due = rate * span
    done = sum(1 for e in ends if since <= e < until)
    grew = due - done
    return grew > max(GUARD_INFLIGHT_SHARE * due, GUARD_INFLIGHT_MIN), grew / span


def not_returning(samples: int, due: float) -> bool:
    """Open loop: most of the measured requests due so far have not come back (fewer than 10
    of at least 20): their latency already exceeds the window, too long to take halves of."""
    return due >= 20 and samples < 10


def guard_check(kind: str, latency: tuple[bool, float | None], inflight: tuple[bool, float | None],
                stalled: bool = False) -> dict[str, Any]:
    """The guard's verdict and its figures (summary.json ``sweep.points[i].guard``). Open loop:
    ``ended_early`` when the in-flight count grows and the latency rises with it (the later
    half's median >= :data:`GUARD_RISE` x the earlier's, or the measured requests are not
    coming back: ``stalled``, see :func:`not_returning`); closed loop: when TTFT climbs."""
    lat_up, ratio = latency
    inf_up, per_s = inflight
    rising = stalled or (ratio is not None and ratio >= GUARD_RISE)
    fired = (inf_up and rising) if kind == "rate" else lat_up
    out = {"ended_early": bool(fired), "signal": "e2e_from_schedule+in_flight" if kind == "rate" else "ttft",
           "latency_ratio": None if ratio is None else round(ratio, 3),
           "in_flight_growth_per_s": None if per_s is None else round(per_s, 2)}
    if kind == "rate" and stalled:
        out["not_returning"] = True
    return out


def guard_note(kind: str, guard: dict[str, Any]) -> str:
    """The per-point words when the guard ended the point."""
    ratio = guard.get("latency_ratio")
    r = " (its requests are not coming back)" if guard.get("not_returning") else f" ({ratio:.1f}x)" if ratio else ""
    if kind == "rate":
        g = guard.get("in_flight_growth_per_s")
        inflight = f" and the requests in flight grew by {g:.1f}/s" if g is not None else ""
        return f"over-saturated: latency from the schedule grew without bound{r}{inflight}; point ended early"
    return f"over-saturated: TTFT grew without bound{r} (the users hold the in-flight count); point ended early"


def _unsure(sweep: dict[str, Any]) -> list[dict[str, Any]]:
    """The points judged without enough data."""
    return [p for p in sweep.get("points") or [] if p.get("verdict") == "not enough data"]


def max_load_text(sweep: dict[str, Any]) -> str | None:
    """'max load under the SLOs: 21 users (within +-1 user: 22 failed)', or None (no sweep).
    A load measured without enough data is named as such, never as failed."""
    if not sweep:
        return None
    kind = "users" if sweep.get("mode") == "concurrency" else "rate"
    key = "concurrency" if kind == "users" else "rate"
    unit = " users" if kind == "users" else " req/s"
    tol = sweep.get("tolerance") or {}
    tol_text = tol.get("text", "?")
    lo, hi = (sweep.get("bracket") or [None, None])[:2]
    short = [p for p in _unsure(sweep) if (lo is None or p[key] > lo) and (hi is None or p[key] < hi)]
    extra = f"; not enough data at {', '.join(load_text(p[key], kind) for p in short)}" if short else ""
    if lo is None and hi is None:
        why = extra[2:] if extra else "no point was judged"
        return f"max load under the SLOs: not known ({why})"
    if lo is None:
        what = "lowest probed load failed" if not short else f"{hi:g}{unit} failed"
        return f"max load under the SLOs: none found ({what}; tolerance {tol_text}{extra})"
    if hi is None:
        return (f"max load under the SLOs: at least {lo:g}{unit} (no probed load failed; "
                f"not within +-{tol_text}{extra})")
    if sweep.get("converged"):
        return f"max load under the SLOs: {lo:g}{unit} (within +-{tol_text}: {hi:g} failed)"
    return (f"max load under the SLOs: {lo:g}{unit}, not yet within +-{tol_text} "
            f"(between {lo:g} and {hi:g}; {sweep.get('stopped')}{extra})")


def verdict_text(sweep: dict[str, Any]) -> str:
    """The sweep's verdict when no load met the SLOs, true to its points: 'no load met the
    SLOs' only when a point failed; 'not enough data at 1 user (2 requests measured, 5
    needed): ...' when none failed and a point was short of data; 'no point was measured'."""
    kind = "users" if sweep.get("mode") == "concurrency" else "rate"
    key = "concurrency" if kind == "users" else "rate"
    points = sweep.get("points") or []
    short = _unsure(sweep)
    if any(p.get("verdict") == "fail" for p in points):
        hi = (sweep.get("bracket") or [None, None])[1]
        below = [p[key] for p in short if hi is None or p[key] < hi]  # the search's own (next_load)
        tail = f" ({not_enough_text(max(below), kind)})" if below else ""
        return f"no load met the SLOs{tail}"
    if short:
        top = max(short, key=lambda p: p[key])
        return not_enough_text(top[key], kind, top.get("requests") or 0)
    return "no point was judged (the run stopped first)" if points else "no point was measured"
