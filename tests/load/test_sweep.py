"""The sweep's search, driven by a fake clock and a server whose limit is known: geometric
probe, bisection to one user / 5% or a stated tolerance, the budget, and the over-saturation
guard (TTFT; in open loop with the in-flight growth); the pure rules of load/search.py."""

from __future__ import annotations

import pytest

from llm_users.errors import ConfigError
from llm_users.load import search
from llm_users.load import sweep as sweep_mod
from llm_users.load.search import Tolerance
from llm_users.load.stages import StageBook
from llm_users.load.sweep import SweepShape
from llm_users.metrics import RequestRecord


def _run(monkeypatch, kind: str, limit: float, start: float, budget: float = 400, points: int = 20,
         growth: bool = False, tolerance: Tolerance | None = None, keep_up: bool = False) -> SweepShape:
    """``keep_up``: open loop, the server completes as many requests a second as are due (else
    ten a second, whatever the rate)."""
    clock = {"t": 1000.0}
    monkeypatch.setattr(sweep_mod.time, "time", lambda: clock["t"])
    book = StageBook({"tpot": 15e6})
    loads: list[float] = []
    shape = SweepShape(kind=kind, book=book, on_point=lambda k, load: loads.append(load), budget_s=budget,
                       start=start, target=0.95, points=points, ship_delay_s=0.0, tolerance=tolerance)
    n, drain_ticks = 0, 0
    while shape.tick() is not None:
        load = shape._load
        if shape._drain is not None:  # rate 0: no arrivals; the ended point's backlog comes back in two ticks
            cur = shape._cur
            assert cur is not None
            for k in range(20 if drain_ticks < 2 else 0):
                n += 1
                rec = RequestRecord(request_id=str(n), name="/x", backend="b", model="m",
                                    start_time=cur.start + k / 20, t0_ns=1, ttft_ns=int(5e6), e2e_ns=int(1.5e9),
                                    output_tokens=3, scheduled_ns=1)
                book.add(rec)
                shape.see(rec)
            drain_ticks += 1
            clock["t"] += 1.0
            continue
        drain_ticks = 0
        per_s = max(int(round(load)), 1) if keep_up else 10
        for k in range(per_s):  # ten requests a second at this point (or the rate's)
            t = clock["t"] + k / per_s
            tpot_ms = 10 if load <= limit else 20
            ttft_ms = 5 + (t - shape._cur.start) * 50 if growth and load > limit else 5  # type: ignore[union-attr]
            n += 1
            rec = RequestRecord(request_id=str(n), name="/x", backend="b", model="m", start_time=t, t0_ns=1,
                                ttft_ns=int(ttft_ms * 1e6), e2e_ns=int((ttft_ms + 2 * tpot_ms) * 1e6),
                                output_tokens=3, scheduled_ns=1 if kind == "rate" else None)
            book.add(rec)
            shape.see(rec)
        clock["t"] += 1.0
        assert clock["t"] < 1000 + budget + 100, "the sweep must end within its budget"
    shape.loads = loads  # type: ignore[attr-defined]
    return shape


def test_concurrency_probe_then_bisection_finds_the_limit(monkeypatch) -> None:
    shape = _run(monkeypatch, "users", limit=21, start=4)
    assert shape.loads[:4] == [4, 8, 16, 32]  # type: ignore[attr-defined]
    s = shape.summary()
    assert s["knee"]["concurrency"] == 21 and s["stopped"] == "converged"
    assert s["bracket"] == [21, 22]
    assert [p["passed"] for p in s["points"]] == [p["concurrency"] <= 21 for p in s["points"]]


def test_rate_bisection_to_five_percent(monkeypatch) -> None:
    shape = _run(monkeypatch, "rate", limit=71.7, start=18)
    s = shape.summary()
    lo, hi = s["bracket"]
    assert lo <= 71.7 < hi and hi / lo <= 1.05
    assert s["knee"]["rate"] == lo and s["mode"] == "rate"


def test_first_point_failing_probes_down(monkeypatch) -> None:
    s = _run(monkeypatch, "users", limit=3, start=16).summary()
    assert s["knee"]["concurrency"] == 3
    s = _run(monkeypatch, "users", limit=0, start=4).summary()
    assert s["knee"] is None and s["stopped"] == "even the lowest load misses the SLOs"


