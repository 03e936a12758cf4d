"""Sampling settings shared by every protocol, with the project's fixed defaults.

Temperature 0, top_p 1 and a fixed output length make every request do the same work; each
protocol module expresses them in its own dialect (or says it cannot).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class Sampling:
    max_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    ignore_eos: bool = True
    min_tokens: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
