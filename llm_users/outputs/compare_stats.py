"""llm-compare's statistics, read from report directories only (summary.json, requests.jsonl):
the runs (:func:`load_run`), the headline metrics, the bootstrap verdicts, the ``--fail-on``
rules and the side-by-side table. The command line (:mod:`.compare`) and the HTML page
(:mod:`.compare_html`) both use it.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from llm_users.outputs.reasoning_view import reasoned

#: Latency metrics with per-request values in requests.jsonl (ms), for the bootstrap.
RECORD_METRICS = {"ttft": "ttft_ns", "ttfb": "ttfb_ns", "tpot": "tpot_ns", "e2e": "e2e_ns", "ttfo": "ttfo_ns",
                  "ttst": "ttst_ns"}
LATENCY_STATS = ("p50", "p90", "p99", "mean")
#: metric -> True when higher is better
DIRECTION = {"output_tokens_per_s": True, "requests_per_s": True, "goodput_rps": True, "inputs_per_s": True,
             "input_tokens_per_s": True}


class CompareError(Exception):
    """A run directory that cannot be read, or a bad --fail-on expression: one line."""


@dataclass
class Run:
    path: Path
    label: str
    summary: dict[str, Any]
    values: dict[str, list[float]] = field(default_factory=dict)  # metric -> per-request ms (measured, ok)
    metrics: dict[str, float | None] = field(default_factory=dict)


def load_run(path: str | Path) -> Run:
    d = Path(path)
    spath = d / "summary.json"
    try:
        summary = orjson.loads(spath.read_bytes())
    except FileNotFoundError:
        raise CompareError(f"{d}: no summary.json (is it a --llm-report directory?)") from None
    except orjson.JSONDecodeError as e:
        raise CompareError(f"{spath}: not valid JSON ({e})") from None
    run = Run(d, d.name or str(d), summary)
    values: dict[str, list[float]] = {m: [] for m in RECORD_METRICS}
    rpath = d / "requests.jsonl"
    if rpath.exists():
        with rpath.open("rb") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = orjson.loads(line)
                except orjson.JSONDecodeError:
                    raise CompareError(f"{rpath}, line {n}: not valid JSON") from None
                if r.get("warmup") or r.get("cooldown") or r.get("status") != "ok":
                    continue
                for m, key in RECORD_METRICS.items():
                    v = r.get(key)
                    if v is not None:
                        values[m].append(v / 1e6)
    run.values = values
    run.metrics = headline(summary)
    return run


def headline(summary: dict[str, Any]) -> dict[str, float | None]:
    """The flat metric table: ``ttft.p50`` (ms), ``output_tokens_per_s``, ``failures``, ..."""
    ov = summary.get("overall") or {}
    out: dict[str, float | None] = {}
    for m in ("ttft", "ttfo", "ttst", "ttfb", "itl", "tpot", "e2e"):  # ttfo/ttst: absent from older summaries
        for k in LATENCY_STATS:
            out[f"{m}.{k}"] = (ov.get(m) or {}).get(k)
    for k in ("requests", "failures", "output_tokens_per_s", "requests_per_s", "input_tokens", "output_tokens"):
        out[k] = ov.get(k)
    if reasoned(ov):
        out["reasoning_tokens"] = ov["reasoning"].get("reasoning_tokens")
        out["answer_tokens"] = ov["reasoning"].get("answer_tokens")
    if ov.get("request_kinds"):  # embeddings, rerank: their throughput (a chat run's would repeat requests_per_s)
        for k in ("inputs", "inputs_per_s", "input_tokens_per_s"):
            out[k] = ov.get(k)
    req = ov.get("requests") or 0
    out["error_rate"] = (ov.get("failures") or 0) / req if req else None
    slo = ov.get("slo")
    if slo:
        out["goodput_rps"] = slo.get("goodput_rps")
    cost = summary.get("cost")
    if cost:
        out["cost.per_1k_output_tokens"] = cost.get("per_1k_output_tokens")
        out["cost.total"] = cost.get("total")
    return out


def _pct(sorted_values: list[float], p: float) -> float:
    k = max(0, min(len(sorted_values) - 1, math.ceil(p / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


def _stat(values: list[float], stat: str) -> float:
    if stat == "mean":
        return sum(values) / len(values)
    return _pct(sorted(values), float(stat[1:]))


def bootstrap(a: list[float], b: list[float], stat: str, resamples: int, rng: random.Random,
              confidence: float = 0.99) -> tuple[float, float, float]:
    """(point estimate, CI low, CI high) of stat(b) - stat(a), percentile bootstrap."""
    point = _stat(b, stat) - _stat(a, stat)
    diffs = []
    for _ in range(resamples):
        diffs.append(_stat(rng.choices(b, k=len(b)), stat) - _stat(rng.choices(a, k=len(a)), stat))
    diffs.sort()
    tail = (1 - confidence) / 2 * 100
    return point, _pct(diffs, tail), _pct(diffs, 100 - tail)


@dataclass
class Verdict:
    metric: str
    delta_ms: float
    low: float
    high: float
    rel: float | None
    verdict: str  # "regressed" | "improved" | "no significant difference" | "too few requests"


def verdicts(base: Run, other: Run, resamples: int, min_effect: float, seed: int = 0,
             confidence: float = 0.99) -> list[Verdict]:
    out = []
    rng = random.Random(seed)
    ttfo = any(reasoned(r.summary.get("overall") or {}) for r in (base, other))  # else TTFO is TTFT
    for m in ("ttft", *(("ttfo",) if ttfo else ()), "tpot", "e2e"):
        a, b = base.values.get(m) or [], other.values.get(m) or []
        for stat in ("p50", "p99"):
            name = f"{m}.{stat}"
            # a tail percentile needs a few values beyond it in each run, or its bootstrap is noise
            need = max(10, math.ceil(5 / (1 - float(stat[1:]) / 100)))
            if len(a) < need or len(b) < need:
                out.append(Verdict(name, float("nan"), float("nan"), float("nan"), None, "too few requests"))
                continue
            n = max(50, min(resamples, int(4_000_000 / (len(a) + len(b)))))  # bounded work for big runs
            point, low, high = bootstrap(a, b, stat, n, rng, confidence)
            ref = _stat(a, stat)
            rel = point / ref if ref else None
            big = rel is not None and abs(rel) > min_effect
            if low > 0 and big:
                v = "regressed"
            elif high < 0 and big:
                v = "improved"
            else:
                v = "no significant difference"
            out.append(Verdict(name, point, low, high, rel, v))
    return out


_RULE = re.compile(r"^\s*([a-z0-9_.]+)\s*(>=|<=|>|<)\s*([+-]?)([0-9]*\.?[0-9]+)\s*(%|ms|s)?\s*$")


@dataclass(frozen=True)
class Rule:
    text: str
    metric: str
    op: str
    signed: bool
    value: float
    unit: str

    def check(self, base: dict[str, float | None], other: dict[str, float | None]) -> tuple[bool, str]:
        if self.metric not in other:
            raise CompareError(f"--fail-on {self.text!r}: unknown metric {self.metric!r} "
                               f"(known: {', '.join(sorted(other))})")
        b, o = base.get(self.metric), other.get(self.metric)
        if o is None or (self.signed and b is None):
            return False, f"{self.text}: no value"
        value = self.value * (1000 if self.unit == "s" else 1)
        if self.signed:
            if self.unit == "%":
                if not b:
                    return False, f"{self.text}: baseline is 0"
                x = (o - b) / b * 100
                shown = f"{x:+.1f}%"
            else:
                x = o - b
                shown = f"{x:+.3g}"
        else:
            x = o
            shown = f"{x:.4g}"
        hit = {">": x > value, ">=": x >= value, "<": x < value, "<=": x <= value}[self.op]
        return hit, f"{self.text}: {shown}"


def parse_rules(text: str | None) -> list[Rule]:
    rules = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        m = _RULE.match(part)
        if not m:
            raise CompareError(f"--fail-on: cannot read {part.strip()!r}; use e.g. ttft.p50>+10%, e2e.p99>+200ms, "
                               f"output_tokens_per_s<-5%, failures>0")
        metric, op, sign, num, unit = m.groups()
        value = float(num) * (-1 if sign == "-" else 1)
        rules.append(Rule(part.strip(), metric, op, bool(sign), value, unit or ""))
    return rules


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.0f}"
    return str(v)


def table(runs: list[Run]) -> list[list[str]]:
    """Rows: metric, then each run's value, then for each non-baseline run its delta."""
    base = runs[0].metrics
    ttfo = any(reasoned(r.summary.get("overall") or {}) for r in runs)  # without reasoning TTFO repeats TTFT
    keys = [k for k in base if any(r.metrics.get(k) is not None for r in runs) and (ttfo or not k.startswith("ttfo."))]
    rows = []
    for k in keys:
        row = [k] + [_fmt(r.metrics.get(k)) for r in runs]
        for r in runs[1:]:
            b, o = base.get(k), r.metrics.get(k)
            if b is None or o is None:
                row.append("-")
            else:
                pct = f" ({(o - b) / b * 100:+.1f}%)" if b else ""
                row.append(f"{o - b:+.4g}{pct}")
        rows.append(row)
    return rows