def test_budget_limits_the_points(monkeypatch) -> None:
    shape = _run(monkeypatch, "users", limit=21, start=1, budget=60, points=6)
    s = shape.summary()
    assert len(s["points"]) <= 6 and s["stopped"] in ("budget used", "point limit reached")
    assert s["knee"]["concurrency"] == 16  # probed 1..16 passed, 32 failed: the bracket is said
    assert s["bracket"][0] == 16


def test_guard_ends_an_over_saturated_point_early(monkeypatch) -> None:
    shape = _run(monkeypatch, "users", limit=21, start=16, growth=True)
    s = shape.summary()
    over = [p for p in s["points"] if p["concurrency"] > 21]
    assert over and all(p["reason"] == "over-saturated" for p in over)
    assert all("over-saturated" in p["note"] for p in over)
    assert all(p["measured_s"] < shape.measure_s for p in over)
    assert s["knee"]["concurrency"] == 21


@pytest.mark.parametrize("bad", [{"points": [{"index": 0, "requests": 0}]}])
def test_summary_without_points(monkeypatch, bad) -> None:
    book = StageBook({"tpot": 15e6})
    shape = SweepShape(kind="users", book=book, on_point=lambda *a: None, budget_s=10, start=1, target=0.95,
                       points=2, ship_delay_s=0)
    s = shape.summary()
    assert s["knee"] is None and s["points"] == []


# the stated tolerance ------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "mode", "tol"), [
    (None, "concurrency", None), ("", "rate", None),
    ("1", "concurrency", Tolerance(1.0, False)), ("4", "concurrency", Tolerance(4.0, False)),
    ("0.5", "rate", Tolerance(0.5, False)), ("5%", "rate", Tolerance(0.05, True)),
    ("10%", "concurrency", Tolerance(0.10, True)),
])
def test_parse_tolerance(text, mode, tol) -> None:
    assert search.parse_tolerance(text, mode) == tol


@pytest.mark.parametrize(("text", "mode", "says"), [
    ("0", "rate", "must be a load step > 0"), ("-1", "concurrency", "must be a load step > 0"),
    ("abc", "rate", "must be a load step > 0"), ("1.5", "concurrency", "whole users"),
    ("0%", "rate", "(0%, 100%]"), ("150%", "rate", "(0%, 100%]"),
])
def test_bad_tolerance_is_one_clear_error(text, mode, says) -> None:
    with pytest.raises(ConfigError, match=r"--llm-sweep-tolerance") as e:
        search.parse_tolerance(text, mode)
    assert says in str(e.value)


def test_tolerance_width_text_and_convergence() -> None:
    assert search.default_tolerance("users") == Tolerance(1.0, False)
    assert search.default_tolerance("rate") == Tolerance(0.05, True)
    pct, users, rps = Tolerance(0.05, True), Tolerance(2.0, False), Tolerance(0.5, False)
    assert pct.width("rate", 72.0) == pytest.approx(3.6)
    assert pct.width("users", 10.0) == 1.0  # never below one user
    assert (pct.text("rate"), users.text("users"), Tolerance(1, False).text("users"), rps.text("rate")) == \
        ("5%", "2 users", "1 user", "0.5 req/s")
    assert search.converged(72.0, 75.5, "rate", pct) and not search.converged(72.0, 76.0, "rate", pct)
    assert search.converged(20.0, 22.0, "users", users) and not search.converged(20.0, 23.0, "users", users)
    assert not search.converged(None, 4.0, "users", users) and not search.converged(4.0, None, "users", users)


def test_next_load_doubles_halves_bisects_and_stops_within_tolerance() -> None:
    one = Tolerance(1.0, False)
    assert search.next_load(8.0, None, "users", one) == (16.0, None)
    assert search.next_load(None, 16.0, "users", one) == (8.0, None)
    assert search.next_load(None, 1.0, "users", one) == (None, "even the lowest load misses the SLOs")
    assert search.next_load(16.0, 32.0, "users", one) == (24.0, None)
    assert search.next_load(21.0, 22.0, "users", one) == (None, "converged")
    assert search.next_load(16.0, 20.0, "users", Tolerance(4.0, False)) == (None, "converged")
    assert search.next_load(72.0, 81.0, "rate", Tolerance(0.05, True)) == (76.5, None)
    assert search.next_load(72.0, 74.0, "rate", Tolerance(0.05, True)) == (None, "converged")
    assert search.next_load(72.0, 74.0, "rate", Tolerance(1.0, False)) == (73.0, None)


