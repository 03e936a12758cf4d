"""The SLO sweep: the highest load at which the share of requests meeting every SLO stays at or
above a target (``--llm-sweep concurrency|rate`` with ``--llm-slo``).

A Locust ``LoadTestShape`` run where the merged view is (master or local runner). Each point
is a stage of the :class:`~.stages.StageBook`: a settle window (excluded), a measurement
window, then a *tail* during which the load stays on (requests started in it are excluded)
until the measured requests have all come in: the shipping interval (distributed) plus 1.5x
the slowest E2E seen at the point. The point passes when at least :data:`MIN_REQUESTS`
requests were measured and the share meeting every SLO is >= the target.

Search (the bisection search of issue 29; the rules are pure, in :mod:`.search`): geometric
probe from ``--llm-sweep-start`` (x2 per point) until a point fails, then bisection between the
highest passing and lowest failing load, until the bracket is within ``--llm-sweep-tolerance``
(default one user for concurrency, 5% for rate). ``-t`` is the whole budget: it is split
into ``--llm-sweep-points`` equal points (fewer when they cannot each hold a settle window,
:data:`~.search.MIN_MEASURE_S` measured and a tail: :func:`~.search.fit_points`, said at start in
``plan_note``); the sweep stops early when the budget cannot hold another point, and says so.
Each point is judged by :func:`~.search.point_passes`: pass, fail or not enough data (fewer than
:data:`MIN_REQUESTS` measured). A point whose window ends with fewer than that back is measured
longer, once, when the budget leaves room (:func:`~.search.lengthen_s`); one still short of data
moves neither end of the bracket (``unsure``: the search goes on above it). With
``--llm-repeat K`` each point is measured K times in a row (each repeat a stage of the book,
``-t`` split into points x K measurements), judged on the mean over its repeats of the share
meeting every SLO (:func:`~.repeats.passes_on_mean`, through the same ``point_passes``; an
over-saturated repeat fails the point at once), and reported pooled with its ``ci``, its
``repeats`` and the knee's interval (:func:`~.repeats.knee_interval`).
Over-saturation guard (:func:`~.search.guard_check`): a point ends early, failed, when its
latency (TTFT in closed loop; E2E from the schedule in open loop) climbs without bound and, in
open loop, the requests in flight grow too (arrivals due outpace completions); every point
carries the guard's figures (``guard``).
"""

from __future__ import annotations

import math
import time
from typing import Any

from locust import LoadTestShape

from llm_users.errors import ConfigError
from llm_users.load.search import (  # noqa: F401 - MIN_REQUESTS, RATE_RESOLUTION, GUARD_GROWTH: their home is search.py
    GUARD_GROWTH,
    MIN_REQUESTS,
    RATE_RESOLUTION,
    Tolerance,
    default_tolerance,
    fit_points,
    guard_check,
    guard_note,
    inflight_growth,
    latency_growth,
    lengthen_s,
    max_load_text,
    next_load,
    not_returning,
    plan_note,
    point_floor_s,
    point_passes,
    requests_text,
    verdict_text,
    verdict_word,
)
from llm_users.load.stages import StageBook, StageRecord, stage_summary

DEFAULT_POINTS = 12
DRAIN_MAX_S = 30.0
TICK_S = 1.0  # Locust asks the shape every second


