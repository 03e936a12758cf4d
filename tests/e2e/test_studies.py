"""Issue 11: stages, steps and SLO sweeps in real locust processes against the simulator, whose
capacity model gives the true knee analytically (docs/simulator.md, "The analytic limit").

Simulator: TTFT 20 ms, chunk gap = 10 ms + 1 ms x (running - 1), 10 tokens; SLO TPOT <= 30.5 ms.
- closed loop: TPOT(N) = 10 + 1 (N - 1) <= 30.5  ->  N* = 21 users;
- open loop (constant arrivals, Little's law N = rate x E2E): the rate at which the running
  count reaches 1 + (30.5 - 10) / 1 = 21.5: rate* = 21.5 / (20 + 9 x 30.5 ms) = 73.0 req/s.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from llm_users.metrics import Distribution
from tests.helpers import (
    locust_request_count,
    processes_args,
    read_records,
    read_summary,
    run_locust,
)

pytestmark = pytest.mark.slow


KNEE_SIM = ("--ttft-ms", "20", "--itl-ms", "10", "--itl-slope-ms", "1", "--output-tokens", "10", "--seed", "1")
SLO = "tpot=30.5ms"
CLOSED_KNEE = 1 + (30.5 - 10) // 1  # 21 users
OPEN_KNEE = (1 + (30.5 - 10) / 1) / ((20 + 9 * 30.5) / 1000)  # 73.0 req/s


def _exact_per_stage(stages: list[dict], records: list[dict]) -> None:
    """Each stage's merged percentiles equal those of its own records (steady-state ones)."""
    for st in stages:
        mine = [r for r in records if r["stage"] == st["index"] and not r["warmup"]
                and st["start"] + st["settle_s"] <= r["start_time"]
                < st["start"] + st["settle_s"] + st["measured_s"]]  # (the last stage's tail: excluded)
        ok = [r for r in mine if r["status"] == "ok"]
        ttft, tpot, itl = Distribution(), Distribution(), Distribution()
        for r in ok:
            ttft.add(r["ttft_ns"])
            tpot.add(r["tpot_ns"])
            itl.add_many(r["itl_ns"])
        assert st["requests"] == len(mine), st["index"]
        for k in ("p50", "p90", "p99"):
            assert st["ttft"][k] == ttft.summary_ms()[k]
            assert st["tpot"][k] == tpot.summary_ms()[k]
            assert st["itl"][k] == itl.summary_ms()[k]


