"""load/search.py: the sweep's pure rules: the stated tolerance (parsed, its width and text, when the
bracket has converged), the next load to probe, a point's three-state verdict (pass, fail, not
enough data) and its lengthening, the plan resized to what -t holds, the verdict and max-load
sentences, and the over-saturation guard's signals (latency growth, in-flight growth, requests
not coming back)."""

from __future__ import annotations

import pytest

from llm_users.errors import ConfigError
from llm_users.load import search
from llm_users.load.search import Tolerance

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
    # too few requests to judge: not enough data (None), never a miss, however well they did
    assert search.point_passes({"requests": 4, "slo": {"share_meeting_all": 1.0}}, 0.95) == \
        (None, "not enough data: 4 requests measured, 5 needed")
    assert search.point_passes({"requests": 2, "slo": {"share_meeting_all": 0.0}}, 0.95)[0] is None
    assert search.point_passes({"requests": 9}, 0.95) == (None, "not enough data: no SLO figures")
    assert [search.verdict_word(v) for v in (True, False, None)] == ["pass", "fail", "not enough data"]


def test_a_point_short_of_data_moves_no_end_of_the_bracket_the_search_goes_on_above_it() -> None:
    one = Tolerance(1.0, False)
    # the run: 1 user, 2 requests measured: not "even the lowest load misses", but 2 users next
    assert search.next_load(None, None, "users", one, unsure=1.0) == (2.0, None)
    assert search.next_load(8.0, None, "users", one, unsure=16.0) == (32.0, None)
    assert search.next_load(None, 8.0, "users", one, unsure=4.0) == (6.0, None)  # halving: up into (4, 8)
    assert search.next_load(2.0, 8.0, "users", one, unsure=4.0) == (6.0, None)
    assert search.next_load(None, 5.0, "users", one, unsure=4.0) == (
        None, "not enough data at 4 users: lengthen -t or use fewer --llm-sweep-points")
    assert search.next_load(10.0, 20.0, "rate", Tolerance(0.05, True), unsure=12.0) == (16.0, None)
    # an unsure load outside (lo, hi) says nothing: the bracket decides
    assert search.next_load(8.0, 16.0, "users", one, unsure=4.0) == (12.0, None)
    assert search.next_load(None, 1.0, "users", one, unsure=None) == (None, "even the lowest load misses the SLOs")


@pytest.mark.parametrize(("n", "seen", "window", "room", "hint", "ext"), [
    (2, 2.0, 2.4, 50.0, None, 5.2),  # 2 in 2 s of a 2.4 s window: 2.4 expected, 2.6 s for the rest, twice over
    (4, 4.0, 4.0, 50.0, None, 4.0),  # 1 more needs 1 s: at least the window again
    (4, 3.0, 4.0, 50.0, None, None),  # 4 in 3 s of a 4 s window: 5.3 expected
    (0, 2.0, 2.4, 50.0, 1 / 3, 25.2),  # none back, 1 user at 3 s a request: 0.8 expected, 12.6 s for the rest
    (0, 2.0, 2.4, 50.0, 2.5, None),  # none back yet at 2.5 req/s: 6 expected over the window
    (0, -0.5, 3.5, 50.0, 10.0, None),  # none arrived yet (a master's records on their way): 35 expected
    (0, 2.0, 2.4, 50.0, None, 9.6),  # none back, nothing tells the rate: four windows
    (2, 2.0, 2.4, 4.0, None, 4.0),  # what the budget leaves, as it covers the 2.6 s the rate needs
    (2, 2.0, 2.4, 2.0, None, None),  # -t leaves no room: the sweep goes on to the next point
    (0, 2.0, 2.4, 2.0, None, None),
    (0, 2.0, 2.4, 12.0, 1 / 3, None),
    (5, 2.4, 2.4, 50.0, None, None),  # enough
])
def test_lengthen_once_by_what_the_rate_needs_when_t_leaves_room(n, seen, window, room, hint, ext) -> None:
    got = search.lengthen_s(n, seen, window, window, room, hint)
    assert got == (None if ext is None else pytest.approx(ext))


