"""slo.py: parsing SLOs and judging requests against them."""

from __future__ import annotations

import pytest

from llm_users.errors import ConfigError
from llm_users.metrics import RequestRecord, StatsByName
from llm_users.slo import parse_slos, slo_results


def test_parse() -> None:
    assert parse_slos("ttft=500ms,tpot=50ms,e2e=30s") == {"ttft": 5e8, "tpot": 5e7, "e2e": 3e10}
    assert parse_slos(None) == {} and parse_slos("") == {}


@pytest.mark.parametrize("bad", ["ttft", "latency=5ms", "ttft=fast", "ttft=5 parsecs",
                                 "ttft=200"])  # a bare number: the unit is never guessed (durations.py)
def test_parse_errors_say_what_to_write(bad: str) -> None:
    with pytest.raises(ConfigError, match="ttft=500ms"):
        parse_slos(bad)


def test_judging_and_goodput() -> None:
    slos = parse_slos("ttft=100ms,e2e=1s")
    fast = RequestRecord("a", "n", "b", "m", start_time=0.0, ttft_ns=50e6, e2e_ns=500e6, output_tokens=5)
    slow = RequestRecord("b", "n", "b", "m", start_time=1.0, ttft_ns=150e6, e2e_ns=1e9, output_tokens=5)
    failed = RequestRecord("c", "n", "b", "m", start_time=1.5, status="error", e2e_ns=1e8)
    assert slo_results(fast, slos) == {"ttft": True, "e2e": True}
    assert slo_results(slow, slos) == {"ttft": False, "e2e": True}
    assert slo_results(failed, slos) == {"ttft": False, "e2e": False}
    s = StatsByName(slos)
    for r in (fast, slow, failed):
        s.add(r)
    out = s.summary()["overall"]["slo"]
    assert out["good_requests"] == 1
    assert out["goodput_rps"] == pytest.approx(1 / 2.0)  # window 0 .. 2.0 s
    assert out["share_meeting"] == {"ttft": pytest.approx(1 / 3), "e2e": pytest.approx(2 / 3)}
