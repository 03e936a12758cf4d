"""load/profiles/sweep.py: ``--llm-sweep`` as a profile: what it needs to attach (the SLOs, ``-t``),
the shape it gives the run from its options (the budget less the stop's seconds, the stages'
settle and repeat, the master's shipping delay), a rate point driving the open-loop engine, and
the files it writes (the search itself: tests/load/test_sweep.py)."""

from __future__ import annotations

from typing import Any

import pytest

from llm_users.errors import ConfigError
from llm_users.load.profiles.open_loop import OpenLoop
from llm_users.load.profiles.stages import Stages
from llm_users.load.profiles.sweep import Sweep, SweepConfig, SweepRun
from llm_users.load.sweep import SweepShape
from tests.load.study_rig import study_of

SLO = {"tpot": 30e6}


def test_it_needs_the_slos_and_a_time_budget_where_the_records_merge() -> None:
    p = Sweep()
    cfg = SweepConfig("concurrency")
    assert p.attach(study_of("local", slos=SLO, run_time=60), None) is None  # not asked for
    assert p.attach(study_of("worker"), cfg) is None  # the master's shape drives the workers
    with pytest.raises(ConfigError, match=r"^--llm-sweep needs --llm-slo"):
        p.attach(study_of("local", run_time=60), cfg)
    with pytest.raises(ConfigError, match=r"^--llm-sweep needs -t/--run-time"):
        p.attach(study_of("master", slos=SLO), cfg)
    assert p.open_loop(SweepConfig("rate")) and not p.open_loop(SweepConfig("concurrency")) and not p.open_loop(None)


@pytest.mark.parametrize(("role", "ship_delay_s"), [("local", 0.2), ("master", 2.5)])
def test_the_shape_from_the_options(role: str, ship_delay_s: float) -> None:
    study = study_of(role, slos=SLO, run_time=72, llm_sweep="rate", llm_sweep_start="4", llm_sweep_points="5",
                     llm_sweep_target="0.9", llm_settle="3s", llm_repeat="2")
    study.attach([OpenLoop(), Stages(), Sweep()])
    part = study.get(Sweep)
    assert isinstance(part, SweepRun) and study.get(Stages) is None  # the sweep's points, not stages
    shape = part.sweep
    assert isinstance(shape, SweepShape) and study.shape is shape and study.environment.shape_class is shape
    assert (shape.kind, shape.start_load, shape.target, shape.max_points) == ("rate", 4.0, 0.9, 5)
    assert (shape.budget_s, shape.settle_s, shape.repeat, shape.ship_delay_s) == (70.0, 3.0, 2, ship_delay_s)
    assert shape.plan_note is None  # 5 points x 2 measurements of 7 s: each holds 3 s settle, 1 s measured, a tail
    observers = study.run.collector.observers
    assert part.book.add in observers and shape.see in observers


def test_a_plan_that_cannot_fit_t_is_resized_at_start_in_one_line(caplog) -> None:
    """On the master (data ships every 2 s) -t 62s cannot hold 5 points of 2 measurements with a
    3 s settle: 4 fit, said once at start and kept in summary.json's sweep block."""
    study = study_of("master", slos=SLO, run_time=62, llm_sweep="rate", llm_sweep_points="5",
                     llm_settle="3s", llm_repeat="2")
    with caplog.at_level("WARNING", logger="llm_users.load.study"):
        study.attach([OpenLoop(), Stages(), Sweep()])
    shape = study.get(Sweep).sweep
    note = ("SLO sweep: -t 62s holds 4 points of 2 measurements of 7.5 s (a settle window, at least 1 s "
            "measured and its requests' tail), not the 5 asked; sweeping 4 points (for more, lengthen -t)")
    assert (shape.max_points, shape.points_asked, shape.point_s, shape.plan_note) == (4, 5, 7.5, note)
    assert [r.getMessage() for r in caplog.records] == [f"locust-llm: {note}"]
    s = shape.summary()
    assert (s["plan_note"], s["points_planned"]) == (note, 4)


def test_a_t_that_cannot_hold_one_point_is_refused() -> None:
    study = study_of("local", slos=SLO, run_time=3, llm_sweep="concurrency")
    with pytest.raises(ConfigError, match=r"^--llm-sweep: -t 3s cannot hold one point .*2.1 s\); give -t 5s or longer"):
        study.attach([Stages(), Sweep()])


def test_a_rate_point_sets_the_engines_rate_and_a_users_point_does_not() -> None:
    study = study_of("local", slos=SLO, run_time=30, llm_sweep="rate")
    study.attach([OpenLoop(), Sweep()])
    part, engine = study.get(Sweep), study.get(OpenLoop)
    part._on_point("rate", 12.0)
    assert engine.controller.rate == 12.0 and engine.scheduler.rate == 12.0
    part._on_point("users", 3.0)
    assert engine.controller.rate == 12.0


def _point(i: int, users: float, rate: float) -> dict[str, Any]:
    return {"index": i, "users": users, "concurrency": users, "rate": rate, "settle_s": 1.0, "measured_s": 4.0,
            "requests": 10, "excluded": 0, "requests_per_s": rate, "output_tokens_per_s": 10 * rate,
            "ttft": {"p50": 10.0, "p99": 20.0}, "tpot": {"p50": 5.0, "p99": 9.0}, "e2e": {"p99": 100.0}}


def _loads(csv_text: str) -> list[str]:
    return [row.split(",")[1] for row in csv_text.splitlines()[1:]]  # the "load" column


def test_the_files_of_a_sweep_and_none_without() -> None:
    p = Sweep()
    points = [_point(0, 1, 10.0), _point(1, 2, 20.0)]
    assert p.files({}) == {} and p.files({"sweep": None, "stages": points}) == {}
    assert p.report_sections({}) == []
    files = p.files({"sweep": {"mode": "concurrency", "points": points}, "stages": points})
    assert sorted(files) == ["pareto.csv", "stages.csv"] and _loads(files["pareto.csv"]) == ["1", "2"]
    rate = p.files({"sweep": {"mode": "rate", "points": points}})
    assert list(rate) == ["pareto.csv"] and _loads(rate["pareto.csv"]) == ["10", "20"]  # no stages block: no stages.csv