def test_a_plan_is_resized_to_the_points_t_holds() -> None:
    # a point: settle (20%) + 1 s measured + the tail (shipping delay + 0.5 s)
    assert search.point_floor_s(None, 0.2) == pytest.approx(1.7 / 0.8)
    assert search.point_floor_s(3.0, 2.5) == pytest.approx(7.0)
    assert search.fit_points(58.0, 12, 1, None, 0.2) == 12  # the issue's -t 60s: 4.8 s points hold it
    assert search.fit_points(58.0, 12, 1, None, 2.5) == 11  # on a master: 5 s points
    assert search.fit_points(10.0, 12, 1, None, 0.2) == 4
    assert search.fit_points(60.0, 5, 2, 3.0, 2.5) == 4
    assert search.fit_points(1.0, 12, 1, None, 0.2) == 0
    assert search.plan_note(12, 12, 4, 2.5) == (
        "SLO sweep: -t 12s holds 4 points of 2.5 s (a settle window, at least 1 s measured and its "
        "requests' tail), not the 12 asked; sweeping 4 points (for more, lengthen -t)")
    assert "holds 1 point of 2 measurements of 3.0 s" in search.plan_note(8, 12, 1, 3.0, repeat=2)


def _sweep(points: list[tuple[float, str, int]], bracket: list, **kw) -> dict:
    return {"mode": "concurrency", "tolerance": {"text": "1 user"}, "bracket": bracket, "converged": False,
            "stopped": "budget used", "points": [{"concurrency": c, "verdict": v, "requests": n} for c, v, n in points],
            **kw}


def test_the_verdict_never_contradicts_its_points() -> None:
    short = _sweep([(1, "not enough data", 2)], [None, None])
    assert search.verdict_text(short) == ("not enough data at 1 user (2 requests measured, 5 needed): lengthen -t "
                                          "or use fewer --llm-sweep-points")
    assert search.max_load_text(short) == ("max load under the SLOs: not known (not enough data at 1 user)")
    failed = _sweep([(1, "fail", 20)], [None, 1.0])
    assert search.verdict_text(failed) == "no load met the SLOs"
    assert "none found (lowest probed load failed" in search.max_load_text(failed)
    both = _sweep([(8, "fail", 40), (4, "not enough data", 3), (6, "fail", 30), (5, "fail", 25)], [None, 5.0])
    assert search.verdict_text(both) == ("no load met the SLOs (not enough data at 4 users: lengthen -t or use fewer "
                                         "--llm-sweep-points)")
    stopped = search.next_load(None, 5.0, "users", Tolerance(1.0, False), unsure=4.0)[1]
    assert stopped and stopped in search.verdict_text(both)  # the console says it once
    assert search.max_load_text(both) == ("max load under the SLOs: none found (5 users failed; tolerance 1 user; "
                                          "not enough data at 4 users)")
    above = _sweep([(1, "pass", 9), (2, "not enough data", 4)], [1.0, None])
    assert search.max_load_text(above) == ("max load under the SLOs: at least 1 users (no probed load failed; not "
                                           "within +-1 user; not enough data at 2 users)")
    assert search.verdict_text(_sweep([(1, "not judged", 1)], [None, None])) == \
        "no point was judged (the run stopped first)"
    assert search.verdict_text(_sweep([], [None, None])) == "no point was measured"


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


def test_not_returning_and_stalled_guard() -> None:
    assert search.not_returning(3, 40.0) and not search.not_returning(12, 40.0)
    assert not search.not_returning(0, 10.0)  # too few due to tell
    g = search.guard_check("rate", (False, None), (True, 150.0), stalled=True)
    assert g["ended_early"] is True and g["not_returning"] is True
    assert "its requests are not coming back" in search.guard_note("rate", g)
    assert search.guard_check("rate", (False, None), (False, 0.3), stalled=True)["ended_early"] is False


def test_one_request_is_said_in_the_singular() -> None:
    """The review's "1 requests" (a --processes 2 sweep's first point)."""
    assert search.point_passes({"requests": 1}, 0.9) == (None, "not enough data: 1 request measured, 5 needed")
    assert search.not_enough_text(1, "users", 1).startswith("not enough data at 1 user (1 request measured, ")
    assert search.requests_text(0) == "0 requests" and search.requests_text(2) == "2 requests"
