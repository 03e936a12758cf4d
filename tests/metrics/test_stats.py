"""metrics/stats.py: the statistics of the records (warm-up, failures, throughput, connections,
tool calls, embeddings' inputs) and their exact merge through the wire form."""

from __future__ import annotations

import json

import msgpack
import pytest

from llm_users.metrics import RequestRecord, Stats, StatsByName
from llm_users.outputs.console import kinds_line
from tests.metrics.records import embed, rec, stats
from tests.metrics.records import streamed as _streamed


def test_stats_excludes_warmup_and_counts_failures() -> None:
    s = StatsByName()
    s.add(rec(0, warmup=True))
    s.add(rec(1))
    s.add(rec(2, status="error", error_category="http_429"))
    s.add(rec(3, cooldown=True))
    out = s.summary()["overall"]
    assert out["requests"] == 2 and out["failures"] == 1 and out["successes"] == 1
    assert out["excluded_warmup"] == 1 and out["excluded_cooldown"] == 1
    assert out["failures_by_category"] == {"http_429": 1}
    assert out["ttft"]["count"] == 1 and out["itl"]["count"] == 10
    assert out["output_tokens"] == 11


def test_stats_by_name_wire_roundtrip() -> None:
    a, b = StatsByName(), StatsByName()
    for i in range(50):
        (a if i % 2 else b).add(rec(i, name=f"/n{i % 3}"))
    merged = StatsByName()
    merged.merge_wire(a.to_wire())
    merged.merge_wire(b.to_wire())
    direct = StatsByName()
    for i in range(50):
        direct.add(rec(i, name=f"/n{i % 3}"))
    assert merged.summary() == direct.summary()


def test_throughput_over_measured_window() -> None:
    s = Stats()
    s.add(rec(0, start_time=10.0, e2e_ns=1_000_000_000, output_tokens=100))
    s.add(rec(1, start_time=11.0, e2e_ns=1_000_000_000, output_tokens=100))
    out = s.summary()
    assert out["duration_s"] == pytest.approx(2.0)
    assert out["output_tokens_per_s"] == pytest.approx(100.0)
    assert out["requests_per_s"] == pytest.approx(1.0)


def test_interrupted_reconnects_and_sampling_issues_count_and_merge() -> None:
    """Issue 9: interrupted requests are counted apart from successes and failures (their TTFT
    is in no histogram); stale reconnects and sampling issues are counted; all merge exactly."""
    a, b = Stats(), Stats()
    a.add(rec(1, status="interrupted", error_category="interrupted", ttft_ns=7_000_000))
    a.add(rec(2, reconnected=True, sampling_issues=["over_max_tokens", "model_mismatch"]))
    b.add(rec(3, sampling_issues=["over_max_tokens"]))
    b.add(rec(4, status="error", error_category="empty_response", reconnected=True))
    merged = Stats()
    for s in (a, b):
        merged.merge_wire(msgpack.unpackb(msgpack.packb(s.to_wire())))
    out = merged.summary()
    assert out["interrupted"] == 1 and out["requests"] == 3 and out["failures"] == 1
    assert out["ttft"]["count"] == 2  # the interrupted request's 7 ms is not among them
    assert out["stale_reconnects"] == 2
    assert {k: v["requests"] for k, v in out["sampling_issues"].items()} == {"over_max_tokens": 2,
                                                                            "model_mismatch": 1}
    assert all(v["hint"] for v in out["sampling_issues"].values())
    assert out["failures_by_category"] == {"empty_response": 1}


def test_connections_opened_count_measured_requests_and_merge_exactly() -> None:
    """A measured request that opened its own connection (connect_ns) counts, failed or not;
    warm-up and interrupted ones do not; the connect times merge exactly across workers."""
    a, b = Stats(), Stats()
    a.add(rec(1, connect_ns=400_000))
    a.add(rec(2, connect_ns=9_000_000, warmup=True))  # excluded with its request
    a.add(rec(3, connect_ns=9_000_000, status="interrupted", error_category="interrupted"))
    b.add(rec(4, connect_ns=2_400_000, status="error", error_category="connection_reset"))
    b.add(rec(5))  # a reused connection
    merged = Stats()
    for s in (a, b):
        merged.merge_wire(msgpack.unpackb(msgpack.packb(s.to_wire())))
    out = merged.summary()
    assert out["requests"] == 3 and out["connections_opened"] == 2
    assert out["connect"]["count"] == 2 and out["connect"]["min"] == 0.4 and out["connect"]["max"] == 2.4
    assert Stats().summary()["connections_opened"] == 0


def test_token_reasons_are_counted_and_merge_exactly() -> None:
    from llm_users.metrics import Stats, check_usage

    a, b = Stats(), Stats()
    for stats, n in ((a, 2), (b, 3)):  # noqa: F402 (the loop variable shadows the imported builder)
        for _ in range(n):
            rec = _streamed(2)
            rec.e2e_ns = 5000
            rec.usage(0, 0)
            check_usage(rec, chunk_has_a_token=True, prompt_tokens=lambda: 4)
            stats.add(rec)
        plain = _streamed(2)
        plain.e2e_ns = 5000
        plain.settle_tokens()  # no usage at all
        stats.add(plain)
    a.merge_wire(b.to_wire())
    s = a.summary()
    assert s["estimated_token_requests"] == 7
    assert {k: v["requests"] for k, v in s["estimated_token_reasons"].items()} == {"no_usage": 2,
                                                                                  "usage_implausible": 5}


