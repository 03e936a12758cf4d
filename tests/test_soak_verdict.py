"""bench/soak.py's pure parts (bench/lib/soak_verdict.py): the mixed closed/open stage plans, the
flatness verdict (Theil-Sen RSS slope per hour after warm-up, fds constant), the records-vs-served
accounting and the leftover-process check, on synthetic series."""

from __future__ import annotations

import random

import pytest

from bench.lib.soak_verdict import (
    accounting,
    fds_by_phase,
    flatness,
    leftovers,
    phases,
    stage_plan,
    theil_sen,
)
from llm_users.load.plans import parse_stages


def test_phases_take_turns_and_end_mixed() -> None:
    plan = phases(7200, 600)
    assert len(plan) == 12
    assert [p.kind for p in plan[:4]] == ["closed", "open", "closed", "open"]
    assert plan[-1].kind == "mixed" and plan[-1].start_s == 6600
    assert [p.kind for p in phases(60, 600)] == ["closed", "mixed"]  # at least two


def test_stage_plans_are_valid_llm_stages_and_cover_the_soak() -> None:
    plan = phases(180, 40)  # 4 phases (180 / 40 = 4.5 rounds to 4): closed, open, closed, mixed
    closed, opened = stage_plan(plan, "closed", 8, 16), stage_plan(plan, "open", 3, 6)
    assert closed == "8:20s,16:20s,0:40s,8:20s,16:20s,8:40s"
    assert opened == "0:40s,3:20s,6:20s,0:40s,3:40s"  # two idle phases merge into one stage
    for text in (closed, opened):
        stages = parse_stages(text)  # the run's own parser accepts it
        assert sum(s.duration_s for s in stages) == pytest.approx(160)
        assert stages[-1].load > 0  # never ends on an idle stage


def test_theil_sen_ignores_a_spike_that_moves_least_squares() -> None:
    pts = [(float(t), 100.0 + 0.01 * t) for t in range(100)]
    pts[50] = (50.0, 400.0)  # one spike (a gc pause, a burst)
    assert theil_sen(pts) == pytest.approx(0.01)
    assert theil_sen([(1.0, 5.0)]) == 0.0


def series(hours: float, mb: float, grow_pct_per_h: float, noise_mb: float = 0.0, fds: int = 114,
           every_s: float = 10.0) -> list[tuple[float, float | None, int | None]]:
    rnd = random.Random(3)
    out = []
    for i in range(int(hours * 3600 / every_s) + 1):
        t = i * every_s
        out.append((t, mb * (1 + grow_pct_per_h / 100 * t / 3600) + rnd.uniform(-noise_mb, noise_mb), fds))
    return out


def test_flat_process_passes_with_noise_and_a_warm_up_climb() -> None:
    s = series(2, 60.0, 0.0, noise_mb=0.3)
    s[:30] = [(t, 40.0 + t / 15, f) for t, _, f in s[:30]]  # start-up: 40 -> 60 MB in the first 5 min
    v = flatness(s, warmup_s=600)
    assert v["judged"] and v["flat"] and v["rss_flat"] and v["fds_constant"]
    assert abs(v["rss_slope_pct_per_h"]) < 0.3
    assert v["window_s"] == pytest.approx(6600)
    # Theil-Sen shrugs off a short climb in a long window (30 of 721 samples), but not a climb
    # that is most of the window: the warm-up must not be judged
    assert not flatness(s[:40], warmup_s=0)["rss_flat"]


def test_slow_leak_fails_and_is_measured() -> None:
    v = flatness(series(2, 60.0, 2.0, noise_mb=0.3), warmup_s=600)  # +2 % per hour
    assert not v["flat"] and not v["rss_flat"] and v["fds_constant"]
    assert v["rss_slope_pct_per_h"] == pytest.approx(2.0, rel=0.1)
    assert v["rss_slope_mb_per_h"] == pytest.approx(1.2, rel=0.1)
    assert flatness(series(2, 60.0, 0.8, noise_mb=0.3), warmup_s=600)["rss_flat"]  # under the 1 %/h bound
    assert flatness(series(2, 60.0, -3.0), warmup_s=600)["rss_flat"]  # shrinking is flat


