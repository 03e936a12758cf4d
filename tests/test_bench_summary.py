"""bench/client_overhead.py's decisions on synthetic runs: capacity on the median p99 of the
repeats, the spread and p99.9 per step, rounds judged one by one, --tail's steps, and late
stamps lined up with the lag trace."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import orjson
import pytest

from llm_users.health.lagtrace import LagTrace

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("client_overhead", ROOT / "bench" / "client_overhead.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(client: str, n: int, rep: int, p99: float, p999: float | None = None) -> dict:
    return {"client": client, "streams": n, "repeat": rep, "offered_chunks_per_s": n * 50.0,
            "chunks_per_s": n * 50.0 - rep, "ttft_err_p99_ms": p99, "ttft_err_p999_ms": p999 or 2 * p99,
            "client_cpu_pct": 40.0, "loop_lag_p99_ms": None, "loop_lag_max_ms": None, "sim_cpu_pct": 30.0,
            "sim_saturated": False, "sim_late": False, "sim_short": False, "cpu_ms_per_1k_chunks": 30.0,
            "rss_per_stream_kb": 30.0}


def args(repeats: int = 3) -> argparse.Namespace:
    return argparse.Namespace(steps=[160, 280], calm_rate=3000.0, itl_ms=20.0, ttft_ms=20.0, output_tokens=128,
                              repeats=repeats)


def test_capacity_on_the_median_with_spread_and_rounds(bench) -> None:
    results = [
        # ours at 280: one bad round of three; the median passes 5 ms
        run("ours", 160, 0, 0.8), run("ours", 160, 1, 0.9), run("ours", 160, 2, 0.7),
        run("ours", 280, 0, 12.3), run("ours", 280, 1, 2.0), run("ours", 280, 2, 3.0),
        run("floor", 160, 0, 0.9, 1.0), run("floor", 160, 1, 0.8, 1.0), run("floor", 160, 2, 0.9, 1.0),
        run("floor", 280, 0, 2.9, 3.0), run("floor", 280, 1, 3.1, 3.0), run("floor", 280, 2, 2.5, 3.0),
    ]
    s = bench.summarise(results, args())
    st = {(x["client"], x["streams"]): x for x in s["steps"]}
    o280 = st[("ours", 280)]
    assert o280["runs"] == 3 and o280["repeats"] == [0, 1, 2]
    assert o280["ttft_err_p99_ms_median"] == 3.0
    assert (o280["ttft_err_p99_ms_min"], o280["ttft_err_p99_ms_max"]) == (2.0, 12.3)
    assert o280["ttft_err_p999_ms"] == 6.0  # median of 24.6, 4.0, 6.0
    assert s["clients"]["ours"]["capacity_5ms"]["streams"] == 280  # the median passed
    assert s["clients"]["ours"]["capacity_1ms"]["streams"] == 160
    t = s["targets"]
    assert t["capacity_at_least_floor"]["met"] and t["capacity_1ms_at_least_floor"]["met"]
    assert t["p999_within_1.5x_floor"]["ratios_by_step"] == {"160": 1.6, "280": 2.0}
    assert not t["p999_within_1.5x_floor"]["met"]
    r0, r1 = s["by_round"]["0"], s["by_round"]["1"]
    assert r0["capacity"]["ours"]["capacity_5ms"] == 160 and r0["capacity"]["floor"]["capacity_5ms"] == 280
    assert not r0["targets"]["capacity_at_least_floor"]["met"]  # round 0 alone misses: the 12.3 ms window
    assert r1["targets"]["capacity_at_least_floor"]["met"]
    text = bench.summary_text(s)
    assert "[2.00-12.30]" in text and "round 0:" in text


def test_calm_cpu_on_the_median_round_ratio_with_the_best_rounds_beside(bench) -> None:
    """Without calm pairs (--calm-pairs 0) the sequential rounds decide."""
    results = calm_rounds([(29.9, 21.3), (21.5, 22.9), (27.4, 21.2)])  # run 13's N=60 rounds
    t = bench.summarise(results, args())["targets"]["calm_cpu_within_1.2x_floor"]
    assert t["decided_on"] == "sequential rounds"
    assert [round(x, 2) for x in t["round_ratios"]] == [0.94, 1.29, 1.40]
    assert round(t["ratio"], 2) == 1.29 and not t["met"]  # decided on the median round
    assert (t["ours_ms"], t["floor_ms"], t["best_ratio"]) == (21.5, 21.2, 1.01)


def calm_rounds(pairs: list[tuple[float, float]]) -> list[dict]:
    results = []
    for rep, (o, f) in enumerate(pairs):
        for client, cpu in (("ours", o), ("floor", f)):
            r = run(client, 160, rep, 0.5)
            r["cpu_ms_per_1k_chunks"] = cpu
            results.append(r)
    return results


def pair(rnd: int, ours: float | None, floor: float) -> dict:
    return {"round": rnd, "ours": {"cpu_ms_per_1k_chunks": ours}, "floor": {"cpu_ms_per_1k_chunks": floor},
            "ratio": ours / floor if ours else None}


def test_calm_cpu_decided_on_the_pairs_excess_with_the_sequential_rounds_beside(bench) -> None:
    """Run 13's sequential rounds (median 1.29: a miss on their own) with the calm pairs of
    2026-12-01 (both clients at once): ours' excess over the floor in the same window (median
    1.88 ms per 1k chunks) over the floor's best sequential round (21.2), not the pairs' own
    ratio, which the shared core's extra cost pulls towards 1."""
    results = calm_rounds([(29.9, 21.3), (21.5, 22.9), (27.4, 21.2)])
    pairs = [pair(0, 25.47, 23.59), pair(1, 26.18, 24.38), pair(2, 26.96, 24.93), pair(3, None, 26.25)]
    t = bench.summarise(results, args(), pairs)["targets"]["calm_cpu_within_1.2x_floor"]
    assert t["decided_on"].startswith("ours' excess over the floor in calm pairs")
    assert t["pair_excess_ms_per_1k"] == [1.8, 1.88, 2.03]  # the pair with no figure for ours is left out
    assert t["excess_ms_per_1k"] == 1.88 and t["floor_ms"] == 21.2
    assert round(t["ratio"], 3) == 1.089 and t["met"]  # (21.2 + 1.88) / 21.2
    assert t["pair_ratios"] == [1.074, 1.08, 1.081]  # shown, lower than what is decided on
    assert round(t["sequential_ratio"], 2) == 1.29 and [round(x, 2) for x in t["round_ratios"]] == [0.94, 1.29, 1.40]
    # an excess over a fifth of the floor's best round misses, however the sequential rounds went
    over = [pair(0, 30.0, 24.0), pair(1, 29.0, 24.0), pair(2, 26.0, 24.0)]
    t = bench.summarise(calm_rounds([(21.0, 22.0)] * 3), args(), over)["targets"]["calm_cpu_within_1.2x_floor"]
    assert t["excess_ms_per_1k"] == 5.0 and round(t["ratio"], 3) == 1.227 and not t["met"]
    assert t["sequential_ratio"] < 1.0 and max(t["pair_ratios"]) == 1.25


