"""load/stages.py: the per-stage book (every record lands in exactly one stage) and the stage shape's
ticks (the stage plans and the settle rule: tests/load/test_plans.py)."""

from __future__ import annotations

import pytest

from llm_users.load.stages import (
    StageBook,
    StagePlan,
    StageShape,
    pooled_summary,
    stages_csv,
)
from llm_users.metrics import RequestRecord


def _rec(start: float, ttft_ms: float, warmup: bool = False, ok: bool = True) -> RequestRecord:
    r = RequestRecord(request_id=f"{start}", name="/x", backend="b", model="m", start_time=start,
                      t0_ns=int(start * 1e9), ttft_ns=int(ttft_ms * 1e6), e2e_ns=int(2 * ttft_ms * 1e6),
                      output_tokens=3, warmup=warmup)
    if not ok:
        r.status, r.error_category = "error", "http_error"
    return r


def test_book_puts_each_record_in_its_stage_and_counts_add_up() -> None:
    book = StageBook({"ttft": 15e6})
    book.begin("users", 2, 100.0, 1.0)
    book.begin("users", 4, 110.0, 1.0)
    recs = [_rec(99.0, 5), _rec(100.5, 5), _rec(101.0, 10), _rec(105, 20, warmup=True), _rec(109.9, 30),
            _rec(110.2, 5), _rec(111.5, 10, ok=False), _rec(115, 12)]
    for r in recs:
        book.add(r)
    book.finish(120.0)
    s = book.summary()
    assert [r.stage for r in recs] == [0, 0, 0, 0, 0, 1, 1, 1]
    assert (s[0]["requests"], s[0]["excluded_settle"], s[0]["excluded_warmup"]) == (2, 2, 1)
    assert (s[1]["requests"], s[1]["excluded_settle"], s[1]["failures"]) == (2, 1, 1)
    assert sum(x["requests"] + x["excluded"] for x in s) == len(recs)
    assert s[0]["ttft"]["p50"] == pytest.approx(10, abs=0.01) and s[0]["ttft"]["max"] == 30
    assert s[0]["measured_s"] == 9.0 and s[0]["requests_per_s"] == pytest.approx(2 / 9)
    assert s[0]["slo"]["share_meeting_all"] == 0.5 and s[1]["slo"]["share_meeting_all"] == 0.5
    text = stages_csv(s).splitlines()
    assert text[0].startswith("index,kind,load") and len(text) == 3 and text[1].startswith("0,users,2,")


def test_measure_end_excludes_the_tail() -> None:
    book = StageBook()
    book.begin("rate", 10, 0.0, 1.0, measure_s=2.0)
    for t in (0.5, 1.5, 2.9, 3.0, 3.5):
        book.add(_rec(t, 5))
    s = book.summary(now=10.0)[0]
    assert (s["requests"], s["excluded_settle"], s["excluded_tail"], s["excluded"]) == (2, 1, 2, 3)
    assert s["measured_s"] == 2.0 and s["rate"] == 10


def test_shape_ticks_through_the_stages(monkeypatch) -> None:
    seen = []
    shape = StageShape([StagePlan(5, 2), StagePlan(10, 3)], "users", lambda i, p: seen.append((i, p.load)))
    clock = {"t": 0.0}
    monkeypatch.setattr(shape, "get_run_time", lambda: clock["t"])
    assert shape.tick() == (5, 5.0)
    shape.reset_time()  # Locust's reset at test start keeps stage 0
    clock["t"] = 2.5
    assert shape.tick() == (10, 10.0)
    clock["t"] = 5.0
    assert shape.tick() is None
    assert seen == [(0, 5), (1, 10)]
    rate = StageShape([StagePlan(30, 2)], "rate", lambda i, p: None)
    monkeypatch.setattr(rate, "get_run_time", lambda: 0.0)
    assert rate.tick() == (0, 1.0)  # open loop: no Locust users, the scheduler sends


def test_last_stage_holds_its_load_for_the_tail_then_ends(monkeypatch) -> None:
    """Issue 29: after the plan the last stage's load stays on while ``hold()`` says so (its
    measured requests still coming back), then the shape ends."""
    held = {"on": True}
    shape = StageShape([StagePlan(5, 2), StagePlan(8, 2)], "users", lambda i, p: None, hold=lambda: held["on"])
    clock = {"t": 0.0}
    monkeypatch.setattr(shape, "get_run_time", lambda: clock["t"])
    shape.tick()
    clock["t"] = 2.5
    assert shape.tick() == (8, 8.0)
    clock["t"] = 4.5  # past the plan: the tail
    assert shape.tick() == (8, 8.0) and not shape.done
    held["on"] = False
    assert shape.tick() is None and shape.done


