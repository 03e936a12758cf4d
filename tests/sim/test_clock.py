"""sim/clock.py: one timer for every stream: callbacks run in target order (ties in the order
scheduled), one may schedule itself again, one already due runs on the loop's next turn, and
asyncio's loop is armed half a millisecond early (uvloop's on time)."""

from __future__ import annotations

import asyncio
from time import perf_counter_ns

from llm_users.sim.clock import Clock, timer_lead_ns

MS = 1_000_000


def test_callbacks_run_in_target_order_ties_in_the_order_scheduled() -> None:
    async def run() -> list[str]:
        clock = Clock()
        ran: list[str] = []
        done = asyncio.get_running_loop().create_future()
        t0 = perf_counter_ns()
        for name, at in (("c", 30), ("a", 10), ("b1", 20), ("b2", 20), ("d", 40)):
            clock.schedule(t0 + at * MS, lambda name=name: ran.append(name))
        clock.schedule(t0 + 50 * MS, lambda: done.set_result(None))
        assert len(clock) == 6
        await done
        assert len(clock) == 0
        return ran

    assert asyncio.run(run()) == ["a", "b1", "b2", "c", "d"]


def test_a_callback_may_schedule_itself_again_and_a_due_one_runs_soon() -> None:
    async def run() -> list[int]:
        clock = Clock()
        ticks: list[int] = []
        done = asyncio.get_running_loop().create_future()

        def tick() -> None:
            ticks.append(len(ticks))
            if len(ticks) < 5:
                clock.schedule(perf_counter_ns() + 2 * MS, tick)  # from inside a firing
            else:
                done.set_result(None)

        clock.schedule(perf_counter_ns() - 10 * MS, tick)  # already late: call_soon, not a negative delay
        await done
        return ticks

    assert asyncio.run(run()) == [0, 1, 2, 3, 4]


def test_the_timer_lead_by_loop() -> None:
    async def lead() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        return timer_lead_ns(loop), Clock(loop).lead_ns

    assert asyncio.run(lead()) == (500_000, 500_000)  # asyncio rounds its poll timeout up to whole ms

    class UVLoopLike:  # uvloop rounds to the nearest ms: armed on time
        pass

    UVLoopLike.__module__ = "uvloop"
    assert timer_lead_ns(UVLoopLike()) == 0  # type: ignore[arg-type]
