"""sim/engine.py: FIFO admission and the queue limit."""

from __future__ import annotations

import pytest

from llm_users.sim.engine import Engine, QueueFull


def test_engine_fifo_and_queue_limit():
    import asyncio

    async def run() -> None:
        eng = Engine(2, max_queue=1)
        assert eng.try_acquire() is None and eng.try_acquire() is None
        fut = eng.try_acquire()
        assert fut is not None and eng.waiting == 1
        with pytest.raises(QueueFull):
            eng.try_acquire()
        eng.release()
        assert fut.done() and eng.running == 2 and eng.waiting == 0
        assert eng.kv_usage() == 1.0

    asyncio.run(run())
