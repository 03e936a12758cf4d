"""Users started out of phase (issue 15).

Locust starts ``-r`` users at once, every second (its dispatcher sends ``floor(r)`` users each
``floor(r)/r`` s). With fixed-length closed-loop streams those users then stream in phase for
the whole run: their chunks reach the client in bursts that one event loop serves one after
another, and the last stamp of each burst is late by the burst's length. Real traffic is not
phase-locked, so by default each new user waits a random offset within its spawn interval
(bounded by 1 s) before its first request: a batch spreads over the interval
(``--llm-spawn-spread off`` keeps Locust's bursts). Users added mid-run (the web UI's Edit
form, a load shape) start the same way, since every user passes through here.

Every request being the same length, loops can re-align over a long run; ``--llm-think-jitter``
adds a random pause of up to the given time before each later request.

Each user draws from its own random generator, seeded from ``--llm-seed`` (where the run has
it), the worker's index and the user's number: the same seed gives the same offsets.
"""

from __future__ import annotations

import random
from typing import Any

MAX_INTERVAL_S = 1.0


def user_rng(seed: str | None, environment: Any, user_number: int) -> random.Random:
    """The user's own generator: seeded by (``seed``, the run's --llm-seed, worker index, user
    number) when a seed is given, from the OS otherwise."""
    if seed is None or str(seed).strip() == "":
        return random.Random()
    worker = getattr(getattr(environment, "runner", None), "worker_index", 0)
    return random.Random(f"{seed}/{worker}/{user_number}")


def spawn_interval(environment: Any) -> float:
    """How long Locust takes to start the next batch, at most 1 s. A local runner knows it from
    its dispatcher; a worker is not told the rate, and batches come about every second."""
    dispatcher = getattr(getattr(environment, "runner", None), "_users_dispatcher", None)
    wait = getattr(dispatcher, "_wait_between_dispatch", None)
    if isinstance(wait, int | float) and wait > 0:
        return min(float(wait), MAX_INTERVAL_S)
    return MAX_INTERVAL_S


def first_request_delay(spread: bool, environment: Any, rng: random.Random) -> float:
    """Seconds a new user waits before its first request (0 with the spread off)."""
    return rng.uniform(0.0, spawn_interval(environment)) if spread else 0.0


def think_jitter(jitter_s: float, rng: random.Random) -> float:
    """The extra pause before a later request (0 when off)."""
    return rng.uniform(0.0, jitter_s) if jitter_s > 0 else 0.0