def test_tail_is_the_shipping_delay_plus_one_and_a_half_slowest_e2e() -> None:
    from llm_users.load.stages import TAIL_MAX_S, tail_s

    book = StageBook()
    st = book.begin("users", 8, 0.0, 1.0, measure_s=4.0)
    assert st.measure_end == 5.0
    assert tail_s(st, 0.2) == TAIL_MAX_S  # nothing came back yet: how long requests take is not known
    book.add(_rec(0.5, 400))  # E2E 800 ms (settle window: still tells how long to wait)
    book.add(_rec(2.0, 100))
    assert tail_s(st, 0.2) == pytest.approx(0.2 + 1.2)
    assert tail_s(st, 0.2, floor_ns=int(2e9)) == pytest.approx(0.2 + 3.0)  # slower requests in other stages
    st.e2e_max_ns = int(1e12)
    assert tail_s(st, 0.2) == TAIL_MAX_S


def test_pooled_summary_of_repeats_adds_requests_and_measured_seconds() -> None:
    from llm_users.load.stages import pooled_summary

    book = StageBook({"ttft": 15e6})
    a = book.begin("users", 4, 0.0, 1.0)
    for t in (0.5, 2.0, 3.0):
        book.add(_rec(t, 10))
    b = book.begin("users", 4, 5.0, 1.0)
    for t in (6.5, 7.0, 8.0, 9.0):
        book.add(_rec(t, 20))
    book.finish(10.0)
    p = pooled_summary([a, b], now=10.0)
    assert (p["requests"], p["excluded_settle"], p["measured_s"]) == (6, 1, 8.0)
    assert p["requests_per_s"] == pytest.approx(6 / 8) and p["start"] == 0.0 and p["end"] == 10.0
    assert p["slo"]["share_meeting_all"] == pytest.approx(2 / 6)
    assert p["ttft"]["max"] == 20 and p["ttft"]["min"] == 10


def _rich(start: float, k: int) -> RequestRecord:
    """A record with every figure a stage keeps: ITL gaps over hundreds of buckets (the encoded
    histogram's path), tokens, reasoning, the server's timings, schedule lag; some fail."""
    r = _rec(start, 40 + (k * 37) % 300)
    r.itl_ns = [int(1e6 * (5 + (k * 13 + j * 7) % 400) + j) for j in range(60)]
    r.ttfb_ns, r.ttfo_ns = r.ttft_ns - 1000, r.ttft_ns
    r.input_tokens, r.output_tokens, r.reasoning_tokens = 100 + k % 57, 61, k % 5
    r.server_timings = {"queue_ns": 1e6 * (k % 9), "prefill_ns": 2e6 + k, "decode_ns": 9e8, "server_total_ns": 1e9}
    r.scheduled_ns = r.t0_ns - 1000 * (k % 300)
    if k % 17 == 0:
        r.status, r.error_category = "error", ("http_error", "connection_reset")[k % 2]
    return r


def test_a_finished_stage_is_one_frozen_block_and_reads_back_exactly() -> None:
    book, live = StageBook({"ttft": 200e6, "itl": 300e6}), StageBook({"ttft": 200e6, "itl": 300e6})
    for b in (book, live):
        for i in range(3):
            b.begin("rate", i + 1, 100.0 + 10 * i, 1.0)
            for k in range(300):
                b.add(_rich(100.0 + 10 * i + 1 + k * 0.03, k + 100 * i))
    live.stages[0].live()  # a late record would have thawed it: the same figures, never frozen
    for st in live.stages:
        assert st.frozen is None
    first = book.stages[0]
    assert first.stats is None and first.frozen is not None and book.stages[1].frozen is None
    assert len(first.frozen) < 12_000  # 300 records of 60 gaps over 400 ms of buckets
    assert book.summary(200.0) == live.summary(200.0)  # every figure of every stage
    assert pooled_summary(book.stages[:2], 200.0) == pooled_summary(live.stages[:2], 200.0)
    assert first.frozen is not None  # reading did not thaw it
    late = _rich(101.5, 7)
    book.add(late), live.add(_rich(101.5, 7))
    assert late.stage == 0 and first.frozen is None and first.stats is not None  # a late record: live again
    after = book.summary(200.0)
    assert after == live.summary(200.0) and after[0]["requests"] == book.summary(200.0)[0]["requests"]
    assert after[0]["requests"] + after[0]["excluded"] == 301
    book.begin("rate", 4, 140.0, 1.0), live.begin("rate", 4, 140.0, 1.0)  # frozen again as the next begins
    assert book.stages[1].frozen is not None and book.summary(200.0) == live.summary(200.0)
