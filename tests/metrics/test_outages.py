"""summary.json ``outages`` (issue 33): the windows found in the records, pure (metrics/outages.py)."""

from __future__ import annotations

import pytest

from llm_users.metrics import RequestRecord
from llm_users.metrics.outages import OutageTracker, console_line, find_outages


def test_a_restart_is_one_window_with_its_recovery() -> None:
    ok = [(100.0 + i * 0.1, None) for i in range(10)]
    resets = [(101.2, "connection_reset"), (101.2005, "connection_reset")]
    refused = [(101.3 + i * 0.4, "connect_error") for i in range(6)]  # up to 103.3
    back = [(103.9, None), (104.0, None)]
    events = ok + back + refused + resets  # any order: a master merges workers' records late
    (o,) = find_outages(events)
    assert o["start"] == pytest.approx(101.2) and o["end"] == pytest.approx(103.3)
    assert o["failures"] == 8 and o["cause"] == "connect_error"
    assert o["categories"] == {"connect_error": 6, "connection_reset": 2}
    assert o["recovered_at"] == pytest.approx(103.9) and o["recovery_s"] == pytest.approx(2.7)


def test_lone_or_non_connection_failures_are_no_outage() -> None:
    events = [(1.0, None), (1.1, "connection_reset"), (1.2, None), (1.3, "connection_reset"),
              (1.35, "connection_reset"), (1.4, None),  # two close together: a fault, not an outage
              (2.0, "http_500"), (2.1, "http_500"), (2.2, "http_500"), (2.3, "http_500"), (2.4, None)]
    assert find_outages(events) == []


def test_a_restarted_server_loading_its_model_is_part_of_the_outage() -> None:
    """llama.cpp answers 503 while a restarted server loads: the top category, inside the window."""
    events = [(1.0, None), (2.0, "connection_reset"), (2.1, "connect_error"),
              *((3.0 + i / 100, "http_503") for i in range(50)), (9.0, None)]
    (o,) = find_outages(events)
    assert (o["failures"], o["cause"], o["recovery_s"]) == (52, "http_503", 7.0)


def test_two_failures_a_second_apart_and_an_unrecovered_end() -> None:
    events = [(1.0, None), (2.0, "connect_error"), (3.5, "connect_error"), (4.0, None),
              (5.0, "connection_reset"), (5.1, "http_503"), (5.2, "connect_error"), (5.3, "connect_error")]
    first, last = find_outages(events)
    assert (first["failures"], first["recovery_s"]) == (2, 2.0)
    assert last["failures"] == 4 and last["cause"] == "connect_error" and last["categories"]["http_503"] == 1
    assert last["recovered_at"] is None and last["recovery_s"] is None
    assert console_line(last, 1.0) == ("outage at 4.0 s for 0.3 s: 4 failures (2 connect_error, "
                                       "1 connection_reset, 1 http_503); not recovered before the stop")


def test_the_tracker_keeps_end_times_and_skips_interrupted() -> None:
    t = OutageTracker()
    for i, (status, cat) in enumerate([("ok", None), ("error", "connect_error"), ("interrupted", "interrupted"),
                                       ("error", "connection_reset")]):
        rec = RequestRecord(request_id=str(i), name="n", backend="b", model="m", start_time=10.0 + i,
                            e2e_ns=250_000_000, status=status, error_category=cat)
        t.add(rec)
    assert t.events() == [(10.25, None, 10.0), (11.25, "connect_error", 11.0), (13.25, "connection_reset", 13.0)]


def _rec(i: int, start: float, e2e_s: float, cat: str | None = None, answered: bool = False) -> RequestRecord:
    """A record sent at ``start`` that ended ``e2e_s`` later: a success, or a failure of ``cat``
    (``answered``: the server had sent its first byte before it failed)."""
    return RequestRecord(request_id=str(i), name="n", backend="b", model="m", start_time=start,
                         e2e_ns=int(e2e_s * 1e9), status="error" if cat else "ok", error_category=cat,
                         ttfb_ns=1_000_000 if answered or not cat else None)


