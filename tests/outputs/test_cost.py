"""outputs/cost.py: price parsing, the meter's arithmetic, cached tokens per backend (the descriptor's rule)."""

from __future__ import annotations

import pytest

from llm_users.errors import ConfigError
from llm_users.metrics import RequestRecord
from llm_users.outputs.cost import CostMeter, console_line, parse_prices


def _rec(backend: str, inp: int, out: int, server: dict | None = None, warmup: bool = False) -> RequestRecord:
    r = RequestRecord("id", "n", backend, "m", input_tokens=inp, output_tokens=out, server=server)
    r.warmup = warmup
    return r


def test_parse() -> None:
    p = parse_prices("in=3, out=15,cached_in=0.3,currency=USD")
    assert (p.input, p.output, p.cached_input, p.currency) == (3.0, 15.0, 0.3, "USD")
    assert parse_prices("out=1,in=2").cached_input is None


@pytest.mark.parametrize("bad", ["in=3", "in=x,out=1", "in=1,out=2,foo=3", "3,15", "in=-1,out=2"])
def test_parse_errors(bad: str) -> None:
    with pytest.raises(ConfigError, match="--llm-price"):
        parse_prices(bad)


def test_meter_by_hand() -> None:
    m = CostMeter(parse_prices("in=3,out=15,cached_in=0.3,currency=USD"))
    m.add(_rec("vllm", 1000, 200))
    m.add(_rec("vllm", 5000, 100, {"cached_tokens": 4000}))  # OpenAI-style: cached inside prompt_tokens
    m.add(_rec("claude", 100, 50, {"cache_read_input_tokens": 900}))  # Anthropic: cached apart
    m.add(_rec("vllm", 10**6, 10**6, warmup=True))  # excluded, like every figure
    s = m.summary()
    # uncached 1000 + 1000 + 100 = 2100 at 3; cached 4000 + 900 = 4900 at 0.3; output 350 at 15
    assert s["input_tokens"] == 2100 and s["cached_input_tokens"] == 4900 and s["output_tokens"] == 350
    assert s["total"] == pytest.approx((2100 * 3 + 4900 * 0.3 + 350 * 15) / 1e6)
    assert s["per_request"] == pytest.approx(s["total"] / 3)
    assert s["per_1k_output_tokens"] == pytest.approx(s["total"] / 350 * 1000)
    assert "USD" in console_line(s) and f"{s['total']:.4f}" in console_line(s)


def test_no_currency_says_price_units() -> None:
    """Issue 53 item 10: with no currency= the figures are not bare numbers that read as if they had one."""
    m = CostMeter(parse_prices("in=3,out=15"))
    m.add(_rec("vllm", 1000, 200))
    line = console_line(m.summary())
    assert line == ("cost: total 0.0060 price units over 1 requests; per request 0.006000 price units; "
                    "per 1k output tokens 0.030000 price units")
    assert "price units" not in console_line(CostMeter(parse_prices("in=3,out=15,currency=EUR")).summary())


def test_the_cached_token_rule_is_the_descriptors(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend declared outside the package says whether its prompt count holds the cached tokens."""
    from dataclasses import replace

    from llm_users.protocols import backend as registry

    monkeypatch.setattr(registry, "_registered", {})
    claude = registry.get_backend("claude")
    registry.register(replace(claude, name="apart"))
    registry.register(replace(claude, name="inside", cached_in_prompt=True))
    m = CostMeter(parse_prices("in=1,out=1,cached_in=0.1"))
    m.add(_rec("apart", 100, 0, {"cache_read_input_tokens": 900}))
    m.add(_rec("inside", 1000, 0, {"cached_tokens": 400}))
    m.add(_rec("unknown", 1000, 0, {"cached_tokens": 400}))  # no descriptor: OpenAI-style, as before
    assert m.summary()["input_tokens"] == 100 + 600 + 600