def test_fds_must_stay_constant_after_warm_up() -> None:
    s = series(1, 60.0, 0.0)
    s[-5:] = [(t, r, 115) for t, r, _ in s[-5:]]  # one fd more near the end: a leaked socket
    v = flatness(s, warmup_s=600, fd_slack=0)  # without a plan: max - min after warm-up
    assert v["rss_flat"] and not v["fds_constant"] and not v["flat"]
    assert (v["fds_min"], v["fds_max"]) == (114, 115)
    assert flatness(s, warmup_s=600, fd_slack=1)["flat"]


def with_load(plan, leak_per_phase: int = 0) -> list[tuple[float, float | None, int | None]]:
    """A worker of the closed run: 10 fds idle, 18 at 8 users, 26 at 16 users (by stage)."""
    out = []
    for i, p in enumerate(plan):
        for k in range(int(p.duration_s // 10)):
            t = p.start_s + k * 10
            users = (8 if k < p.duration_s / 20 else 16) if p.kind == "closed" else 8 if p.kind == "mixed" else 0
            out.append((t, 55.0, 10 + users + leak_per_phase * i))
    return out


def test_fds_follow_the_load_and_are_compared_phase_by_phase() -> None:
    plan = phases(7200, 600)
    v = flatness(with_load(plan), warmup_s=600, plan=plan, end_s=7200)
    assert v["fds_judged"] and v["fds_constant"] and v["flat"]
    assert (v["fds_min"], v["fds_max"]) == (10, 26)  # a spread of 16, all of it load
    assert v["fds_by_phase_kind"]["closed"][0] == [18, 26] and v["fds_by_phase_kind"]["open"][0] == [10, 10]
    leak = flatness(with_load(plan, leak_per_phase=1), warmup_s=600, plan=plan, end_s=7200)
    assert not leak["fds_constant"] and leak["fds_floor_growth"] == 8 and not leak["flat"]
    # an open-loop pool: its peak moves with the bursts (21..27), its floor does not
    pool = [(t, f + (7 if int(t) % 1200 == 300 else 13 if int(t) % 3600 == 900 else 0)) for t, _, f in with_load(plan)]
    assert fds_by_phase(pool, plan, 600)["fds_constant"]
    # one phase of each kind after the warm-up: nothing to compare with
    short = phases(1800, 600)
    assert not fds_by_phase([(t, f) for t, _, f in with_load(short)], short, 600)["fds_judged"]


def test_the_reports_written_after_the_plan_are_not_judged() -> None:
    s = series(1, 60.0, 0.0)
    s += [(3610.0, 128.0, 19), (3620.0, 128.0, 19)]  # the master builds its report at the stop
    v = flatness(s, warmup_s=600, end_s=3600)
    assert v["flat"] and v["rss_max_mb"] == pytest.approx(60.0) and v["rss_peak_mb"] == 128.0


def test_too_few_samples_are_not_judged() -> None:
    v = flatness([(0.0, 50.0, 10), (700.0, 50.0, 10), (710.0, None, None)], warmup_s=600)
    assert not v["judged"] and not v["flat"] and v["samples"] == 1


def record(i: int, status: str = "ok") -> dict:
    return {"request_id": f"r{i}", "status": status}


def test_accounting_exact_with_requests_cut_by_the_stop() -> None:
    recs = [record(i) for i in range(100)] + [record(100, "interrupted"), record(101, "interrupted")]
    a = accounting(recs, {"started": 102, "served": 100, "aborted": 2, "errors": 0, "active": 0})
    assert a["exact"] and a["cut_by_stop"] == 2 and a["records_by_status"] == {"interrupted": 2, "ok": 100}


def test_accounting_catches_a_lost_or_doubled_record() -> None:
    stats = {"started": 100, "served": 100, "aborted": 0, "errors": 0}
    lost = accounting([record(i) for i in range(99)], stats)
    assert not lost["exact"] and not lost["ok_equals_served"] and not lost["records_equal_started"]
    doubled = accounting([record(i) for i in range(99)] + [record(5)], stats)
    assert not doubled["exact"] and doubled["duplicates"] == 1 and doubled["records_equal_started"]


def test_leftovers_by_pid_and_start_time() -> None:
    seen = {10: 500, 11: 510, 12: 520}
    assert leftovers(seen, {10: None, 11: 510, 12: 999}) == [11]  # 12's pid was reused by another process
