"""Service-level objectives and goodput: ``--llm-slo ttft=500ms,tpot=50ms,e2e=30s``.

A request is good when it succeeded and met every SLO given; goodput is good requests per
second of the measured window (vLLM's definition). Failures count as misses.
"""

from __future__ import annotations

from llm_users.durations import parse_duration_ns
from llm_users.errors import ConfigError
from llm_users.metrics import SLO_METRICS, slo_results

__all__ = ["METRICS", "parse_slos", "slo_results"]
METRICS = SLO_METRICS


def parse_slos(text: str | None) -> dict[str, float]:
    """'ttft=500ms,tpot=50ms' -> {'ttft': 5e8, 'tpot': 5e7} (nanoseconds). Limits are
    durations (:mod:`llm_users.durations`: a unit is required)."""
    if not text:
        return {}
    out: dict[str, float] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        metric = name.strip().lower()
        if not sep or metric not in METRICS:
            raise ConfigError(f"--llm-slo: cannot read {item.strip()!r}; use e.g. ttft=500ms,tpot=50ms,e2e=30s "
                              f"(metrics: {', '.join(METRICS)}; units ns, us, ms, s, m, h)")
        try:
            out[metric] = parse_duration_ns(value, f"--llm-slo {metric}")
        except ConfigError as e:
            raise ConfigError(f"{e} (whole option: e.g. ttft=500ms,tpot=50ms,e2e=30s)") from None
    return out