def test_sim_bottleneck_is_named(bench) -> None:
    r = run("floor", 560, 0, 1.0)
    r.update(sim_saturated=True, sim_cpu_pct=91.0)
    s = bench.summarise([r, run("ours", 560, 0, 1.0)], args(1))
    assert s["targets"]["sim_not_bottleneck_below_30k"]["bottleneck_at"] == ["floor N=560"]
    assert "THE SIMULATOR IS THE BOTTLENECK" in bench.steps_table(s["steps"])


def test_tail_steps_around_the_knee(bench, tmp_path) -> None:
    doc = {"summary": {"steps": [
        {"client": "ours", "streams": n, "ttft_err_p99_ms_median": p}
        for n, p in ((60, 0.3), (160, 0.5), (280, 2.0), (400, 7.0), (480, 9.0))] + [
        {"client": "floor", "streams": n, "ttft_err_p99_ms_median": p}
        for n, p in ((60, 0.3), (160, 0.5), (280, 1.0), (400, 3.0), (480, 6.0))]}}
    f = tmp_path / "prev.json"
    f.write_text(json.dumps(doc))
    assert bench.tail_steps(f) == [280, 400, 480]
    assert bench.tail_steps(tmp_path / "missing.json") == [200, 240, 280, 320, 360, 400]


def test_late_stamps_lined_up_with_the_lag_trace(bench, tmp_path) -> None:
    t = LagTrace(keep_raw=True, event_min_ns=0)
    t.gc_start.append(1_000_000_000)  # an 8 ms gen1 pass at t = 1 s
    t.gc_end.append(1_008_000_000)
    t.gc_gen.append(1)
    for k in range(200):  # probes every 10 ms; the one due in the pass is 7 ms late
        due = 10_000_000 * k
        t.probe(due, 7_000_000 if due == 1_000_000_000 else 100_000)
    path = tmp_path / "lagtrace.json"
    path.write_bytes(orjson.dumps(t.to_dict()))
    trace = [{"request_id": "a", "times_ns": [1_001_000_000, 1_021_000_000], "tokens": [1, 1]},
             {"request_id": "b", "times_ns": [500_000_000], "tokens": [1]},
             {"request_id": "c", "times_ns": [1_500_000_000], "tokens": [1]}]
    records = [("a", 0, [1_008_500_000, 1_021_100_000]),  # 7.5 ms late: in the gc pass
               ("b", 0, [500_200_000]),  # 0.2 ms: not in the tail
               ("c", 0, [1_503_000_000])]  # 3 ms late, no event, no late probe
    out = bench.lag_figures(path, records, trace, 0, 2_000_000_000, ttft_p99_ms=1.0)
    assert out["late_ttft_causes"] == {"gc gen1": 1, "no loop stall (queued behind ready work)": 1}
    assert out["loop_lag_max_ms"] == 7.0 and out["loop_probes"] == 200
    assert out["gc_passes_over_0_1ms"] == {"gen1": {"count": 1, "total_ms": 8.0, "max_ms": 8.0}}


def test_windows_hold_enough_first_tokens_for_a_p999(bench) -> None:
    a = argparse.Namespace(duration=8.0, min_first_tokens=1000, ttft_ms=20.0, itl_ms=20.0, output_tokens=128)
    # a request lasts 20 + 127 * 20 ms = 2.56 s, so N streams start N / 2.56 first tokens a second
    assert bench.window_s(60, a) == pytest.approx(1000 * 2.56 / 60)  # 42.7 s
    assert bench.window_s(160, a) == pytest.approx(16.0)
    assert bench.window_s(280, a) == pytest.approx(1000 * 2.56 / 280)  # 9.1 s
    assert bench.window_s(400, a) == 8.0  # 156 first tokens a second: --duration already holds 1,250
    assert 60 / 2.56 * bench.window_s(60, a) >= 1000
    # off (--quick's default), every window is --duration
    a.min_first_tokens = 0
    assert [bench.window_s(n, a) for n in (60, 160, 560)] == [8.0, 8.0, 8.0]
    # and the nearest-rank p99.9 of 1,000 values is not their largest
    values = list(range(1, 1001))
    assert bench.pct(values, 99.9) < max(values) / 1e6
