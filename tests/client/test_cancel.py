"""--llm-cancel-after / --llm-cancel-rate: parsing, the seeded choice, the request state's
cut at the Nth chunk, the statistics' count, and the raw client abandoning a stream (its
connection closed, never reused) against the real simulator."""

from __future__ import annotations

import time

import pytest

from llm_users.client.cancel import CancelPlan, chosen, draw, parse_cancel
from llm_users.client.request_state import RequestState, mark_cancelled
from llm_users.client.stream import StreamClient, new_request_id
from llm_users.errors import Cancelled, ConfigError
from llm_users.metrics import RequestRecord, StatsByName
from llm_users.protocols import openai as oa
from llm_users.protocols.base import Content, Usage
from llm_users.protocols.sampling import Sampling
from tests.helpers import get_json, run_locust

MESSAGES = [{"role": "user", "content": "Tell me about streams."}]


@pytest.mark.parametrize(("after", "rate", "plan"), [
    ("20tokens", None, CancelPlan(after_tokens=20)),
    ("20 tokens", "0.25", CancelPlan(after_tokens=20, rate=0.25)),
    ("1token", "1", CancelPlan(after_tokens=1)),
    ("7 TOK", "0", CancelPlan(after_tokens=7, rate=0.0)),
    ("1.5s", None, CancelPlan(after_ns=1_500_000_000)),
    ("800ms", "0.5", CancelPlan(after_ns=800_000_000, rate=0.5)),
    (None, None, None), ("", "", None), ("off", None, None),
])
def test_the_options_read(after, rate, plan) -> None:
    assert parse_cancel(after, rate) == plan


@pytest.mark.parametrize(("after", "rate", "says"), [
    ("20", None, "give a number of tokens (20tokens, 20 tokens) or a duration"),
    ("soon", None, "cannot read 'soon'"),
    ("0tokens", None, "at least 1 token"),
    ("0s", None, "above 0"),
    ("2s", "1.5", "--llm-cancel-rate must be a share between 0 and 1"),
    ("2s", "half", "--llm-cancel-rate must be a share between 0 and 1"),
    (None, "0.5", "--llm-cancel-rate needs --llm-cancel-after"),
])
def test_bad_values_are_refused_with_a_sentence(after, rate, says) -> None:
    with pytest.raises(ConfigError) as e:
        parse_cancel(after, rate)
    assert says in str(e.value), str(e.value)


def test_the_choice_is_fixed_by_the_seed_and_takes_the_asked_share() -> None:
    plan = CancelPlan(after_tokens=3, rate=0.3)
    picks = [chosen(plan, "42", 0, u, i) is not None for u in range(20) for i in range(500)]
    again = [chosen(plan, "42", 0, u, i) is not None for u in range(20) for i in range(500)]
    other = [chosen(plan, "43", 0, u, i) is not None for u in range(20) for i in range(500)]
    assert picks == again  # the same seed cancels the same requests
    assert picks != other
    assert abs(sum(picks) / len(picks) - 0.3) < 0.015  # 10,000 draws: 0.3 +- 3 standard deviations
    assert [chosen(plan, "42", 1, 0, i) for i in range(50)] != [chosen(plan, "42", 0, 0, i) for i in range(50)]
    assert all(0.0 <= draw(None, 0, 0, i) < 1.0 for i in range(100))  # no seed: a per-process one
    assert all(chosen(CancelPlan(after_ns=1, rate=1.0), None, 0, 0, i) for i in range(100))
    assert not any(chosen(CancelPlan(after_ns=1, rate=0.0), "1", 0, 0, i) for i in range(100))
    assert chosen(None, "1", 0, 0, 0) is None


def test_the_state_cancels_at_the_nth_token_chunk_keeping_what_was_measured() -> None:
    rec = RequestRecord("r", "n", "vllm", "m")
    state = RequestState(rec, oa.OpenAIStreamParser(), cancel_chunks=3)
    t0 = state.start()
    state.response(200, t0 + 1_000_000)
    state.handle([Content("a", reasoning=True)], t0 + 10_000_000)  # reasoning chunks count
    state.handle([Content("b"), Usage(5, 2)], t0 + 20_000_000)
    with pytest.raises(Cancelled):
        state.handle([Content("c"), Content("d")], t0 + 30_000_000)
    assert rec.chunks == 3 and rec.ttft_ns == 10_000_000 and rec.itl_ns == [10_000_000, 10_000_000]
    mark_cancelled(rec, Cancelled("the client cancelled the request after 3 token chunks"), t0 + 31_000_000)
    assert rec.status == "cancelled" and rec.error_category == "cancelled" and not rec.ok
    assert rec.e2e_ns == 31_000_000 and rec.output_tokens is None and rec.partial_output_tokens == 2