def test_point_passes_is_the_one_verdict() -> None:
    ok = {"requests": 40, "slo": {"share_meeting_all": 0.96}}
    assert search.point_passes(ok, 0.95) == (True, "96.0% met the SLOs")
    assert search.point_passes(ok, 0.97) == (False, "96.0% met the SLOs")
    assert search.point_passes(ok, 0.95, saturated=True) == (False, "over-saturated")
    assert search.point_passes({"requests": 4, "slo": {"share_meeting_all": 1.0}}, 0.95) == \
        (False, "only 4 requests measured")
    assert search.point_passes({"requests": 9}, 0.95) == (False, "no data")


@pytest.mark.parametrize(("kind", "limit", "start", "tol", "width"), [
    ("users", 21, 4, Tolerance(4.0, False), 4), ("users", 21, 4, Tolerance(0.25, True), 5.25),
    ("rate", 71.7, 18, Tolerance(1.0, False), 1.0), ("rate", 71.7, 18, Tolerance(0.02, True), 0.02 * 71.7),
])
def test_the_search_stops_within_the_stated_tolerance(monkeypatch, kind, limit, start, tol, width) -> None:
    """The bracket holds the limit, is within the tolerance, and the max load is its low end:
    within the tolerance of the limit."""
    shape = _run(monkeypatch, kind, limit=limit, start=start, tolerance=tol)
    s = shape.summary()
    lo, hi = s["bracket"]
    assert s["stopped"] == "converged" and s["converged"] is True
    assert lo <= limit < hi and hi - lo <= width + 1e-9
    key = "concurrency" if kind == "users" else "rate"
    assert s["knee"][key] == lo and limit - lo <= width
    assert s["tolerance"] == {"value": tol.value, "relative": tol.relative, "text": tol.text(kind)}
    unit = "users" if kind == "users" else "req/s"
    assert s["max_load"] == f"max load under the SLOs: {lo:g} {unit} (within +-{tol.text(kind)}: {hi:g} failed)"


def test_a_coarser_tolerance_needs_fewer_points(monkeypatch) -> None:
    fine = _run(monkeypatch, "users", limit=21, start=4).summary()
    coarse = _run(monkeypatch, "users", limit=21, start=4, tolerance=Tolerance(4.0, False)).summary()
    assert len(coarse["points"]) < len(fine["points"])
    assert fine["bracket"] == [21, 22] and fine["max_load"].endswith("(within +-1 user: 22 failed)")


def test_max_load_text_when_not_converged() -> None:
    base = {"mode": "rate", "tolerance": {"text": "5%"}, "stopped": "budget used", "converged": False}
    assert search.max_load_text({**base, "bracket": [36.0, 72.0]}) == \
        "max load under the SLOs: 36 req/s, not yet within +-5% (between 36 and 72; budget used)"
    assert "at least 144 req/s (no probed load failed" in search.max_load_text({**base, "bracket": [144.0, None]})
    assert "none found" in search.max_load_text({**base, "bracket": [None, 4.0]})
    assert search.max_load_text({}) is None


# the guard ---------------------------------------------------------------------------------------


def test_latency_growth_needs_a_climb_not_noise() -> None:
    flat = [(t / 10, 50.0 + (t % 3)) for t in range(100)]
    assert search.latency_growth(flat, 0.0, 10.0, 10.0) == (False, pytest.approx(1.0, abs=0.05))
    climb = [(t / 10, 50.0 + 40 * t / 10) for t in range(100)]  # medians 150 then 350
    up, ratio = search.latency_growth(climb, 0.0, 10.0, 10.0)
    assert up and ratio == pytest.approx(350 / 150, rel=0.05)
    assert search.latency_growth(climb[:8], 0.0, 0.8, 10.0) == (False, None)  # too few, too soon


