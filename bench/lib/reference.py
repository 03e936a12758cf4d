"""A fixed pure-Python loop, timed: this VM's speed at a moment (it moves by up to half between
hours), printed beside a bench's figures so that figures taken at different times can be read
together. The same loop runs in process (:func:`loop_ms`) or as its own process (:data:`SOURCE`,
pinned where the client runs: bench/server_shape.py)."""

from __future__ import annotations

import time

#: The loop as a program that prints its milliseconds (wall clock: pinned, at a fixed priority).
SOURCE = "import time\nt=time.perf_counter()\ns=0\nfor i in range(2_000_000): s+=i*i%7\nprint((time.perf_counter()-t)*1e3)"


def loop_ms() -> float:
    """The loop's CPU milliseconds in this process (``time.process_time``, as the merge bench
    times its rounds)."""
    t = time.process_time()
    s = 0
    for i in range(2_000_000):
        s += i * i % 7
    return round((time.process_time() - t) * 1e3, 1)
