"""Cost of a run from the server's token counts and prices the user gives (``--llm-price
in=X,out=Y[,cached_in=Z][,currency=USD]``, currency per million tokens; no vendor prices are
built in: they change). Without ``currency=`` the figures are in "price units" (whatever unit the
prices were given in), and say so: a bare number reads as if it had a currency.

Counted over the measured requests (warm-up and cool-down excluded, as every other figure),
failures included when the server reported their tokens. Cached prompt tokens (Anthropic
``cache_read_input_tokens``, Gemini ``cachedContentTokenCount``, OpenAI-style
``cached_tokens``) are priced at ``cached_in`` when given; Anthropic counts them apart from
``input_tokens``, the others inside ``prompt_tokens`` (the descriptor's ``cached_in_prompt``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llm_users.errors import ConfigError
from llm_users.metrics import RequestRecord
from llm_users.protocols.backend import find_backend

_CACHED_KEYS = ("cache_read_input_tokens", "cachedContentTokenCount", "cached_tokens", "cached_input_tokens")


def add_arguments(opt: Any) -> None:
    opt("--llm-price", "prices per million tokens for the cost figures: in=X,out=Y[,cached_in=Z][,currency=USD] "
        "(no currency: the figures say 'price units')")


@dataclass(frozen=True, slots=True)
class Prices:
    input: float
    output: float
    cached_input: float | None = None
    currency: str = ""
    text: str = ""


def parse_prices(text: str) -> Prices:
    """``in=3,out=15,cached_in=0.3`` -> Prices; a one-line error naming the option otherwise."""
    fields: dict[str, str] = {}
    for part in str(text).split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ConfigError(f"--llm-price: cannot read {part.strip()!r}; use in=X,out=Y[,cached_in=Z][,currency=USD]")
        fields[key.strip().lower()] = value.strip()
    unknown = set(fields) - {"in", "out", "cached_in", "currency"}
    if unknown or "in" not in fields or "out" not in fields:
        raise ConfigError(f"--llm-price needs in= and out= (and optionally cached_in=, currency=), got {text!r}")
    try:
        prices = {k: float(v) for k, v in fields.items() if k != "currency"}
    except ValueError:
        raise ConfigError(f"--llm-price: prices must be numbers, got {text!r}") from None
    if any(v < 0 for v in prices.values()):
        raise ConfigError(f"--llm-price: prices must be >= 0, got {text!r}")
    return Prices(prices["in"], prices["out"], prices.get("cached_in"), fields.get("currency", ""), text)


def cached_tokens(rec: RequestRecord) -> int:
    server = rec.server or {}
    for key in _CACHED_KEYS:
        v = server.get(key)
        if isinstance(v, int | float):
            return int(v)
    return 0


def _cached_in_prompt(backend: str) -> bool:
    b = find_backend(backend)
    return b is None or b.cached_in_prompt


class CostMeter:
    def __init__(self, prices: Prices) -> None:
        self.prices = prices
        self.requests = 0
        self.input_tokens = 0  # uncached prompt tokens
        self.cached_input_tokens = 0
        self.output_tokens = 0

    def add(self, rec: RequestRecord) -> None:
        if rec.warmup or rec.cooldown:
            return
        if rec.input_tokens is None and rec.output_tokens is None:
            return
        self.requests += 1
        cached = cached_tokens(rec)
        prompt = rec.input_tokens or 0
        uncached = max(0, prompt - cached) if _cached_in_prompt(rec.backend) else prompt
        self.input_tokens += uncached
        self.cached_input_tokens += cached
        self.output_tokens += rec.output_tokens or 0

    def summary(self) -> dict[str, Any]:
        p = self.prices
        cached_price = p.cached_input if p.cached_input is not None else p.input
        input_cost = self.input_tokens * p.input / 1e6
        cached_cost = self.cached_input_tokens * cached_price / 1e6
        output_cost = self.output_tokens * p.output / 1e6
        total = input_cost + cached_cost + output_cost
        return {
            "currency": p.currency,
            "prices_per_million": {"in": p.input, "out": p.output, "cached_in": p.cached_input},
            "prices_text": p.text,
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "output_tokens": self.output_tokens,
            "input_cost": input_cost,
            "cached_input_cost": cached_cost,
            "output_cost": output_cost,
            "total": total,
            "per_request": total / self.requests if self.requests else None,
            "per_1k_output_tokens": total / self.output_tokens * 1000 if self.output_tokens else None,
        }


#: What the figures are in when ``--llm-price`` names no currency.
NO_CURRENCY = "price units"


def unit(cost: dict[str, Any]) -> str:
    """The currency ``--llm-price`` gave, else :data:`NO_CURRENCY`."""
    return cost.get("currency") or NO_CURRENCY


def console_line(cost: dict[str, Any]) -> str:
    """``cost: total ... over N requests; per request ...; per 1k output tokens ...``, each in its unit."""
    cur = f" {unit(cost)}"
    per_k = cost["per_1k_output_tokens"]
    per_r = cost["per_request"]
    return (f"cost: total {cost['total']:.4f}{cur} over {cost['requests']} requests; "
            f"per request {'-' if per_r is None else f'{per_r:.6f}'}{cur}; "
            f"per 1k output tokens {'-' if per_k is None else f'{per_k:.6f}'}{cur}")


def attach(environment: Any, run: Any) -> CostMeter | None:
    """Master or local runner, with --llm-price (``run.config.cost``): meter the merged records, add ``cost``."""
    prices = run.config.cost
    collector = getattr(run, "collector", None)
    if prices is None or collector is None:
        return None
    meter = CostMeter(prices)
    collector.observers.append(meter.add)
    run.summary_hooks.append(lambda summary: summary.__setitem__("cost", meter.summary()))
    return meter