def test_inflight_growth_is_arrivals_due_less_completions() -> None:
    ends = [1.0 + k / 50 for k in range(500)]  # 50 completions a second over [1, 11)
    assert search.inflight_growth(50.0, ends, 1.0, 11.0) == (False, pytest.approx(0.0))
    grew, per_s = search.inflight_growth(72.0, ends, 1.0, 11.0)
    assert grew and per_s == pytest.approx(22.0)
    assert search.inflight_growth(53.0, ends, 1.0, 11.0)[0] is False  # 6% more: within the margin
    assert search.inflight_growth(72.0, ends, 1.0, 1.5) == (False, None)  # too short to tell


def test_guard_check_needs_both_signals_in_open_loop() -> None:
    up, flat = (True, 3.0), (False, 1.0)
    assert search.guard_check("rate", up, (True, 20.0))["ended_early"] is True
    assert search.guard_check("rate", up, (False, 0.5))["ended_early"] is False
    assert search.guard_check("rate", flat, (True, 20.0))["ended_early"] is False
    closed = search.guard_check("users", up, (False, None))
    assert closed == {"ended_early": True, "signal": "ttft", "latency_ratio": 3.0, "in_flight_growth_per_s": None}
    note = search.guard_note("rate", search.guard_check("rate", up, (True, 20.0)))
    assert note == ("over-saturated: latency from the schedule grew without bound (3.0x) and the requests in "
                    "flight grew by 20.0/s; point ended early")


def test_open_loop_guard_fires_when_in_flight_and_latency_grow(monkeypatch) -> None:
    """10 completions a second against 18..144 due: in flight grows at every point above 10/s;
    the latency climbs only above the limit: only those points end early, each saying so."""
    shape = _run(monkeypatch, "rate", limit=71.7, start=18, growth=True)
    s = shape.summary()
    for p in s["points"]:
        assert p["guard"]["signal"] == "e2e_from_schedule+in_flight"
        if p["rate"] > 71.7:
            assert p["reason"] == "over-saturated" and p["guard"]["ended_early"] is True
            assert p["guard"]["in_flight_growth_per_s"] > 0.5 * (p["rate"] - 10)
            assert "requests in flight grew by" in p["note"] and p["measured_s"] < shape.measure_s
            # drained (rate 0) until its backlog came back and went quiet, then the next point
            assert p["guard"]["drained"] is True and 2 <= p["guard"]["drain_s"] <= 5
            nxt = s["points"][p["index"] + 1]
            assert nxt["start"] - p["start"] >= p["settle_s"] + p["measured_s"] + p["guard"]["drain_s"] - 1e-6
        else:
            assert p["guard"]["ended_early"] is False and p["passed"] is True
    lo, hi = s["bracket"]
    assert lo <= 71.7 < hi
    loads = shape.loads  # type: ignore[attr-defined]
    assert [loads[i + 1] for i, x in enumerate(loads[:-1]) if x > 71.7] == [0.0] * sum(
        1 for p in s["points"] if p["rate"] > 71.7)  # each over-saturated point: rate 0 next


def test_not_returning_and_stalled_guard() -> None:
    assert search.not_returning(3, 40.0) and not search.not_returning(12, 40.0)
    assert not search.not_returning(0, 10.0)  # too few due to tell
    g = search.guard_check("rate", (False, None), (True, 150.0), stalled=True)
    assert g["ended_early"] is True and g["not_returning"] is True
    assert "its requests are not coming back" in search.guard_note("rate", g)
    assert search.guard_check("rate", (False, None), (False, 0.3), stalled=True)["ended_early"] is False


def test_open_loop_guard_holds_while_completions_keep_up(monkeypatch) -> None:
    """Latency climbs above the limit but the server completes what is due: in flight does not
    grow, so the guard does not end the point (it fails on its SLOs, measured in full)."""
    shape = _run(monkeypatch, "rate", limit=30, start=18, growth=True, keep_up=True,
                 tolerance=Tolerance(0.25, True))
    s = shape.summary()
    over = [p for p in s["points"] if p["rate"] > 30]
    assert over and all(p["guard"]["ended_early"] is False for p in over)
    assert all(p["reason"].endswith("met the SLOs") and p["measured_s"] >= shape.measure_s - 1e-6 for p in over)
    assert any((p["guard"]["latency_ratio"] or 0) >= 1.5 for p in over)
