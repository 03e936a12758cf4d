"""Service-level objectives and goodput: ``--llm-slo ttft=500ms,tpot=50ms,e2e=30s``.

A request is good when it succeeded and met every SLO given; goodput is good requests per
second of the measured window (vLLM's definition). Failures count as misses.
"""

from __future__ import annotations

import re

from .errors import ConfigError
from .metrics import RequestRecord

METRICS = ("ttft", "tpot", "e2e", "itl")
_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_ITEM = re.compile(r"^\s*(\w+)\s*=\s*([0-9]*\.?[0-9]+)\s*(ns|us|µs|ms|s)?\s*$")


def parse_slos(text: str | None) -> dict[str, float]:
    """'ttft=500ms,tpot=50ms' -> {'ttft': 5e8, 'tpot': 5e7} (nanoseconds). Bare numbers are ms."""
    if not text:
        return {}
    out: dict[str, float] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        m = _ITEM.match(item)
        if not m or m.group(1).lower() not in METRICS:
            raise ConfigError(f"--llm-slo: cannot read {item.strip()!r}; use e.g. ttft=500ms,tpot=50ms,e2e=30s "
                              f"(metrics: {', '.join(METRICS)}; units ns, us, ms, s)")
        out[m.group(1).lower()] = float(m.group(2)) * _UNITS[m.group(3) or "ms"]
    return out


def slo_results(rec: RequestRecord, slos: dict[str, float]) -> dict[str, bool]:
    """Which SLOs this request met (all False for a failure)."""
    if not rec.ok:
        return {k: False for k in slos}
    values = {"ttft": rec.ttft_ns, "tpot": rec.tpot_ns, "e2e": rec.e2e_ns,
              "itl": max(rec.itl_ns) if rec.itl_ns else 0}
    return {k: values[k] is not None and values[k] <= limit for k, limit in slos.items()}
