"""client_overhead --ceiling's decisions (bench/overhead/ceiling.py) and the peer table's steady
window (bench/peers/table.py) on synthetic runs; the uvloop floor against the real simulator."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.overhead import ceiling  # noqa: E402
from bench.overhead.cli import parse_args  # noqa: E402


def _table():
    spec = importlib.util.spec_from_file_location("peers_table", ROOT / "bench" / "peers" / "table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(client: str, n: int, p99: float | None, itl: float = 20.0, tokens: int = 128, short: bool = False,
        delay99: float | None = None) -> dict:
    offered = n * 50.0
    return {"client": client, "streams": n, "ceiling": True, "itl_ms": itl, "output_tokens": tokens,
            "ttft_ms": 20.0, "long_output": tokens > 128, "offered_chunks_per_s": offered,
            "chunks_per_s": offered * (0.9 if short else 0.999), "ttft_err_p99_ms": p99,
            "chunk_delay_p99_ms": delay99, "cpu_ms_per_1k_chunks": 25.0 + n / 100, "client_cpu_pct": n / 10,
            "sim_cpu_pct": 20.0, "sim_saturated": False}


def test_entries_take_the_largest_step_before_each_bound_breaks():
    rs = [run("ours", 40, 0.2), run("ours", 50, 0.6), run("ours", 70, 1.5), run("ours", 90, 3.0),
          run("ours", 120, 9.0),
          run("floor", 40, 0.3), run("floor", 50, 2.0), run("floor", 70, 6.0)]
    by = {e["client"]: e for e in ceiling.ceiling_entries(rs)}
    o, f = by["ours"], by["floor"]
    assert (o["streams_1ms"], o["streams_5ms"], o["broke_5ms_at"]) == (50, 90, 120)
    assert o["chunks_per_s_1ms"] == pytest.approx(50 * 50 * 0.999, abs=0.1)
    assert o["cpu_ms_per_1k_chunks_1ms"] == pytest.approx(25.5)
    assert o["stopped_by"] == "5 ms bound" and o["itl_ms"] == 20.0 and len(o["steps"]) == 5
    assert (f["streams_1ms"], f["streams_5ms"], f["broke_5ms_at"]) == (40, 50, 70)


def test_a_step_short_of_the_offered_chunks_breaks_both_bounds():
    e = ceiling.ceiling_entries([run("ours", 40, 0.2), run("ours", 50, 0.3, short=True)])[0]
    assert (e["streams_1ms"], e["streams_5ms"], e["broke_5ms_at"]) == (40, 40, 50)


def test_a_first_step_over_the_bound_gives_zero_and_a_long_series_reads_chunk_delay():
    e = ceiling.ceiling_entries([run("floor", 40, 7.0)])[0]
    assert (e["streams_1ms"], e["streams_5ms"], e["chunks_per_s_1ms"]) == (0, 0, 0.0)
    long = [run("ours", 40, None, tokens=4096, delay99=0.5), run("ours", 50, None, tokens=4096, delay99=6.0)]
    e = ceiling.ceiling_entries(long)[0]
    assert e["bound_on"] == "chunk_delay_p99_ms" and (e["streams_1ms"], e["streams_5ms"]) == (40, 40)


def test_steps_series_and_options():
    assert [ceiling.next_step(n, 1.25) for n in (40, 50, 70, 400)] == [50, 70, 90, 500]
    a = parse_args(["--ceiling", "--ceiling-itl", "20,5", "--long-output", "4096"])
    assert ceiling.series_list(a) == [(20.0, 128), (5.0, 128), (20.0, 4096)]
    s = ceiling.series_args(a, 5.0, 128)
    assert s.itl_ms == 5.0 and s.spread == pytest.approx(0.02 + 127 * 0.005)
    long = ceiling.series_args(a, 20.0, 4096)
    assert long.min_first_tokens == 0 and long.spread == ceiling.LONG_SPREAD_S
    with pytest.raises(SystemExit):
        parse_args(["--ceiling", "--ceiling-factor", "1"])


def test_peer_table_reads_the_steady_window():
    table = _table()
    # start-up (CPU, no chunks), a 4 s ramp at half the rate, then 1,000 chunks/s at 25 % of a
    # core (250 µs a chunk) until the nominal end at 16 s after the first chunk, then a drain
    samples = [[0.0, 0.0, 0], [0.5, 0.4, 0]]
    t, cpu, chunks = 0.5, 0.4, 0
    while t < 20.0:
        t += 0.5
        rate = 250 if t <= 4.5 or t > 16.5 else 500
        cpu += 0.125 * (1.5 if rate == 250 else 1.0)  # ramp and drain cost more per chunk
        chunks += rate
        samples.append([t, cpu, chunks])
    st = table.steady(samples, request_s=4.0, duration_s=16.0)
    assert st["chunks_per_s"] == pytest.approx(1000.0)
    assert st["cpu_us_per_chunk"] == pytest.approx(250.0)
    assert st["cpu_pct"] == pytest.approx(25.0)
    assert table.steady([[0.0, 0.0, 0], [0.5, 0.1, 0]]) is None


@pytest.mark.serial  # the simulator's 10 ms gaps read to 2 ms: a loaded machine bunched them to 8 ms (4 shards on 2 cores)
def test_uvloop_floor_streams_the_simulator(tmp_path):
    """bench/floor_uvloop.py against the real simulator: every request's token chunks stamped,
    spaced by the simulator's ITL."""
    sim = subprocess.Popen([sys.executable, "-m", "llm_users.sim", "--host", "127.0.0.1", "--port", "0",
                            "--ttft-ms", "20", "--itl-ms", "10", "--output-tokens", "16", "--exit-with-parent"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        url = ""
        for line in sim.stdout:
            if "serving on" in line:
                url = line.split("serving on", 1)[1].split()[0]
                break
        out = tmp_path / "uv.jsonl"
        p = subprocess.run([sys.executable, str(ROOT / "bench" / "floor_uvloop.py"), "--url", url, "--streams", "4",
                            "--duration", "1.0", "--out", str(out), "--spread", "0.1", "--max-tokens", "16"],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert p.returncode == 0, p.stderr
        assert "BENCH-READY" in p.stdout
        recs = [json.loads(x) for x in out.read_text().splitlines()]
        assert len(recs) >= 8  # 4 streams x 1 s / 0.17 s a request
        for r in recs:
            assert len(r["chunks"]) == 16
            gaps = [(b - a) / 1e6 for a, b in zip(r["chunks"], r["chunks"][1:], strict=False)]
            assert sorted(gaps)[len(gaps) // 2] == pytest.approx(10.0, abs=2.0)
            assert (r["chunks"][0] - r["t0"]) / 1e6 == pytest.approx(20.0, abs=15.0)
    finally:
        sim.terminate()
        sim.wait(10)


@pytest.mark.parametrize("script", ["floor_client.py", "floor_uvloop.py"])
def test_a_floor_writes_the_requests_still_streaming_when_its_drain_ends(sim_factory, tmp_path, script) -> None:
    """A long-output series' request (4,096 tokens: 82 s) outlasts the floors' run and drain; they
    wrote nothing then and the series had no figures (ceiling run 2). Now each request still
    streaming at the drain's end is written with its stamps so far and ``cut``."""
    sim = sim_factory("--itl-ms", "20", "--output-tokens", "500", "--ignore-max-tokens", "500", "--seed", "1")
    out = tmp_path / "floor.jsonl"
    subprocess.run([sys.executable, str(ROOT / "bench" / script), "--url", sim.url, "--streams", "3", "--duration", "1.5",
                    "--drain", "1", "--spread", "0.3", "--max-tokens", "500", "--out", str(out)],
                   check=True, timeout=60, capture_output=True)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 3 and all(r["cut"] is True for r in records), records
    for r in records:  # 2.5 s of a 10 s request at 20 ms a chunk: up to 125 stamps (fewer on a loaded machine), in order
        assert 20 <= len(r["chunks"]) <= 130, len(r["chunks"])
        assert r["chunks"] == sorted(r["chunks"]) and r["chunks"][0] > r["t0"]


def rep(r: dict, i: int) -> dict:
    return {**r, "repeat": i}


def test_a_step_breaks_a_bound_only_if_its_run_again_breaks_it_too():
    """Ceiling run 4: one 1.31 ms step among steps under 1 ms up to 480 streams set ours' 1 ms
    ceiling at 90. A step that breaks a bound is run again; it breaks it only if both runs do."""
    rs = [run("ours", 40, 0.2), rep(run("ours", 50, 1.3), 0), rep(run("ours", 50, 0.7), 1), run("ours", 70, 0.8),
          rep(run("ours", 90, 1.4), 0), rep(run("ours", 90, 1.6), 1), run("ours", 120, 4.0),
          rep(run("ours", 150, 6.0), 0), rep(run("ours", 150, 7.0), 1)]
    e = ceiling.ceiling_entries(rs)[0]
    assert (e["streams_1ms"], e["streams_5ms"], e["broke_5ms_at"]) == (70, 120, 150)
    assert e["confirmed_steps"] == 3 and e["stopped_by"] == "5 ms bound" and len(e["steps"]) == 9
    assert e["cpu_ms_per_1k_chunks_1ms"] == pytest.approx(25.7)  # the 70-stream run's
    one = ceiling.ceiling_entries([run("ours", 40, 0.2), rep(run("ours", 50, 6.0), 0), rep(run("ours", 50, 0.4), 1),
                                   run("ours", 70, 0.5)])[0]
    assert (one["streams_1ms"], one["streams_5ms"], one["broke_5ms_at"]) == (70, 70, None)
    assert one["chunks_per_s_1ms"] == pytest.approx(70 * 50 * 0.999, abs=0.1)


def test_the_series_runs_a_breaking_step_again_and_stops_on_a_confirmed_5ms_break(monkeypatch, tmp_path):
    errors = {40: [0.3], 50: [1.2, 0.8], 70: [1.5, 1.1], 90: [2.0], 120: [6.0, 0.9], 150: [5.5, 8.0], 190: [0.1]}
    seen: list[tuple[int, int]] = []

    def measured(kind, n, sim, a, tmp, tag):
        i = sum(1 for s in seen if s[0] == n)
        seen.append((n, i))
        return run(kind, n, errors[n][i])

    class Sim:
        url = "http://127.0.0.1:1"

        def __init__(self, *a):
            pass

        def stop(self):
            pass

    monkeypatch.setattr(ceiling, "run_measured", measured)
    monkeypatch.setattr(ceiling, "Simulator", Sim)
    monkeypatch.setattr(ceiling, "run_line", lambda r: f"{r['streams']} {r['ttft_err_p99_ms']}")
    for confirm, expect in ((True, [(40, 0), (50, 0), (50, 1), (70, 0), (70, 1), (90, 0), (120, 0), (120, 1),
                                    (150, 0), (150, 1)]),
                            (False, [(40, 0), (50, 0), (70, 0), (90, 0), (120, 0)])):
        seen.clear()
        a = parse_args(["--ceiling", "--ceiling-itl", "20", "--clients", "ours"]
                       + ([] if confirm else ["--no-ceiling-confirm"]))
        results = ceiling.run_ceiling(a, tmp_path)
        assert seen == expect
        e = ceiling.ceiling_entries(results)[0]
        if confirm:
            assert (e["streams_1ms"], e["streams_5ms"], e["broke_5ms_at"]) == (50, 120, 150)
        else:
            assert (e["streams_1ms"], e["streams_5ms"], e["broke_5ms_at"]) == (40, 90, 120)
