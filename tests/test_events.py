"""events.py: the ``llm_response`` and ``llm_run_ready`` hooks added to an ``Events`` once, and
``first_time``, the prelude of every ``register(events)`` that adds its listeners once per
``Events`` instance."""

from __future__ import annotations

from locust.event import EventHook, Events

from llm_users import events as llm_events


def test_install_adds_both_hooks_once() -> None:
    ev = Events()
    assert not hasattr(ev, "llm_response") and not hasattr(ev, "llm_run_ready")
    hook = llm_events.install(ev)
    assert isinstance(hook, EventHook) and ev.llm_response is hook and isinstance(ev.llm_run_ready, EventHook)
    ready = ev.llm_run_ready
    assert llm_events.install(ev) is hook and ev.llm_run_ready is ready  # a second install keeps them
    assert llm_events.install_run_ready(ev) is ready
    other = Events()
    assert llm_events.install(other) is not hook  # each Events its own


def test_run_ready_alone_and_the_listeners_hear_the_fire() -> None:
    ev = Events()
    ready = llm_events.install_run_ready(ev)
    assert ev.llm_run_ready is ready and not hasattr(ev, "llm_response")
    heard: list[tuple[object, object]] = []
    ready.add_listener(lambda environment, run, **_: heard.append((environment, run)))
    llm_events.install(ev).add_listener(lambda record, user, **_: heard.append((record, user)))
    ev.llm_run_ready.fire(environment="env", run="run")
    ev.llm_response.fire(record="rec", user=None)
    assert heard == [("env", "run"), ("rec", None)]


def test_first_time_hands_each_events_back_once() -> None:
    seen: set[int] = set()
    a, b = Events(), Events()
    assert llm_events.first_time(a, seen) is a
    assert llm_events.first_time(a, seen) is None
    assert llm_events.first_time(b, seen) is b


def test_first_time_without_events_is_locusts_default() -> None:
    from locust import events as default_events

    seen: set[int] = set()
    assert llm_events.first_time(None, seen) is default_events
    assert llm_events.first_time(None, seen) is None and llm_events.first_time(default_events, seen) is None
