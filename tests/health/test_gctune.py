"""gctune.py: the heap is frozen once the user count holds still, again after users are added,
unfrozen at stop; LOCUST_LLM_GC=off leaves the collector alone."""

from __future__ import annotations

import gc

from llm_users.health.gctune import GcTuner


def test_freezes_once_the_user_count_holds_and_unfreezes_at_stop() -> None:
    gc.unfreeze()
    t = GcTuner("freeze")
    assert not t.tick(0)  # no users yet
    assert not t.tick(100)  # still spawning: the count just changed
    assert gc.get_freeze_count() == 0
    assert t.tick(100)  # steady: frozen
    assert gc.get_freeze_count() > 0 and t.frozen_at == 100
    assert not t.tick(100)  # once per count
    assert not t.tick(150)
    keep = [[i] for i in range(1000)]  # objects made after the first freeze
    before = gc.get_freeze_count()
    assert t.tick(150) and gc.get_freeze_count() >= before + 1000  # users added: frozen again
    t.stop()
    assert gc.get_freeze_count() == 0
    del keep


def test_off_and_the_environment(monkeypatch) -> None:
    gc.unfreeze()
    t = GcTuner("off")
    t.tick(10)
    assert not t.tick(10) and gc.get_freeze_count() == 0
    monkeypatch.setenv("LOCUST_LLM_GC", "off")
    assert GcTuner().mode == "off"
    monkeypatch.setenv("LOCUST_LLM_GC", "bogus")
    assert GcTuner().mode == "freeze"


def test_tick_mode_freezes_at_every_steady_tick() -> None:
    gc.unfreeze()
    t = GcTuner("tick")
    t.tick(5)
    assert t.tick(5) and t.tick(5) and t.freezes == 2
    assert not t.tick(6)  # the count moved: wait for it to hold
    t.stop()
    assert gc.get_freeze_count() == 0


def test_garbage_made_between_freezes_is_freed_not_frozen() -> None:
    """Cycles a spawn leaves behind (Locust's worker builds argparse parsers on every spawn
    message) are collected before the next freeze, not kept in the frozen heap until the stop."""
    import weakref

    class Node:
        pass

    gc.unfreeze()
    t = GcTuner("freeze")
    t.tick(8)
    assert t.tick(8)
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: reference counting alone never frees it
    gone = weakref.ref(a)
    del a, b
    kept = Node()  # alive: frozen as before
    assert not t.tick(16) and t.tick(16)  # a stage changed the user count: frozen again
    assert gone() is None and gc.is_tracked(kept)
    t.stop()
