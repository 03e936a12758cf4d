"""Open-loop arrival laws: when each request is due, seeded. No I/O, no clock.

``--llm-arrival constant|poisson|gamma:K`` picks the law of the gaps between arrivals at a
rate ``r`` (requests/s):

- ``constant``: every gap is ``1/r``;
- ``poisson``: exponential gaps, mean ``1/r`` (a Poisson process);
- ``gamma:K``: gamma gaps with shape ``K`` and scale ``1/(r*K)``, mean ``1/r``. ``K`` is vLLM
  bench's *burstiness*: 1 is Poisson, below 1 burstier, above 1 more regular (the coefficient
  of variation of the gaps is ``1/sqrt(K)``).

Same seed, same stream of gaps. :func:`ks_exponential` is the one-sample Kolmogorov-Smirnov
statistic the tests (and anyone checking a schedule) use.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from llm_users.errors import ConfigError

LAWS = ("constant", "poisson", "gamma")


@dataclass(frozen=True, slots=True)
class ArrivalLaw:
    kind: str  # constant | poisson | gamma
    burstiness: float = 1.0

    def gap_s(self, rate: float, rng: random.Random) -> float:
        """One gap between consecutive arrivals, in seconds, at ``rate`` requests/s."""
        if rate <= 0:
            raise ValueError("rate must be > 0")
        if self.kind == "constant":
            return 1.0 / rate
        if self.kind == "poisson":
            return rng.expovariate(rate)
        return rng.gammavariate(self.burstiness, 1.0 / (rate * self.burstiness))

    def __str__(self) -> str:
        return f"gamma:{self.burstiness:g}" if self.kind == "gamma" else self.kind


def parse_arrival(text: str | None) -> ArrivalLaw:
    """'poisson' -> Poisson; 'gamma:0.5' -> gamma with burstiness 0.5; None -> poisson."""
    t = (text or "poisson").strip().lower()
    if t in ("constant", "poisson"):
        return ArrivalLaw(t)
    if t.startswith("gamma"):
        _, _, k = t.partition(":")
        try:
            burst = float(k) if k else 1.0
        except ValueError:
            burst = -1.0
        if not (burst > 0 and math.isfinite(burst)):
            raise ConfigError(f"--llm-arrival: cannot read {text!r}; gamma needs a burstiness K > 0, e.g. gamma:0.5")
        return ArrivalLaw("gamma", burst)
    raise ConfigError(f"--llm-arrival must be constant, poisson or gamma:K, got {text!r}")


def schedule_offsets(law: ArrivalLaw, rate: float, seed: int | None, count: int) -> list[float]:
    """The first ``count`` arrival times (seconds from the origin) of a schedule."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(count):
        t += law.gap_s(rate, rng)
        out.append(t)
    return out


def ks_exponential(gaps: list[float], rate: float) -> float:
    """Kolmogorov-Smirnov statistic D of ``gaps`` against the exponential law of ``rate``.
    At 5% significance the law is rejected when D > 1.358 / sqrt(n) (n > 35)."""
    xs = sorted(gaps)
    n = len(xs)
    if not n:
        raise ValueError("no gaps")
    d = 0.0
    for i, x in enumerate(xs):
        f = 1.0 - math.exp(-rate * x)
        d = max(d, (i + 1) / n - f, f - i / n)
    return d


def ks_critical(n: int, alpha: float = 0.05) -> float:
    """Asymptotic KS critical value: sqrt(-ln(alpha/2) / 2) / sqrt(n)."""
    return math.sqrt(-math.log(alpha / 2) / 2) / math.sqrt(n)