def test_steps_8_64_8_one_row_per_stage_and_counts_add_up(sim_factory, tmp_path) -> None:
    """--processes 2 (master + 2 workers): one row per stage, settle excluded, Locust's own
    request count = sum over stages of measured + excluded, exact merged per-stage percentiles."""
    sim = sim_factory("--ttft-ms", "10", "--itl-ms", "2", "--output-tokens", "8", "--seed", "1")
    report, prefix = tmp_path / "r", tmp_path / "locust"
    proc = run_locust("vllm.py", "--llm-html", "on", *processes_args(2), "--host", sim.url,
                      "--llm-steps", "8:64:8:2s",
                      "--llm-prometheus-port", "0", "--stop-timeout", "5", report=report, csv_prefix=prefix,
                      timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = read_summary(report)
    stages = s["stages"]
    records = read_records(report)
    assert [st["users"] for st in stages] == [8, 16, 24, 32, 40, 48, 56, 64]
    for st in stages:
        assert st["settle_s"] == pytest.approx(0.4)  # 20% of the 2 s stage
        assert st["excluded"] > 0 and st["requests"] > 0
        if st is stages[-1]:  # issue 29: the last window ends at the plan's end, its tail brings its requests back
            assert st["measured_s"] == pytest.approx(2 - st["settle_s"], abs=1e-6)
        else:
            assert st["measured_s"] == pytest.approx(st["end"] - st["start"] - st["settle_s"], abs=1e-6)
        in_settle = [r for r in records if r["stage"] == st["index"]
                     and r["start_time"] < st["start"] + st["settle_s"]]
        assert st["excluded_settle"] == len(in_settle)  # every request of the settle window, and only those
        assert st["excluded"] == (st["excluded_settle"] + st["excluded_tail"] + st["excluded_warmup"]
                                  + st["excluded_cooldown"])
    assert sum(st["excluded_settle"] for st in stages) > 0
    total = sum(st["requests"] + st["excluded"] for st in stages)
    assert total == locust_request_count(prefix) == len(records)
    assert len({r["worker"] for r in records}) == 2
    _exact_per_stage(stages, records)
    rows = list(csv.DictReader((report / "stages.csv").open()))
    assert [int(float(r["load"])) for r in rows] == [8, 16, 24, 32, 40, 48, 56, 64]
    assert [int(r["requests"]) for r in rows] == [st["requests"] for st in stages]
    # more users, more throughput (the simulator's batch is not full, though two shared cores
    # cap the client): the stages really are different load levels
    assert stages[-1]["requests_per_s"] > 1.5 * stages[0]["requests_per_s"]


@pytest.fixture(scope="module")
def closed_sweep(tmp_path_factory) -> Path:
    from llm_users.sim.launcher import start_simulator

    out = tmp_path_factory.mktemp("sweep")
    with start_simulator(list(KNEE_SIM)) as sim:
        proc = run_locust("vllm.py", "--llm-html", "on", "--host", sim.url, "-t", "30s", "--llm-sweep", "concurrency",
                          "--llm-sweep-start", "4", "--llm-sweep-points", "10", "--llm-slo", SLO,
                          "--llm-prometheus-port", "0", report=out, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (out / "stdout.txt").write_text(proc.stdout)
    return out


def test_closed_loop_sweep_knee_within_10_percent_of_analytic(closed_sweep: Path) -> None:
    sw = read_summary(closed_sweep)["sweep"]
    knee = sw["knee"]
    assert knee is not None, sw
    assert knee["concurrency"] == pytest.approx(CLOSED_KNEE, rel=0.10), [(p["concurrency"], p["reason"])
                                                                          for p in sw["points"]]
    assert knee["share_meeting_all"] >= 0.95 and knee["goodput_rps"] > 0
    loads = [p["concurrency"] for p in sw["points"]]
    assert loads[:3] == [4, 8, 16]  # geometric probe, then bisection
    assert all(p["passed"] == (p["concurrency"] <= CLOSED_KNEE) for p in sw["points"]
               if abs(p["concurrency"] - CLOSED_KNEE) >= 2), sw["points"]
    rows = list(csv.DictReader((closed_sweep / "pareto.csv").open()))
    assert len(rows) == len(sw["points"])
    assert any(r["on_tpot_frontier"] == "1" for r in rows)
    stdout = (closed_sweep / "stdout.txt").read_text()
    assert "SLO sweep (concurrency): knee at concurrency" in stdout
    # issue 28: the console's point table says pass or fail and which SLO failed, the knee named;
    # the overall goodput only as pooled over the points
    rows = [ln for ln in stdout.splitlines() if ln.rstrip().endswith("<- knee") or " fail: " in ln
            or " pass: " in ln]
    assert len(rows) == len(sw["points"]), stdout
    assert sum(ln.rstrip().endswith("<- knee") for ln in rows) == 1
    assert f"{knee['concurrency']:g} u" in next(ln for ln in rows if ln.rstrip().endswith("<- knee"))
    failing = [p for p in sw["points"] if p["passed"] is False]
    assert failing and all(re.search(r"fail: (over-saturated|tpot p95 [\d.]+ ms > 30.5 ms \(\d+% met\))", ln)
                           for ln in rows if " fail: " in ln), rows
    assert "goodput pooled over all" in stdout and "at different loads" in stdout
    assert not re.search(r"^goodput: ", stdout, re.M)  # the unlabelled pooled line is gone
    assert read_summary(closed_sweep)["overall"]["slo"]["pooled_over_loads"] is True


def test_open_loop_sweep_knee_within_10_percent_of_analytic(tmp_path, sim_factory) -> None:
    sim = sim_factory(*KNEE_SIM)
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--llm-html", "on", "--host", sim.url, "-t", "32s", "--llm-sweep", "rate", "--llm-arrival", "constant",
                      "--llm-sweep-start", "18", "--llm-sweep-points", "10", "--llm-slo", SLO, "--llm-seed", "1",
                      "--llm-prometheus-port", "0", report=report, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sw = read_summary(report)["sweep"]
    knee = sw["knee"]
    assert knee is not None, sw
    assert knee["rate"] == pytest.approx(OPEN_KNEE, rel=0.10), [(p["rate"], p["reason"]) for p in sw["points"]]
    assert sw["mode"] == "rate" and all(p["schedule_lag"]["count"] for p in sw["points"] if p["requests"])


def test_report_html_has_the_stage_chart_and_pareto_plot(closed_sweep: Path, tmp_path: Path) -> None:
    text = (closed_sweep / "report.html").read_text()
    for title in ("Per-point latency and throughput", "Pareto frontier", "Throughput vs TPOT p99",
                  "Per-user vs total token throughput", "SLO sweep (concurrency)", "knee (SLO)",
                  # issue 28: SLO line, load labels, which SLO failed, the knee's row, pooled goodput labelled
                  "<!-- SLO TPOT ≤ 30.5 ms -->", "<!-- 4 u -->", "<!-- 8 u -->", "<!-- 16 u -->", "<b>KNEE</b> pass: ",
                  "fail: ", "pooled over all", "at different loads"):
        assert title in text, title
    assert re.search(r"fail: (over-saturated|tpot p95 [\d.]+ ms &gt; 30.5 ms)", text)
    assert "<b>Goodput:</b>" not in text  # the unlabelled pooled sentence of a plain run
    assert "<script" not in text
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (Debian package 'chromium'; .ci/run installs it)")
    shot = tmp_path / "sweep.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2400",
                    f"--screenshot={shot}", (closed_sweep / "report.html").as_uri()],
                   check=True, capture_output=True, timeout=120)
    import struct
    import zlib

    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    chunks, pos = [], 8
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        if data[pos + 4:pos + 8] == b"IDAT":
            chunks.append(data[pos + 8:pos + 8 + n])
        pos += 12 + n
    raw = zlib.decompress(b"".join(chunks))
    row = 1 + width * (len(raw) // height - 1) // width  # bytes per row incl. the filter byte
    # the charts sit below the tables: the lower half of the page must hold drawn pixels too
    lower = raw[row * (height // 3): row * (2 * height // 3)]
    assert sum(1 for b in lower[::97] if b < 200) > 1000
    shutil.copy(shot, closed_sweep / "sweep.png")


def test_steps_with_slos_say_which_slo_failed_and_name_the_knee(tmp_path) -> None:
    """Closed-loop steps 4, 14, 24 users against the knee simulator, SLO TPOT <= 20 ms: TPOT(N) =
    10 + (N - 1) ms, so 4 users pass (13 ms) and 14 and 24 fail (23, 33 ms): the console and the
    report say so per stage, name TPOT as the SLO that failed, and name 4 users the knee."""
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--llm-html", "on", "--llm-steps", "4:24:10:2s", "--llm-slo", "tpot=20ms,ttft=500ms",
                      "--llm-sim-args", " ".join(KNEE_SIM), "--llm-prometheus-port", "0", report=report, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stages = read_summary(report)["stages"]
    assert [st["users"] for st in stages] == [4, 14, 24]
    rows = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\s+(\d)\s+\d+ u .*?((?:pass|fail): .*)$",
                                                               proc.stdout, re.M)}
    assert rows[0].startswith("pass: 100.0% met every SLO") and rows[0].endswith("<- knee"), proc.stdout
    for i, tpot in ((1, 23.0), (2, 33.0)):
        m = re.match(r"fail: tpot p95 ([\d.]+) ms > 20 ms \((\d+)% met\)$", rows[i])
        assert m, rows[i]
        # the stage's own p95 and share, as summary.json has them; ttft (met) never named
        assert float(m.group(1)) == pytest.approx(stages[i]["tpot"]["p95"], abs=0.051)
        share = stages[i]["slo"]["share_meeting"]["tpot"] * 100
        assert abs(int(m.group(2)) - share) <= 0.5 + 1e-9 and share < 95
        assert stages[i]["tpot"]["p50"] >= tpot - 2  # the simulator's pace is a floor (client load only adds)
    assert "knee (highest load meeting the SLOs for 95% of requests, below every failing one): 4 u (stage 0)" \
        in proc.stdout
    assert "goodput pooled over all 3 stages at different loads" in proc.stdout
    text = (report / "report.html").read_text()
    assert "<b>KNEE</b> pass: 100.0% met every SLO" in text and text.count("fail: tpot p95") == 2
    assert "4 u (stage 0)" in text and "pooled over all 3 stages" in text
    assert text.index("Goodput at the knee") < text.index("Goodput, pooled") < text.index("Per request name")
    for label in ("<!-- SLO TPOT ≤ 20 ms -->", "<!-- SLO TTFT ≤ 500 ms -->", "<!-- 14 u -->", "<!-- 24 u -->",
                  "stage 2"):
        assert label in text, label


@pytest.mark.parametrize(("args", "says"), [
    (["--llm-steps", "8:64:8"], "--llm-steps"),
    (["--llm-stages", "10:5"], "--llm-stages"),
    (["--llm-sweep", "concurrency", "-t", "10s"], "--llm-sweep needs --llm-slo"),
    (["--llm-sweep", "rate", "--llm-slo", "tpot=30ms"], "-t/--run-time"),
    (["--llm-arrival", "zipf"], "--llm-arrival"),
    (["--llm-rate", "5", "--llm-steps", "1:2:1:1s"], "--llm-rate is one load point"),
    (["--llm-max-inflight", "4"], "--llm-max-inflight is for open loop"),
    (["--llm-rate", "-3"], "--llm-rate"),
])
def test_bad_study_options_are_one_clear_line(args, says, tmp_path) -> None:
    proc = run_locust("vllm.py", "--llm-html", "on", "--host", "http://127.0.0.1:9", "--llm-prometheus-port", "0", *args, timeout=60)
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("locust-llm:")]
    assert len(lines) == 1 and says in lines[0], proc.stderr[-2000:]


def test_sweep_under_processes_2(sim_factory, tmp_path) -> None:
    """The sweep's controller runs on the master from merged data (workers ship every 2 s);
    --processes drops -t on its workers, which must not stop them."""
    sim = sim_factory(*KNEE_SIM)
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--llm-html", "on", *processes_args(2), "--host", sim.url, "-t", "30s",
                      "--llm-sweep", "concurrency", "--llm-sweep-start", "16", "--llm-sweep-points", "4",
                      "--llm-slo", SLO, "--llm-prometheus-port", "0", report=report, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = read_summary(report)
    sw = s["sweep"]
    assert [p["concurrency"] for p in sw["points"]][:2] == [16, 32]
    lo, hi = sw["bracket"]  # a short budget (points wait 2 s longer for shipped data): the bracket holds the truth
    assert lo <= CLOSED_KNEE < hi and sw["knee"]["concurrency"] == lo, sw["points"]
    assert len({r["worker"] for r in read_records(report)}) == 2