def test_cancelled_records_are_counted_apart_and_merged_exactly() -> None:
    def rec(status: str, e2e: int) -> RequestRecord:
        r = RequestRecord("r", "n", "vllm", "m", start_time=1.0, t0_ns=1, ttft_ns=e2e // 2, e2e_ns=e2e,
                          output_tokens=10, status=status)
        r.error_category = None if status == "ok" else status
        return r

    workers = []
    for n_cancel in (3, 4):
        s = StatsByName()
        for _ in range(n_cancel):
            s.add(rec("cancelled", 1_000_000))
        s.add(rec("ok", 900_000_000))
        workers.append(s.to_wire())
    master = StatsByName()
    for w in workers:
        master.merge_wire(w)
    ov = master.summary()["overall"]
    assert ov["cancelled"] == 7 and ov["requests"] == 2 and ov["failures"] == 0
    assert ov["e2e"]["count"] == 2 and ov["e2e"]["min"] > 800  # ms: the cancelled ones stay out
    assert master.summary()["by_name"]["n"]["cancelled"] == 7


@pytest.fixture(scope="module")
def sim():
    from llm_users.sim.launcher import start_simulator

    with start_simulator(["--ttft-ms", "50", "--itl-ms", "20", "--output-tokens", "40", "--seed", "7"]) as s:
        yield s


def _send(client: StreamClient, plan: CancelPlan | None) -> RequestRecord:
    req = oa.build_request(model="m", messages=MESSAGES, sampling=Sampling(max_tokens=64), dialect="vllm")
    rec = RequestRecord(new_request_id(), req.name, "vllm", "m")
    req.headers["X-Request-Id"] = rec.request_id
    client.stream(req, oa.OpenAIStreamParser(), rec, cancel=plan)
    return rec


@pytest.mark.parametrize("plan", [CancelPlan(after_tokens=4), CancelPlan(after_ns=150_000_000)])
def test_the_raw_client_closes_the_connection_and_the_next_request_opens_a_new_one(sim, plan) -> None:
    c = StreamClient(sim.url)
    first = _send(c, None)  # a whole answer: the connection is kept
    assert first.chunks == 40 and c._conn is not None
    rec = RequestRecord(new_request_id(), "n", "vllm", "m")
    with pytest.raises(Cancelled) as raised:
        req = oa.build_request(model="m", messages=MESSAGES, sampling=Sampling(max_tokens=64), dialect="vllm")
        req.headers["X-Request-Id"] = rec.request_id
        c.stream(req, oa.OpenAIStreamParser(), rec, cancel=plan)
    cancelled_at = time.perf_counter_ns()
    stamp = raised.value.at_ns  # the end a user records: taken before the connection was closed
    assert stamp is not None and rec.t0_ns < stamp <= cancelled_at
    assert c._conn is None  # closed, never back to the pool
    if plan.after_tokens:
        assert rec.chunks == 4
    else:
        assert 4 <= rec.chunks <= 6 and 150e6 <= cancelled_at - rec.t0_ns < 250e6  # tokens at 50, 70, .. 150 ms
    time.sleep(0.05)
    trace = get_json(f"{sim.url}/_sim/trace?request_id={rec.request_id}")
    assert trace["outcome"] == "aborted" and trace["end_ns"] - cancelled_at < 100e6
    assert trace["end_ns"] >= stamp  # the server saw the close after the recorded end, never before
    after = _send(c, None)  # a new connection, a whole answer
    assert after.chunks == 40 and after.connect_ns is not None


def test_a_bad_value_stops_locust_at_start_with_one_line(tmp_path) -> None:
    proc = run_locust("vllm.py", "--host", "http://127.0.0.1:9", "-u", "1", "-t", "1s",
                      "--llm-cancel-after", "20", timeout=60)
    assert proc.returncode == 1
    assert "locust-llm: --llm-cancel-after: cannot read '20'; give a number of tokens" in proc.stderr, \
        proc.stderr[-2000:]


def test_a_duration_shorter_than_the_ttft_cancels_before_the_first_token(sim) -> None:
    c = StreamClient(sim.url)
    rec = RequestRecord(new_request_id(), "n", "vllm", "m")
    req = oa.build_request(model="m", messages=MESSAGES, sampling=Sampling(max_tokens=64), dialect="vllm")
    req.headers["X-Request-Id"] = rec.request_id
    with pytest.raises(Cancelled):
        c.stream(req, oa.OpenAIStreamParser(), rec, cancel=CancelPlan(after_ns=25_000_000))  # TTFT is 50 ms
    cancelled_at = time.perf_counter_ns()
    mark_cancelled(rec, Cancelled("x"), cancelled_at)
    assert rec.ttft_ns is None and rec.chunks == 0 and rec.ttfb_ns is not None  # the head came at once
    assert 25e6 <= rec.e2e_ns < 60e6 and c._conn is None
    time.sleep(0.05)
    trace = get_json(f"{sim.url}/_sim/trace?request_id={rec.request_id}")
    assert trace["outcome"] == "aborted" and trace["output_tokens"] == 0  # freed in prefill
    assert trace["end_ns"] - cancelled_at < 100e6
