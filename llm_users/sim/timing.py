"""Seeded latency distributions: TTFT and the gap between chunks.

Every request gets its own ``random.Random`` derived from the simulator seed and the request's
sequence number (its arrival order), so a run with the same seed and the same arrival order
draws the same latencies. Samples are in nanoseconds and never negative.

``lognormal`` is parameterised by the mean and standard deviation of the latency itself (not
of its logarithm), so ``--ttft-ms 100 --ttft-dist lognormal --ttft-sd-ms 30`` has mean 100 ms.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


def request_rng(seed: int, seq: int, purpose: str) -> random.Random:
    """An RNG private to one request and one purpose ("timing", "fault"...)."""
    return random.Random(f"{seed}:{seq}:{purpose}")


@dataclass(frozen=True, slots=True)
class Dist:
    """A latency distribution in milliseconds; ``sample_ns`` draws one value in ns."""

    kind: str
    mean_ms: float
    sd_ms: float = 0.0

    @property
    def fixed(self) -> bool:
        return self.kind == "fixed" or self.sd_ms == 0.0

    @property
    def mean_ns(self) -> int:
        return int(round(self.mean_ms * 1e6))

    def sample_ns(self, rng: random.Random) -> int:
        if self.fixed:
            return self.mean_ns
        if self.kind == "normal":
            value = rng.gauss(self.mean_ms, self.sd_ms)
        elif self.kind == "lognormal":
            if self.mean_ms <= 0:
                return 0
            sigma2 = math.log1p((self.sd_ms / self.mean_ms) ** 2)
            mu = math.log(self.mean_ms) - sigma2 / 2
            value = rng.lognormvariate(mu, math.sqrt(sigma2))
        else:
            raise ValueError(f"unknown distribution {self.kind!r}")
        return max(0, int(round(value * 1e6)))
