"""Token-length distributions for ``--llm-input-tokens`` / ``--llm-output-tokens``.

``512`` (fixed), ``128:2048`` (uniform, inclusive), ``normal:512,64`` (mean, sd; clamped to
at least 1). Sampled with a seeded :class:`random.Random`, so a run is reproducible.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from llm_users.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Lengths:
    kind: str  # "fixed" | "uniform" | "normal"
    a: float
    b: float = 0.0
    text: str = ""

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        return max(1, round(rng.gauss(self.a, self.b)))

    def describe(self) -> str:
        return self.text


def parse_lengths(text: str, option: str) -> Lengths:
    """Read ``512``, ``128:2048`` or ``normal:512,64``; a clear error naming the option otherwise."""
    t = str(text).strip()
    bad = ConfigError(f"{option}: cannot read {text!r}; use 512, 128:2048 (uniform) or normal:512,64")
    try:
        if t.startswith("normal:"):
            mean, sd = (float(x) for x in t[len("normal:"):].split(","))
            if mean < 1 or sd < 0:
                raise bad
            return Lengths("normal", mean, sd, t)
        if ":" in t:
            lo, hi = (int(x) for x in t.split(":"))
            if lo < 1 or hi < lo:
                raise bad
            return Lengths("uniform", lo, hi, t)
        n = int(t)
    except ValueError:
        raise bad from None
    if n < 1:
        raise bad
    return Lengths("fixed", n, 0, t)
