"""The garbage collector in a load-generating process: old objects frozen once users are up.

CPython's full (generation 2) collection walks every tracked object in the process: Locust,
Flask, gevent and our own modules make that about 50,000 objects before a single user starts,
a 20-50 ms pass with the hub blocked (measured with ``gc.callbacks``, docs/benchmarks.md).
Such a pass comes whenever enough objects have survived into the old generation, and every
stamp due during it is late by the pass's length: it owns the TTFT p99.9, and the p99 of
whatever window it falls in.

``gc.freeze()`` moves every object alive at that moment to a permanent generation the
collector no longer walks (they are still freed by reference counting). :class:`GcTuner`
freezes once the user count has held still for one tick of the run's loop (after spawning,
and again after users are added), so later passes only walk what the test itself keeps; it
unfreezes when the test stops. Each freeze is preceded by one collection of what is not
frozen yet, so cyclic garbage made since the last freeze is freed, not frozen (Locust's
spawn handler left a few MB of argparse cycles per stage change before
``locust_costs.cache_default_args``).

A user stopped by a stage going down was frozen with everything it held: its cycles (a
greenlet and its frames; in SDK mode the client's httpx pool and hooks, about 0.5 MB a user)
are garbage inside the frozen heap, which no pass walks. The soak (bench/soak.py, issue 33)
saw SDK-mode closed-loop workers grow 98 -> 131 MB in 5 minutes of stages. Those are freed by
a full pass over an unfrozen heap, which costs 20-50 ms raw and up to 0.5 s in SDK mode
(the SDKs' modules and models): so it is done (1) when the user count has held at 0 for a
tick (nothing is measured then), and (2) at a freeze after the count went down, at most once
every :data:`FULL_EVERY_S` seconds. Garbage frozen in between waits for the next one: bounded
by what the stages stop in that time, not growing with the run.

``LOCUST_LLM_GC=tick`` (an experiment, issue 14) freezes again at every tick while the count
holds: in-flight streams' objects then leave the young generations within a second, so a
generation-1 pass walks about a second of survivors instead of several; cyclic garbage made
during the test waits for the unfreeze at its stop.

``LOCUST_LLM_GC=off`` keeps CPython's behaviour (to measure the difference, set it in the
environment of ``bench/client_overhead.py``: the clients inherit it; docs/benchmarks.md).
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable

ENV = "LOCUST_LLM_GC"
MODES = ("freeze", "tick", "off")
#: At most one full pass after a freeze whose count went down, per this many seconds (docstring).
FULL_EVERY_S = 300.0


class GcTuner:
    """Freezes the heap once the user count is steady; unfreezes at test stop."""

    def __init__(self, mode: str | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        mode = mode or os.environ.get(ENV) or "freeze"
        self.mode = mode if mode in MODES else "freeze"
        self.frozen_at: int | None = None  # the user count of the last freeze
        self.freezes = 0
        self.full_passes = 0  # unfreeze + full collection (stopped users' garbage freed)
        self._last: int | None = None
        self._prefrozen = False  # start(): the start-up heap frozen before any user
        self._clock = clock
        self._full_at = clock()

    def start(self) -> None:
        """At test start, before any user: the start-up heap (Locust, Flask, these modules)
        collected and frozen, so the freeze once users hold walks only what they made. That
        first full pass took 75 ms on a slow VM inside the measured window, and a calm 4-user
        run's loop lag p99 read 12-25 ms (tests/e2e/test_selfcheck.py)."""
        if self.mode == "off":
            return
        gc.collect()
        gc.freeze()
        self._prefrozen = True

    def tick(self, users: int) -> bool:
        """Once per tick of the run's loop; True when it froze the heap."""
        last, self._last = self._last, users
        if self.mode == "off":
            return False
        if not users:
            if last == 0 and self.frozen_at is not None and self.mode != "tick":
                self._full_pass()  # held at 0: nothing in flight to delay
                self.frozen_at = None
            return False
        if users != last or (users == self.frozen_at and self.mode != "tick"):
            return False
        if self.mode != "tick":  # garbage is freed, not frozen (docstring)
            went_down = self.frozen_at is not None and users < self.frozen_at
            if went_down and self._clock() - self._full_at >= FULL_EVERY_S:
                self._full_pass()
            else:
                gc.collect()
        gc.freeze()
        self.frozen_at = users
        self.freezes += 1
        return True

    def _full_pass(self) -> None:
        gc.unfreeze()
        gc.collect()
        self.full_passes += 1
        self._full_at = self._clock()

    def stop(self) -> None:
        if self.frozen_at is not None or self._prefrozen:
            gc.unfreeze()
        self._prefrozen = False
        self.frozen_at = None
        self._last = None
