"""metrics/breakdown.py: one request's TTFT and E2E split by the server's own timings (the residual,
client and network, flagged when implausible), and the tracker's exact counts over the merged
records, overall and per stage."""

from __future__ import annotations

import pytest

from llm_users.metrics import RequestRecord
from llm_users.metrics.breakdown import TOLERANCE_NS, BreakdownTracker, console_line, implausible, split
from llm_users.protocols.server_side import make

MS = 1_000_000


def _rec(ttft_ms: float, e2e_ms: float, **st: float | None) -> RequestRecord:
    rec = RequestRecord("r", "n", "vllm", "m", ttft_ns=int(ttft_ms * MS), e2e_ns=int(e2e_ms * MS))
    rec.server_timings = make(*(None if st.get(k) is None else st[k] * MS for k in ("q", "p", "d")), None, "vllm")
    return rec


def test_split_and_the_residual() -> None:
    parts = split(_rec(30, 100, q=5, p=20, d=68))
    assert parts == {"queue": 5 * MS, "prefill": 20 * MS, "decode": 68 * MS, "server_total": 93 * MS,
                     "client_network_ttft": 5 * MS, "client_network_e2e": 7 * MS}
    assert not implausible(parts)
    # no queue reported (llama.cpp): it stays inside the residual
    assert split(_rec(30, 100, p=20, d=68))["client_network_ttft"] == 10 * MS
    # the server claims more than we saw pass: flagged beyond the tolerance, not within it
    assert implausible(split(_rec(30, 100, q=5, p=28, d=68)))
    assert not implausible(split(_rec(30, 100, q=5, p=25 + TOLERANCE_NS / MS, d=60)))
    assert split(RequestRecord("r", "n", "vllm", "m")) is None


def test_tracker_counts_measured_successes_only_and_flags() -> None:
    t = BreakdownTracker()
    t.add(_rec(30, 100, q=5, p=20, d=68))
    t.add(_rec(30, 100, q=5, p=40, d=68))  # flagged
    warm = _rec(30, 100, q=5, p=20, d=68)
    warm.warmup = True
    t.add(warm)
    failed = _rec(30, 100, q=5, p=20, d=68)
    failed.status = "error"
    t.add(failed)
    t.add(RequestRecord("r", "n", "vllm", "m", ttft_ns=MS, e2e_ns=MS))
    b = t.summary()
    assert b["requests"] == 2 and b["without_server_timings"] == 1 and b["flagged"] == 1
    assert b["source"] == "vllm" and b["unknown"] == []
    assert b["queue"]["count"] == 2 and b["queue"]["p50"] == pytest.approx(5.0)
    line = console_line(b)
    assert "queue 5.0" in line and "WARNING: 1 requests" in line
    assert BreakdownTracker().summary() is None


def test_tracker_by_stage() -> None:
    t = BreakdownTracker()
    for stage, queue in ((0, 1), (0, 1), (1, 40)):
        rec = _rec(queue + 25, 120, q=queue, p=20, d=50)
        rec.stage = stage
        t.add(rec)
    by = t.summary()["by_stage"]
    assert [(s["stage"], s["requests"], s["flagged"]) for s in by] == [(0, 2, 0), (1, 1, 0)]
    assert by[0]["queue"]["p50"] == pytest.approx(1.0) and by[1]["queue"]["p99"] == pytest.approx(40.0)
    assert by[1]["client_network_ttft"]["p50"] == pytest.approx(5.0)
