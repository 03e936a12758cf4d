"""The sweep's search, driven by a fake clock and a server whose limit is known: geometric
probe, bisection to one user / 5%, the budget, and the over-saturation guard."""

from __future__ import annotations

import pytest

from llm_users.load import sweep as sweep_mod
from llm_users.load.stages import StageBook
from llm_users.load.sweep import SweepShape
from llm_users.metrics import RequestRecord


def _run(monkeypatch, kind: str, limit: float, start: float, budget: float = 400, points: int = 20,
         growth: bool = False) -> SweepShape:
    clock = {"t": 1000.0}
    monkeypatch.setattr(sweep_mod.time, "time", lambda: clock["t"])
    book = StageBook({"tpot": 15e6})
    loads: list[float] = []
    shape = SweepShape(kind=kind, book=book, on_point=lambda k, load: loads.append(load), budget_s=budget,
                       start=start, target=0.95, points=points, ship_delay_s=0.0)
    n = 0
    while shape.tick() is not None:
        load = shape._load
        for k in range(10):  # ten requests a second at this point
            t = clock["t"] + k / 10
            tpot_ms = 10 if load <= limit else 20
            ttft_ms = 5 + (t - shape._cur.start) * 50 if growth and load > limit else 5  # type: ignore[union-attr]
            n += 1
            rec = RequestRecord(request_id=str(n), name="/x", backend="b", model="m", start_time=t, t0_ns=1,
                                ttft_ns=int(ttft_ms * 1e6), e2e_ns=int((ttft_ms + 2 * tpot_ms) * 1e6),
                                output_tokens=3)
            book.add(rec)
            shape.see(rec)
        clock["t"] += 1.0
        assert clock["t"] < 1000 + budget + 100, "the sweep must end within its budget"
    shape.loads = loads  # type: ignore[attr-defined]
    return shape


def test_concurrency_probe_then_bisection_finds_the_limit(monkeypatch) -> None:
    shape = _run(monkeypatch, "users", limit=21, start=4)
    assert shape.loads[:4] == [4, 8, 16, 32]  # type: ignore[attr-defined]
    s = shape.summary()
    assert s["knee"]["concurrency"] == 21 and s["stopped"] == "converged"
    assert s["bracket"] == [21, 22]
    assert [p["passed"] for p in s["points"]] == [p["concurrency"] <= 21 for p in s["points"]]


def test_rate_bisection_to_five_percent(monkeypatch) -> None:
    shape = _run(monkeypatch, "rate", limit=71.7, start=18)
    s = shape.summary()
    lo, hi = s["bracket"]
    assert lo <= 71.7 < hi and hi / lo <= 1.05
    assert s["knee"]["rate"] == lo and s["mode"] == "rate"


def test_first_point_failing_probes_down(monkeypatch) -> None:
    s = _run(monkeypatch, "users", limit=3, start=16).summary()
    assert s["knee"]["concurrency"] == 3
    s = _run(monkeypatch, "users", limit=0, start=4).summary()
    assert s["knee"] is None and s["stopped"] == "even the lowest load misses the SLOs"


def test_budget_limits_the_points(monkeypatch) -> None:
    shape = _run(monkeypatch, "users", limit=21, start=1, budget=60, points=6)
    s = shape.summary()
    assert len(s["points"]) <= 6 and s["stopped"] in ("budget used", "point limit reached")
    assert s["knee"]["concurrency"] == 16  # probed 1..16 passed, 32 failed: the bracket is said
    assert s["bracket"][0] == 16


def test_guard_ends_an_over_saturated_point_early(monkeypatch) -> None:
    shape = _run(monkeypatch, "users", limit=21, start=16, growth=True)
    s = shape.summary()
    over = [p for p in s["points"] if p["concurrency"] > 21]
    assert over and all(p["reason"] == "over-saturated" for p in over)
    assert all("over-saturated" in p["note"] for p in over)
    assert all(p["measured_s"] < shape.measure_s for p in over)
    assert s["knee"]["concurrency"] == 21


@pytest.mark.parametrize("bad", [{"points": [{"index": 0, "requests": 0}]}])
def test_summary_without_points(monkeypatch, bad) -> None:
    book = StageBook({"tpot": 15e6})
    shape = SweepShape(kind="users", book=book, on_point=lambda *a: None, budget_s=10, start=1, target=0.95,
                       points=2, ship_delay_s=0)
    s = shape.summary()
    assert s["knee"] is None and s["points"] == []
