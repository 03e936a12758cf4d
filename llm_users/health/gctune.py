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
unfreezes when the test stops. Each freeze is preceded by one full collection of what is not
frozen yet, so cyclic garbage made since the last freeze is freed, not frozen: Locust's worker
builds a new argparse parser per option on every spawn message (``default_args_dict()`` in its
``spawn`` handler), a few MB of cycles per stage change, and the soak (bench/soak.py, issue 33)
saw a closed-loop worker grow 53 -> 61 MB in 15 minutes of stages (SDK mode: 98 -> 131 MB in 5)
while every freeze kept that garbage until the test's stop. The pass walks only the objects
made since the last freeze (new users, the spawn's garbage), once per user-count change.

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

ENV = "LOCUST_LLM_GC"
MODES = ("freeze", "tick", "off")


class GcTuner:
    """Freezes the heap once the user count is steady; unfreezes at test stop."""

    def __init__(self, mode: str | None = None) -> None:
        mode = mode or os.environ.get(ENV) or "freeze"
        self.mode = mode if mode in MODES else "freeze"
        self.frozen_at: int | None = None  # the user count of the last freeze
        self.freezes = 0
        self._last: int | None = None

    def tick(self, users: int) -> bool:
        """Once per tick of the run's loop; True when it froze the heap."""
        last, self._last = self._last, users
        if self.mode == "off" or not users or users != last:
            return False
        if users == self.frozen_at and self.mode != "tick":
            return False
        if self.mode != "tick":  # what the spawn left behind is freed, not frozen (docstring)
            gc.collect()
        gc.freeze()
        self.frozen_at = users
        self.freezes += 1
        return True

    def stop(self) -> None:
        if self.frozen_at is not None:
            gc.unfreeze()
        self.frozen_at = None
        self._last = None
