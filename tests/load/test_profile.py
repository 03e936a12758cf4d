"""load/profile.py: an option given or not (``given``), a number option within its range, the study
configuration's parts by name, a profile's defaults, and :class:`Study`: each profile attached
in order with its own part, the run's role, and the events fanned out to the attached parts (the
configuration read again at each test start; a bad one keeps the old, said once)."""

from __future__ import annotations

import logging
from argparse import Namespace
from types import SimpleNamespace
from typing import Any

import pytest

from llm_users.errors import ConfigError
from llm_users.load.profile import LoadProfile, ProfileRun, StudyConfig, given, number
from tests.load.study_rig import study_of


def test_given_is_none_when_absent_or_blank() -> None:
    o = Namespace(a=" ", b="5", c=0, d=None)
    assert (given(o, "a"), given(o, "b"), given(o, "c"), given(o, "d"), given(o, "missing"), given(None, "a")) == \
        (None, "5", 0, None, None, None)


def test_a_number_option_within_its_range() -> None:
    o = Namespace(x="0.5", big="2", word="lots", blank="")
    assert number(o, "x", "--llm-x", 7.0, 0.0, 1.0) == 0.5
    assert number(o, "blank", "--llm-x", 7.0, 0.0, 1.0) == 7.0  # absent: the default, unchecked
    with pytest.raises(ConfigError, match=r"^--llm-big must be a number in \[0, 1\], got '2'$"):
        number(o, "big", "--llm-big", 0.5, 0.0, 1.0)
    with pytest.raises(ConfigError, match=r"^--llm-word must be a number in \[1e-06, inf\], got 'lots'$"):
        number(o, "word", "--llm-word", 1.0, 1e-6)


def test_a_part_by_its_name() -> None:
    s = StudyConfig((("a", 1), ("b", None)), open_loop=True)
    assert (s.part("a"), s.part("b"), s.part("c")) == (1, None, None)
    assert StudyConfig().part("a") is None and not StudyConfig().open_loop


def test_a_profiles_defaults_do_nothing() -> None:
    p = LoadProfile()
    p.add_arguments(lambda *a, **kw: pytest.fail("no options"))
    assert p.parse(Namespace(llm_rate="5")) is None and not p.open_loop({"rate": 5})
    assert p.attach(study_of("local"), None) is None and p.describe(None, StudyConfig()) is None
    assert (p.console_lines({}), p.report_sections({}), p.files({})) == ([], [], {})
    p.check(StudyConfig())


class Part(ProfileRun):
    def __init__(self, name: str, heard: list[tuple[str, Any]]) -> None:
        self.name, self.heard = name, heard

    def on_test_start(self, fresh: StudyConfig | None) -> None:
        self.heard.append((f"{self.name}.start", fresh))

    def on_test_stopping(self) -> None:
        self.heard.append((f"{self.name}.stopping", None))

    def on_stop(self) -> None:
        self.heard.append((f"{self.name}.stop", None))

    def summary(self, s: dict[str, Any]) -> None:
        s.setdefault("order", []).append(self.name)


def profiles(heard: list[tuple[str, Any]]) -> tuple[type, type, type]:
    class A(LoadProfile):
        name = "a"

        def attach(self, study: Any, config: Any) -> ProfileRun:
            heard.append(("a.attach", config))
            return Part("a", heard)

    class Nothing(LoadProfile):
        name = "nothing"

        def attach(self, study: Any, config: Any) -> None:
            heard.append(("nothing.attach", config))

    class B(LoadProfile):
        name = "b"

        def attach(self, study: Any, config: Any) -> ProfileRun:
            heard.append(("b.attach", config))
            return Part("b", heard)

    return A, Nothing, B


def test_each_profile_attaches_in_order_with_its_part_and_hears_the_events() -> None:
    heard: list[tuple[str, Any]] = []
    A, Nothing, B = profiles(heard)
    study = study_of("local")
    study.config = StudyConfig((("a", "cfg-a"), ("b", "cfg-b")))
    assert study.attach([A(), Nothing(), B()]) is study
    assert heard == [("a.attach", "cfg-a"), ("nothing.attach", None), ("b.attach", "cfg-b")]
    assert list(study.runs) == [A, B] and study.get(A).name == "a" and study.get(Nothing) is None
    heard.clear()
    env = study.environment
    env.events.test_start.fire(environment=env)
    env.events.test_stopping.fire(environment=env)
    for hook in study.run.stop_hooks:
        hook()
    s: dict[str, Any] = {}
    for hook in study.run.summary_hooks:
        hook(s)
    assert heard == [("a.start", study.config), ("b.start", study.config), ("a.stopping", None), ("b.stopping", None),
                     ("a.stop", None), ("b.stop", None)]
    assert s["order"] == ["a", "b"]


def test_the_configuration_is_read_again_at_each_test_start(caplog) -> None:
    heard: list[tuple[str, Any]] = []
    A, _, _ = profiles(heard)
    fresh = StudyConfig((("a", "from the web form"),))
    answers: list[Any] = [fresh, ConfigError("--llm-rate must be a number")]

    def read() -> StudyConfig:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    study = study_of("local")
    study._fresh = read
    study.attach([A()])
    env = study.environment
    with caplog.at_level(logging.ERROR, logger="llm_users.load.study"):
        env.events.test_start.fire(environment=env)
        env.events.test_start.fire(environment=env)
    assert [f for what, f in heard if what == "a.start"] == [fresh, None]  # a bad read: the parts keep theirs
    assert [r.getMessage() for r in caplog.records] == [
        "locust-llm: --llm-rate must be a number; the open-loop settings stay as they were"]


@pytest.mark.parametrize(("role", "on_worker", "on_master", "summarised"), [
    ("local", False, False, True), ("master", False, True, True), ("worker", True, False, False)])
def test_the_runs_role_decides_who_summarises(role: str, on_worker: bool, on_master: bool, summarised: bool) -> None:
    study = study_of(role).attach([])
    assert (study.on_worker, study.on_master) == (on_worker, on_master)
    assert bool(study.run.summary_hooks) is summarised and len(study.run.stop_hooks) == 1


def test_a_shape_is_given_to_the_run() -> None:
    study = study_of("local")
    shape = SimpleNamespace(runner=None)
    study.set_shape(shape)
    assert study.shape is shape and study.environment.shape_class is shape
    assert shape.runner is study.environment.runner
