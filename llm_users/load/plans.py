"""What the load options say, parsed and checked (pure: no Locust, no gevent, no I/O): the
open-loop rate and in-flight cap, the stage plans of ``--llm-stages``/``--llm-steps`` and the
settle rule. The load profiles (:mod:`.profiles`) parse their options with these, so the
configuration can be read without importing the machinery that runs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llm_users.durations import parse_duration_s
from llm_users.errors import ConfigError


def parse_rate(text: Any) -> float | None:
    if text is None or str(text).strip() == "":
        return None
    try:
        r = float(text)
    except ValueError:
        r = -1.0
    if not (r >= 0 and math.isfinite(r)):
        raise ConfigError(f"--llm-rate must be a number of requests per second >= 0, got {text!r}")
    return r


def parse_cap(text: Any) -> int | None:
    if text is None or str(text).strip() in ("", "0"):
        return None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"--llm-max-inflight must be a whole number >= 1, got {text!r}")
    return n


SETTLE_SHARE = 0.2
SETTLE_MAX_S = 30.0


@dataclass(frozen=True, slots=True)
class StagePlan:
    load: float
    duration_s: float


def _seconds(text: str, option: str) -> float:
    s = parse_duration_s(text, option)
    if s <= 0:
        raise ConfigError(f"{option}: a stage lasts more than 0 s, got {text!r}")
    return s


def _number(text: str, option: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if v < 0:
        raise ConfigError(f"{option}: cannot read the load {text!r}; give a number >= 0")
    return v


def parse_stages(text: str) -> list[StagePlan]:
    """'50:60s,100:60s' -> two stages."""
    out = []
    for item in text.split(","):
        if not item.strip():
            continue
        load, sep, dur = item.partition(":")
        if not sep:
            raise ConfigError(f"--llm-stages: cannot read {item.strip()!r}; use LOAD:DURATION,... e.g. 50:60s,100:60s")
        out.append(StagePlan(_number(load, "--llm-stages"), _seconds(dur, "--llm-stages")))
    if not out:
        raise ConfigError("--llm-stages: no stage given; use e.g. 50:60s,100:60s")
    return out


def parse_steps(text: str) -> list[StagePlan]:
    """'8:64:8:5s' -> loads 8, 16, ..., 64, each 5 s."""
    parts = text.split(":")
    if len(parts) != 4:
        raise ConfigError(f"--llm-steps: cannot read {text!r}; use START:STOP:STEP:DURATION, e.g. 50:2000:50:60s")
    start, stop, step = (_number(p, "--llm-steps") for p in parts[:3])
    dur = _seconds(parts[3], "--llm-steps")
    if step <= 0 or stop < start:
        raise ConfigError(f"--llm-steps: {text!r} needs STEP > 0 and STOP >= START")
    n = int((stop - start) / step + 1e-9) + 1
    if n > 10_000:
        raise ConfigError(f"--llm-steps: {text!r} makes {n} stages; at most 10000")
    return [StagePlan(start + i * step, dur) for i in range(n)]


def settle_for(duration_s: float, settle_s: float | None) -> float:
    if settle_s is not None:
        return min(settle_s, duration_s)
    return min(SETTLE_SHARE * duration_s, SETTLE_MAX_S)