def test_the_line_spans_the_first_failed_request_to_the_first_success() -> None:
    """Issue 54 item 6: killed at 100.0 and back at 105.0. The streams in flight are cut at the
    kill (answered until then: from their end), a request that hung until its 3-s connect timeout
    counts from its start (100.5, though it ended at 103.5, the last failure), and the first
    success was sent at 105.2 and ended at 106.2: down from 100.0 to 105.2, not the 3.5 s between
    the first and last failure's ends."""
    recs = [_rec(0, 99.0, 0.8),  # a success before the kill
            _rec(1, 98.0, 2.0, "connection_reset", answered=True), _rec(2, 99.5, 0.5, "connection_reset", answered=True),
            _rec(3, 100.1, 0.001, "connect_error"), _rec(4, 100.5, 3.0, "connect_timeout"),
            _rec(5, 101.6, 0.001, "connect_error"), _rec(6, 105.2, 1.0), _rec(7, 105.4, 1.0)]
    t = OutageTracker()
    for r in recs:
        t.add(r)
    (o,) = t.outages()
    assert console_line(o, 90.0) == ("outage at 10.0 s for 5.2 s: 5 failures (2 connection_reset, 2 connect_error, "
                                     "1 connect_timeout); recovered 6.2 s after the first failure")
    assert (o["start"], o["end"], o["failures"]) == (100.0, 103.5, 5)
    assert (o["recovered_at"], o["recovery_s"]) == (106.2, 6.2)
    assert (o["down_from"], o["down_s"]) == (100.0, 5.2)


def test_a_hung_first_request_starts_the_span_and_no_recovery_ends_it_at_the_last_failure() -> None:
    t = OutageTracker()
    for r in [_rec(0, 10.0, 10.0, "connect_timeout"), _rec(1, 12.0, 0.01, "connect_error"),
              _rec(2, 19.0, 2.0, "connect_error")]:
        t.add(r)
    (o,) = t.outages()
    assert (o["start"], o["down_from"], o["down_s"], o["recovered_at"]) == (12.01, 10.0, 11.0, None)
    assert console_line(o, 10.0).startswith("outage at 0.0 s for 11.0 s: 3 failures")


def test_a_long_run_compacts_to_its_failures_with_the_same_windows(monkeypatch) -> None:
    """Past COMPACT_AT the settled events shrink to the failures and the ends of each streak of
    successes: the windows (starts, ends, counts, recoveries) equal those of every event, records
    arriving out of order (a worker's payload every 2 s), and the events kept stay bounded."""
    import random

    from llm_users.metrics import outages

    monkeypatch.setattr(outages, "COMPACT_AT", 500)
    monkeypatch.setattr(outages, "SETTLED_S", 20.0)
    rng = random.Random(3)
    events: list[tuple[float, str | None]] = []
    t = 0.0
    for _ in range(30000):  # 100 requests a second, an outage (or a lone fault) now and then
        t += 0.01
        roll = rng.random()
        down = int(t) % 100 in range(50, 53)  # 3 s down every 100 s
        cat = "connect_error" if down else "connection_reset" if roll < 0.002 else "http_500" if roll < 0.004 else None
        events.append((t, cat))
    arrival = sorted(events, key=lambda e: e[0] + rng.uniform(0, 2.0))  # each comes back within 2 s
    tr = OutageTracker()
    for i, (end, cat) in enumerate(arrival):
        tr.add(RequestRecord(request_id=str(i), name="n", backend="b", model="m", start_time=end, e2e_ns=0,
                             status="ok" if cat is None else "error", error_category=cat))
    want = find_outages(events)
    assert len(want) == 3 and all(o["failures"] >= 290 for o in want)
    assert tr.outages() == want
    assert 2000 < len(tr.events()) < 5000, len(tr.events())  # of 30,000: the last 20 s whole, failures, streak ends