def rec_tools_counts(i: int, **kw) -> RequestRecord:
    base = dict(request_id=f"r{i}", name="/v1/chat/completions", backend="vllm", model="m", start_time=100.0 + i,
                ttfb_ns=1_000_000, ttft_ns=50_000_000, e2e_ns=150_000_000, itl_ns=[10_000_000] * 10,
                output_tokens=11, input_tokens=7, tokens_source="usage")
    base.update(kw)
    return RequestRecord(**base)


def test_counts_merge_exactly_through_the_wire() -> None:
    records = [rec_tools_counts(0, tool_call=True), rec_tools_counts(1, structured_valid=True), rec_tools_counts(2, structured_valid=False),
               rec_tools_counts(3, tool_call=True, structured_valid=True), rec_tools_counts(4, warmup=True, tool_call=True),
               rec_tools_counts(5, status="error", error_category="http_500", tool_call=True)]
    whole = StatsByName()
    for r in records:
        whole.add(r)
    merged = Stats()
    for r in records:  # one worker per record, shipped as Locust ships it
        part = Stats()
        part.add(r)
        merged.merge_wire(msgpack.unpackb(msgpack.packb(part.to_wire())))
    for ov in (whole.summary()["overall"], merged.summary()):
        assert (ov["tool_calls"], ov["structured_valid"], ov["structured_invalid"]) == (2, 2, 1)
    assert merged.summary() == whole.total.summary()
    assert Stats().summary()["tool_calls"] == 0


def test_summary_figures_and_exact_merge() -> None:
    ov = stats().summary()["overall"]
    dur = ov["duration_s"]
    assert ov["request_kinds"] == {"embed": 101, "rerank": 10} and ov["requests"] == 111
    assert ov["inputs"] == 100 * 4 + 10 * 8  # successful requests only
    assert ov["inputs_per_s"] == pytest.approx(480 / dur)
    assert ov["input_tokens_per_s"] == pytest.approx((100 * 256 + 10 * 100) / dur)
    assert ov["ttft"]["count"] == 0 and ov["e2e"]["count"] == 110 and ov["ttfb"]["count"] == 110
    assert ov["failures_by_category"] == {"wrong_result_count": 1}
    by = stats().summary()["by_name"]
    assert by["/v1/rerank"]["inputs"] == 80 and by["/v1/embeddings"]["request_kinds"] == {"embed": 101}
    # two workers' halves merge to the whole
    a, b = StatsByName(), StatsByName()
    for i in range(100):
        (a if i % 2 else b).add(embed(i, e2e_ms=40 + i % 10))
    merged = StatsByName()
    merged.merge_wire(json.loads(json.dumps(a.to_wire())))
    merged.merge_wire(json.loads(json.dumps(b.to_wire())))
    whole = StatsByName()
    for i in range(100):
        whole.add(embed(i, e2e_ms=40 + i % 10))
    assert merged.summary() == whole.summary()


def test_a_chat_request_is_one_input() -> None:
    s = StatsByName()
    s.add(RequestRecord("c", "/v1/chat/completions", "vllm", "m", start_time=1.0, e2e_ns=10**9, ttft_ns=10**8,
                        input_tokens=7))
    ov = s.summary()["overall"]
    assert ov["inputs"] == 1 and ov["request_kinds"] == {}
    assert kinds_line(ov) is None


def test_tpot_basis_counts_and_merges_exactly() -> None:
    """Issue 53 item 4: how many TPOTs counted the answer's tokens (reasoning hidden or summarised)
    and how many every output token; merged through the wire form exactly."""
    def answered(i: int, output: int, reasoning: int | None) -> RequestRecord:
        ttft = 50_000_000 + i * 1000
        r = rec(i, itl_ns=[10_000_000] * 9, e2e_ns=ttft + 90_000_000, ttfo_ns=ttft, output_tokens=output)
        r.chunks = 10
        r.usage(7, output, reasoning)
        return r
    recs = [answered(i, 40, 30) if i % 3 else answered(i, 10, None) for i in range(30)]
    whole, a, b = StatsByName(), StatsByName(), StatsByName()
    for i, r in enumerate(recs):
        whole.add(r)
        (a if i % 2 else b).add(r)
    ov = whole.summary()["overall"]
    assert ov["tpot_basis"] == {"all": 10, "answer": 20} and ov["tpot"]["count"] == 30
    assert ov["tpot"]["max"] == pytest.approx(10.0, rel=0.01)  # 90 ms / 9 answer tokens, never 90 / 39
    merged = StatsByName()
    merged.merge_wire(json.loads(json.dumps(a.to_wire())))
    merged.merge_wire(json.loads(json.dumps(b.to_wire())))
    assert merged.summary()["overall"]["tpot_basis"] == ov["tpot_basis"]
    assert Stats().summary()["tpot_basis"] == {"all": 0, "answer": 0}
