"""The open-loop pieces that need no server: the split over workers and the in-flight cap's FIFO
order and measured wait (the options' parsing: tests/load/test_plans.py)."""

from __future__ import annotations

import gevent

from llm_users.load.openloop import Scheduler, split


def test_split() -> None:
    assert split(90.0, 3, 1) == 30.0
    assert [split(10, 3, i, whole=True) for i in range(3)] == [4, 3, 3]
    assert split(None, 2, 0) is None


class _Env:
    user_classes: list = []
    host = None


def test_cap_is_fifo_and_the_wait_is_measured() -> None:
    s = Scheduler(_Env())
    s.set_share({"rate": 0, "cap": 2, "arrival": "constant", "seed": 1, "index": 0, "n": 1})
    assert s._acquire() == 0 and s._acquire() == 0
    order: list[tuple[int, int | None]] = []

    def wait(i: int) -> None:
        order.append((i, s._acquire()))

    gs = [gevent.spawn(wait, i) for i in range(3)]
    gevent.sleep(0.05)
    assert order == [] and s.inflight == 2
    s._release()
    gevent.sleep(0.01)
    assert [i for i, _ in order] == [0]
    assert order[0][1] >= 40_000_000  # it waited ~50 ms for the slot, and that wait is measured
    s._release()
    s._release()
    gevent.joinall(gs, timeout=1)
    assert [i for i, _ in order] == [0, 1, 2]
    s.stop_scheduling()


def test_waiters_released_by_stop_are_never_sent() -> None:
    s = Scheduler(_Env())
    s.set_share({"rate": 0, "cap": 1, "arrival": "poisson", "seed": 1, "index": 0, "n": 1})
    s._acquire()
    g = gevent.spawn(s._acquire)
    gevent.sleep(0.01)
    s.stop_scheduling()
    assert g.get(timeout=1) is None