class SweepShape(LoadTestShape):
    abstract = False

    def __init__(self, *, kind: str, book: StageBook, on_point: Any, budget_s: float, start: float, target: float,
                 points: int, ship_delay_s: float, settle_s: float | None = None,
                 tolerance: Tolerance | None = None, repeat: int = 1, run_time_s: float | None = None) -> None:
        super().__init__()
        fit = fit_points(budget_s, points, repeat, settle_s, ship_delay_s)
        run_time_s = run_time_s if run_time_s is not None else budget_s
        if fit < 1:
            floor = point_floor_s(settle_s, ship_delay_s) * repeat
            raise ConfigError(f"--llm-sweep: -t {run_time_s:g}s cannot hold one point (a settle window, at least "
                              f"1 s measured and its requests' tail: {floor:.1f} s"
                              + (f" x {repeat} repeats" if repeat > 1 else "")
                              + f"); give -t {math.ceil(run_time_s - budget_s + floor)}s or longer")
        self.points_asked = points
        points = fit
        self.kind = kind  # "users" | "rate"
        self.book = book
        self.on_point = on_point
        self.budget_s = budget_s
        self.start_load = start
        self.target = target
        self.max_points = points
        self.tolerance = tolerance or default_tolerance(kind)
        self.ship_delay_s = ship_delay_s
        self.repeat = repeat  # --llm-repeat: measurements per point
        self._reps: list[int] = []  # the current point's earlier repeats (book indices)
        self.point_s = budget_s / (points * repeat)
        self.plan_note = None if fit == self.points_asked else plan_note(run_time_s, self.points_asked, fit,
                                                                          self.point_s, repeat)
        self.settle_s = settle_s if settle_s is not None else 0.2 * self.point_s
        self.tail_est_s = ship_delay_s + 2.0  # the shipping delay, the slowest E2E, the 1 s tick
        self.measure_s = max(self.point_s - self.settle_s - self.tail_est_s, 0.5 * self.point_s)
        self.results: list[dict[str, Any]] = []
        self.lo: float | None = None
        self.hi: float | None = None
        self.unsure: list[float] = []  # loads judged without enough data
        self._lengthened: float | None = None  # seconds the point's window was lengthened by (None: not decided)
        self._short: tuple[int, float, float] = (0, 0.0, 0.0)  # when lengthened: requests, seconds, first end
        self.stopped: str | None = None
        self._cur: StageRecord | None = None
        self._load: float = start
        self._growth: list[tuple[float, float]] = []
        self._ends: list[float] = []  # open loop: when each request ended (completions, for in-flight)
        self._guard: dict[str, Any] = {}
        self._point_done = 0  # records of the current point, every status (drain)
        self._last_seen = 0.0  # when the last of them came in
        self._drain: tuple[float, float, float] | None = None  # (next load, arrivals due, since)
        self._e2e_max_ns = 0
        self._started_at: float | None = None

    # records of the current point (from the collector's record hook) --------------------------
    def see(self, rec: Any) -> None:
        cur = self._cur
        if cur is None:
            return
        if self.kind == "rate":  # every completion counts against the arrivals due (in flight)
            self._ends.append(rec.start_time + (rec.e2e_ns or 0) / 1e9)
        if rec.stage == cur.index:
            self._point_done += 1
            self._last_seen = time.time()
        if rec.stage != cur.index or not rec.ok:
            return
        if rec.e2e_ns:  # every request of the point (settle window too) tells how long to wait
            self._e2e_max_ns = max(self._e2e_max_ns, rec.e2e_ns)
        if rec.warmup or not (cur.measured_start <= rec.start_time < (cur.measure_end or float("inf"))):
            return
        if rec.ttft_ns is not None and rec.e2e_ns is not None:
            if rec.scheduled_ns is not None:  # open loop: the wait from the schedule
                self._growth.append((rec.start_time, rec.t0_ns - rec.scheduled_ns + rec.e2e_ns))
            else:  # closed loop: the server's queue shows in TTFT
                self._growth.append((rec.start_time, rec.ttft_ns))

    # the shape ----------------------------------------------------------------------------------
    def tick(self) -> tuple[int, float] | None:
        now = time.time()
        if self._cur is None and not self.results and not self.stopped:
            self._started_at = now
            self._begin(self.start_load, now)
        if self.stopped:
            return None
        cur = self._cur
        assert cur is not None and cur.measure_end is not None
        if self._drain is not None:
            self._drained(now)
        elif now < cur.measure_end and self._saturated(now):
            cur.measure_end = now
            cur.note = guard_note(self.kind, self._guard)
            self._judge(now, saturated=True)
        else:
            if self._lengthened is None and now >= cur.measure_end - TICK_S:  # the window's last tick
                self._lengthen(now)
            elif self._lengthened and now < cur.measure_end and self._measured_n(now)[0] >= MIN_REQUESTS:
                self._lengthened = now - self._short[2]  # enough came back: the window closes now
                cur.measure_end = now
                cur.note = self._lengthened_note()
            if now >= cur.measure_end:
                tail = self.ship_delay_s + max(1.5 * self._e2e_max_ns / 1e9, 0.5)
                if now >= cur.measure_end + min(tail, 60.0) or self._budget_left(now) <= 0:
                    self._judge(now)
        if self.stopped:
            self.book.finish(now)
            return None
        return self._users()

    def _users(self) -> tuple[int, float]:
        if self.kind == "rate":
            return 0, 1.0
        n = int(self._load)
        return n, float(max(n, 1))

    def _budget_left(self, now: float) -> float:
        return self.budget_s - (now - (self._started_at or now))

    def _begin(self, load: float, now: float) -> None:
        self._load = load
        self._growth = []
        self._ends = []
        self._guard = {}
        self._point_done = 0
        self._e2e_max_ns = 0
        self._lengthened = None
        self._cur = self.book.begin(self.kind, load, now, self.settle_s, self.measure_s)
        self.on_point(self.kind, load)

    def _measured_n(self, now: float) -> tuple[int, float]:
        """The point's measured requests back so far and the seconds they were measured in up
        to ``now`` (its repeats' windows too)."""
        cur = self._cur
        assert cur is not None
        earlier = [self.book.stages[i] for i in self._reps]
        n = sum(st.figures()[0].requests for st in [*earlier, cur])
        return n, now - cur.measured_start + sum(st.measured_s(now) for st in earlier)

    def _lengthen(self, now: float) -> None:
        """At the window's last tick, fewer than :data:`MIN_REQUESTS` measured requests back
        (over the point's repeats): measure it longer, once, when the budget leaves room
        (:func:`~.search.lengthen_s`: when the rate seen, or with none back the rate its load
        brings at the slowest E2E seen or at least the time the point has waited, leaves its
        window short of them); the window closes as soon as enough came back. Decided before the window ends, so that it stays one window: no
        request started after its first end has been left out yet; on the figures up to the
        shipping delay ago (a worker's records of the last seconds are still on their way),
        none when the window is shorter than that delay."""
        cur = self._cur
        assert cur is not None and cur.measure_end is not None
        self._lengthened = 0.0
        if len(self._reps) + 1 < self.repeat or now > cur.measure_end:  # an earlier repeat; a late tick
            return
        seen = now - self.ship_delay_s  # the records of requests ended since may not have arrived yet
        n, so_far = self._measured_n(seen)
        e2e_s = max(self._e2e_max_ns, self.book.e2e_max_ns) / 1e9
        if cur.returned == 0:  # nothing came back since the point began: they take at least this long
            e2e_s = max(e2e_s, seen - cur.start)
        hint = self._load if self.kind == "rate" else self._load / e2e_s if e2e_s > 0 else None
        window = so_far + cur.measure_end - seen  # the point's whole window (its repeats' too)
        ext = lengthen_s(n, so_far, window, self.measure_s, self._budget_left(now) - self.tail_est_s, hint)
        if ext is None:
            return
        self._lengthened = ext
        self._short = (n, so_far, cur.measure_end)
        cur.measure_end += ext
        cur.note = self._lengthened_note()

    def _lengthened_note(self) -> str:
        n, so_far, _ = self._short
        return (f"lengthened by {self._lengthened or 0:.1f} s: {requests_text(n)} measured in its first {so_far:.1f} s, "
                f"{MIN_REQUESTS} needed")

    def _saturated(self, now: float) -> bool:
        """The guard (:func:`~.search.guard_check`) on the measured requests so far: latency
        climbing without bound and, in open loop, the requests in flight growing too."""
        cur = self._cur
        assert cur is not None
        t0 = cur.measured_start
        lat = latency_growth(self._growth, t0, now, self.measure_s)
        inf, stalled = (False, None), False
        if self.kind == "rate":
            until = now - self.ship_delay_s
            inf = inflight_growth(self._load, self._ends, t0, until)
            stalled = not_returning(len(self._growth), self._load * (until - t0))
        self._guard = guard_check(self.kind, lat, inf, stalled)
        return bool(self._guard["ended_early"])

    def _judge(self, now: float, saturated: bool = False) -> None:
        cur = self._cur
        assert cur is not None
        if self._another_repeat(now, saturated):
            return
        passed, reason = point_passes(stage_summary(cur, now), self.target, saturated)
        reps = self._reps + [cur.index]
        if len(reps) > 1 and not saturated:
            passed, reason = self._judge_repeats(reps, now)
        self._reps = []
        guard = self._guard or guard_check(self.kind, (False, None), (False, None))
        self.results.append({"index": cur.index, "load": cur.load, "passed": passed, "reason": reason,
                             "repeats": reps, "guard": guard, "lengthened_s": round(self._lengthened or 0.0, 2)})
        load = cur.load
        if passed:
            self.lo = load if self.lo is None else max(self.lo, load)
        elif passed is False:
            self.hi = load if self.hi is None else min(self.hi, load)
        else:  # not enough data: no end of the bracket moves
            self.unsure.append(load)
        nxt = self._next()
        if nxt is None:
            return
        need = 0.8 * self.point_s * self.repeat  # a new point's K measurements
        if self._budget_left(now) < need or len(self.results) >= self.max_points:
            self.stopped = "budget used" if self._budget_left(now) < need else "point limit reached"
            return
        if saturated and self.kind == "rate":  # its backlog must not spill into the next point
            self._drain = (nxt, cur.load * (now - cur.start), now)
            self.on_point(self.kind, 0.0)
            return
        self._begin(nxt, now)

    def _drained(self, now: float) -> None:
        """Open loop, after the guard ended a point: no arrivals (rate 0) until that point's
        requests have come back (all but 5%, or 5, of those due; or, since a late client may
        not have sent them all, none came in for a while once they had started to), at most
        :data:`DRAIN_MAX_S` or what the budget allows; then the next point begins from an empty
        queue."""
        assert self._drain is not None
        nxt, due, since = self._drain
        waited = now - since
        quiet = self.ship_delay_s + max(1.0, 0.5 * self._e2e_max_ns / 1e9)
        back = waited >= self.ship_delay_s and (self._point_done >= due - max(0.05 * due, 5)
                                                or since < self._last_seen < now - quiet)
        if not (back or waited >= min(DRAIN_MAX_S, 2 * self.point_s)
                or self._budget_left(now) < 0.8 * self.point_s):
            return
        self._drain = None
        if self.results:
            self.results[-1]["guard"] = {**self.results[-1]["guard"], "drain_s": round(waited, 2),
                                         "drained": back}
        if self._budget_left(now) < 0.8 * self.point_s:
            self.stopped = "budget used"
            return
        self._begin(nxt, now)

    def _another_repeat(self, now: float, saturated: bool) -> bool:
        """--llm-repeat: measure the current point again (same load) while it has fewer than K
        repeats, none over-saturated and the budget holds one more measurement."""
        cur = self._cur
        assert cur is not None
        if saturated or len(self._reps) + 1 >= self.repeat or self._budget_left(now) < 0.8 * self.point_s:
            return False
        self._reps.append(cur.index)
        self._begin(cur.load, now)
        return True

    def _judge_repeats(self, reps: list[int], now: float) -> tuple[bool, str]:
        """A repeated point: :func:`~.search.point_passes` on the mean over its repeats of the
        share meeting every SLO (:func:`~.repeats.passes_on_mean`) and their requests together."""
        from llm_users.load.repeats import passes_on_mean

        summaries = [stage_summary(self.book.stages[i], now) for i in reps]
        _, mean = passes_on_mean(summaries, self.target, MIN_REQUESTS)
        total = sum(x["requests"] for x in summaries)
        passed, reason = point_passes({"requests": total, "slo": {"share_meeting_all": mean}}, self.target)
        return passed, (f"{reason} (mean of {len(reps)} repeats)" if passed or reason.endswith("met the SLOs")
                        else reason)

    def _measured(self, now: float | None) -> list[tuple[StageRecord, dict[str, Any]]]:
        """Each point's last stage and its summary: with repeats, its repeats pooled with ``ci``
        and ``repeats`` (load/repeats.py), ``index`` the point's number."""
        if self.repeat == 1:
            return [(st, stage_summary(st, now)) for st in self.book.stages]
        from llm_users.load.repeats import fold
        from llm_users.load.stages import pooled_summary

        groups = [r["repeats"] for r in self.results]
        judged = {i for g in groups for i in g}
        groups += [[st.index] for st in self.book.stages if st.index not in judged]  # cut by the stop
        out = []
        for n, g in enumerate(groups):
            sts = [self.book.stages[i] for i in g]
            entry = fold(pooled_summary(sts, now), [stage_summary(st, now) for st in sts])
            entry["index"] = n
            out.append((sts[-1], entry))
        return out

    def _next(self) -> float | None:
        inside = [u for u in self.unsure if (self.lo is None or u > self.lo) and (self.hi is None or u < self.hi)]
        nxt, why = next_load(self.lo, self.hi, self.kind, self.tolerance, max(inside) if inside else None)
        if why:
            self.stopped = why
        return nxt

    # the result ---------------------------------------------------------------------------------
    def summary(self, now: float | None = None) -> dict[str, Any]:
        from llm_users.load.pareto import frontiers

        key = "concurrency" if self.kind == "users" else "rate"
        points = []
        by_index = {r["index"]: r for r in self.results}
        for st, s in self._measured(now):
            r = by_index.get(st.index, {"passed": None, "reason": "not judged (run stopped)"})
            s[key] = st.load
            s["passed"], s["reason"] = r["passed"], r["reason"]
            s["verdict"] = verdict_word(r["passed"]) if st.index in by_index else "not judged"
            if r.get("lengthened_s"):
                s["lengthened_s"] = r["lengthened_s"]
            s["guard"] = r.get("guard")
            points.append(s)
        knee = None
        good = [p for p in points if p["passed"]]
        if good:
            best = max(good, key=lambda p: p[key])
            slo = best.get("slo") or {}
            knee = {key: best[key], "point": best["index"], "goodput_rps": slo.get("goodput_rps"),
                    "requests_per_s": best.get("requests_per_s"), "share_meeting_all": slo.get("share_meeting_all"),
                    "output_tokens_per_s": best.get("output_tokens_per_s")}
        fr = frontiers(points)
        tol = self.tolerance
        out = {"mode": "concurrency" if self.kind == "users" else "rate", "target": self.target,
               "budget_s": self.budget_s, "point_s": self.point_s, "settle_s": self.settle_s,
               "knee": knee, "bracket": [self.lo, self.hi], "stopped": self.stopped or "run ended",
               "tolerance": {"value": tol.value, "relative": tol.relative, "text": tol.text(self.kind)},
               "converged": self.stopped == "converged",
               "points": points, "frontier": {f: [points[i]["index"] for i in idx] for f, idx in fr.items()}}
        out["max_load"] = max_load_text(out)
        out["points_planned"] = self.max_points
        if self.plan_note:
            out["plan_note"] = self.plan_note
        if knee is None:
            out["verdict"] = verdict_text(out)
        if self.repeat > 1:
            from llm_users.load.repeats import knee_interval

            out["repeat"] = self.repeat
            out["knee_interval"] = knee_interval(points, key, self.target)
        return out
