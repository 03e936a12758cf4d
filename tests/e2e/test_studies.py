"""Issue 11: stages, steps and SLO sweeps in real locust processes against the simulator, whose
capacity model gives the true knee analytically (docs/simulator.md, "The analytic limit").

Simulator: TTFT 20 ms, chunk gap = 10 ms + 1 ms x (running - 1), 10 tokens; SLO TPOT <= 30.5 ms.
- closed loop: TPOT(N) = 10 + 1 (N - 1) <= 30.5  ->  N* = 21 users;
- open loop (constant arrivals, Little's law N = rate x E2E): the rate at which the running
  count reaches 1 + (30.5 - 10) / 1 = 21.5: rate* = 21.5 / (20 + 9 x 30.5 ms) = 73.0 req/s.

Each study runs once for the module, one at a time (tests/e2e/locust_pool.py), each against a
simulator of its own (the knee is the simulator's batch: two runs on one would share it); every
test that checks a study reads its finished run. The two sweeps whose knee is bound to 10% run
with nothing else of the module beside them (``alone``: the client's lateness moves the knee).
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_users.metrics import Distribution
from tests.e2e.locust_pool import Pool, Run, Scenario, params, pool_in
from tests.helpers import (
    locust_request_count,
    processes_args,
    read_records,
    read_summary,
)

pytestmark = pytest.mark.slow


KNEE_SIM = (
    "--ttft-ms",
    "20",
    "--itl-ms",
    "10",
    "--itl-slope-ms",
    "1",
    "--output-tokens",
    "10",
    "--seed",
    "1",
)
SLO = "tpot=30.5ms"
CLOSED_KNEE = 1 + (30.5 - 10) // 1  # 21 users
OPEN_KNEE = (1 + (30.5 - 10) / 1) / ((20 + 9 * 30.5) / 1000)  # 73.0 req/s

BAD_OPTIONS = [
    (["--llm-steps", "8:64:8"], "--llm-steps"),
    (["--llm-stages", "10:5"], "--llm-stages"),
    (["--llm-sweep", "concurrency", "-t", "10s"], "--llm-sweep needs --llm-slo"),
    (["--llm-sweep", "rate", "--llm-slo", "tpot=30ms"], "-t/--run-time"),
    (["--llm-arrival", "zipf"], "--llm-arrival"),
    (["--llm-rate", "5", "--llm-steps", "1:2:1:1s"], "--llm-rate is one load point"),
    (["--llm-max-inflight", "4"], "--llm-max-inflight is for open loop"),
    (["--llm-rate", "-3"], "--llm-rate"),
]


def _knee_sim(n: int) -> tuple[str, ...]:
    """KNEE_SIM for one scenario alone (the pool shares a simulator between equal argument lists;
    ``--trace-limit`` changes nothing the runs measure)."""
    return (*KNEE_SIM, "--trace-limit", str(2000 + n))


def _scenarios(base: Path) -> dict[str, Scenario]:
    prom = ("--llm-prometheus-port", "0")
    out = {
        # Locust's own request count, from the stats it saves with --json-file at exit
        "steps": Scenario(
            "vllm.py",
            (
                "--llm-html",
                "on",
                lambda: processes_args(2),
                "--llm-steps",
                "8:64:8:2s",
                *prom,
                "--stop-timeout",
                "5",
                "--json-file",
                str(base / "steps" / "locust"),
            ),
            sim=("--ttft-ms", "10", "--itl-ms", "2", "--output-tokens", "8", "--seed", "1"),
        ),
        # 4, 8, 16, 32, 24, 20, 22, 21: eight points of 3 s (2.8 s: settle, measurement, tail)
        "closed_sweep": Scenario(
            "vllm.py",
            (
                "--llm-html",
                "on",
                "-t",
                "30s",
                "--llm-sweep",
                "concurrency",
                "--llm-sweep-start",
                "4",
                "--llm-sweep-points",
                "10",
                "--llm-slo",
                SLO,
                *prom,
            ),
            sim=_knee_sim(0),
            alone=True,
        ),
        # 19, 38, 76, 57, 66.5, 71.25, 73.6: seven points of 3 s, none past saturation (its guard:
        # tests/e2e/test_sweep_search.py)
        "open_sweep": Scenario(
            "vllm.py",
            (
                "--llm-html",
                "on",
                "-t",
                "28s",
                "--llm-sweep",
                "rate",
                "--llm-arrival",
                "constant",
                "--llm-sweep-start",
                "19",
                "--llm-sweep-points",
                "9",
                "--llm-slo",
                SLO,
                "--llm-seed",
                "1",
                *prom,
            ),
            sim=_knee_sim(1),
            alone=True,
        ),
        # 16, 32, 24 (or 16, 32 when the budget ends): points of ~7 s (their data ships every 2 s)
        "processes_sweep": Scenario(
            "vllm.py",
            (
                "--llm-html",
                "on",
                lambda: processes_args(2),
                "-t",
                "16s",
                "--llm-sweep",
                "concurrency",
                "--llm-sweep-start",
                "16",
                "--llm-sweep-points",
                "3",
                "--llm-slo",
                SLO,
                *prom,
            ),
            sim=_knee_sim(2),
        ),
        # the console's and report's SLO verdicts and the knee's explanation (decode) on one run
        "slo_steps": Scenario(
            "vllm.py",
            (
                "--llm-html",
                "on",
                "--llm-steps",
                "4:24:10:3s",
                "--llm-slo",
                "tpot=20ms,ttft=500ms",
                "--llm-scrape-interval",
                "0.5",
                *prom,
            ),
            sim=_knee_sim(3),
        ),
    }
    for i, (args, _) in enumerate(BAD_OPTIONS):
        out[f"bad{i}"] = Scenario(
            "vllm.py",
            ("--llm-html", "on", "--host", "http://127.0.0.1:9", *prom, *args),
            report=False,
            timeout=60,
        )
    return out


def _needs(item: Any) -> list[str]:
    return {
        "test_steps_8_64_8_one_row_per_stage_and_counts_add_up": lambda: ["steps"],
        "test_closed_loop_sweep_knee_within_10_percent_of_analytic": lambda: ["closed_sweep"],
        "test_open_loop_sweep_knee_within_10_percent_of_analytic": lambda: ["open_sweep"],
        "test_report_html_has_the_stage_chart_and_pareto_plot": lambda: ["closed_sweep"],
        "test_steps_with_slos_say_which_slo_failed_and_name_the_knee": lambda: ["slo_steps"],
        "test_decode_slope_knee_named": lambda: ["slo_steps"],
        "test_bad_study_options_are_one_clear_line": lambda: [f"bad{_bad_index(item)}"],
        "test_sweep_under_processes_2": lambda: ["processes_sweep"],
    }[item.originalname]()


def _bad_index(item: Any) -> int:
    p = params(item)
    return BAD_OPTIONS.index((p["args"], p["says"]))


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """Every study of the module, each run once (when a test first needs it, or ahead)."""
    base = tmp_path_factory.mktemp("studies")
    yield from pool_in(request, base, _scenarios(base), _needs, parallel=1)


def _ok(runs: Pool, name: str) -> Run:
    """The scenario's finished run, which must have exited 0 (else its logs' tails)."""
    run = runs.run(name)
    assert run.proc.returncode == 0, (
        f"{name}: exit {run.proc.returncode}\n{run.proc.stdout[-2000:]}\n{run.proc.stderr[-3000:]}"
    )
    return run


def _exact_per_stage(stages: list[dict], records: list[dict]) -> None:
    """Each stage's merged percentiles equal those of its own records (steady-state ones)."""
    for st in stages:
        mine = [
            r
            for r in records
            if r["stage"] == st["index"]
            and not r["warmup"]
            and st["start"] + st["settle_s"]
            <= r["start_time"]
            < st["start"] + st["settle_s"] + st["measured_s"]
        ]  # (the last stage's tail: excluded)
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


def test_steps_8_64_8_one_row_per_stage_and_counts_add_up(runs: Pool) -> None:
    """--processes 2 (master + 2 workers): one row per stage, settle excluded, Locust's own
    request count = sum over stages of measured + excluded, exact merged per-stage percentiles."""
    run = _ok(runs, "steps")
    report, prefix = run.report, run.report.parent / "locust"
    s = read_summary(report)
    stages = s["stages"]
    records = read_records(report)
    assert [st["users"] for st in stages] == [8, 16, 24, 32, 40, 48, 56, 64]
    for st in stages:
        assert st["settle_s"] == pytest.approx(0.4)  # 20% of the 2 s stage
        assert st["excluded"] > 0 and st["requests"] > 0
        if (
            st is stages[-1]
        ):  # issue 29: the last window ends at the plan's end, its tail brings its requests back
            assert st["measured_s"] == pytest.approx(2 - st["settle_s"], abs=1e-6)
        else:
            assert st["measured_s"] == pytest.approx(st["end"] - st["start"] - st["settle_s"], abs=1e-6)
        in_settle = [
            r for r in records if r["stage"] == st["index"] and r["start_time"] < st["start"] + st["settle_s"]
        ]
        assert st["excluded_settle"] == len(in_settle)  # every request of the settle window, and only those
        assert st["excluded"] == (
            st["excluded_settle"] + st["excluded_tail"] + st["excluded_warmup"] + st["excluded_cooldown"]
        )
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


@pytest.fixture
def closed_sweep(runs: Pool) -> Path:
    """The closed-loop sweep's report dir, its console output in stdout.txt."""
    run = _ok(runs, "closed_sweep")
    (run.report / "stdout.txt").write_text(run.proc.stdout)
    return run.report


def test_closed_loop_sweep_knee_within_10_percent_of_analytic(closed_sweep: Path) -> None:
    sw = read_summary(closed_sweep)["sweep"]
    knee = sw["knee"]
    assert knee is not None, sw
    assert knee["concurrency"] == pytest.approx(CLOSED_KNEE, rel=0.10), [
        (p["concurrency"], p["reason"]) for p in sw["points"]
    ]
    assert knee["share_meeting_all"] >= 0.95 and knee["goodput_rps"] > 0
    loads = [p["concurrency"] for p in sw["points"]]
    assert loads[:3] == [4, 8, 16]  # geometric probe, then bisection
    assert all(
        p["passed"] == (p["concurrency"] <= CLOSED_KNEE)
        for p in sw["points"]
        if abs(p["concurrency"] - CLOSED_KNEE) >= 2
    ), sw["points"]
    rows = list(csv.DictReader((closed_sweep / "pareto.csv").open()))
    assert len(rows) == len(sw["points"])
    assert any(r["on_tpot_frontier"] == "1" for r in rows)
    stdout = (closed_sweep / "stdout.txt").read_text()
    assert "SLO sweep (concurrency): knee at concurrency" in stdout
    # issue 28: the console's point table says pass or fail and which SLO failed, the knee named;
    # the overall goodput only as pooled over the points
    rows = [
        ln
        for ln in stdout.splitlines()
        if ln.rstrip().endswith("<- knee") or " fail: " in ln or " pass: " in ln
    ]
    assert len(rows) == len(sw["points"]), stdout
    assert sum(ln.rstrip().endswith("<- knee") for ln in rows) == 1
    assert f"{knee['concurrency']:g} u" in next(ln for ln in rows if ln.rstrip().endswith("<- knee"))
    failing = [p for p in sw["points"] if p["passed"] is False]
    assert failing and all(
        re.search(r"fail: (over-saturated|tpot p95 [\d.]+ ms > 30.5 ms \(\d+% met\))", ln)
        for ln in rows
        if " fail: " in ln
    ), rows
    assert "goodput pooled over all" in stdout and "at different loads" in stdout
    assert not re.search(r"^goodput: ", stdout, re.M)  # the unlabelled pooled line is gone
    assert read_summary(closed_sweep)["overall"]["slo"]["pooled_over_loads"] is True


def test_open_loop_sweep_knee_within_10_percent_of_analytic(runs: Pool) -> None:
    sw = read_summary(_ok(runs, "open_sweep").report)["sweep"]
    knee = sw["knee"]
    assert knee is not None, sw
    assert knee["rate"] == pytest.approx(OPEN_KNEE, rel=0.10), [
        (p["rate"], p["reason"]) for p in sw["points"]
    ]
    assert sw["mode"] == "rate" and all(p["schedule_lag"]["count"] for p in sw["points"] if p["requests"])


def test_report_html_has_the_stage_chart_and_pareto_plot(closed_sweep: Path, tmp_path: Path) -> None:
    text = (closed_sweep / "report.html").read_text()
    for title in (
        "Per-point latency and throughput",
        "Pareto frontier",
        "Throughput vs TPOT p99",
        "Per-user vs total token throughput",
        "SLO sweep (concurrency)",
        "knee (SLO)",
        # issue 28: SLO line, load labels, which SLO failed, the knee's row, pooled goodput labelled
        "<!-- SLO TPOT ≤ 30.5 ms -->",
        "<!-- 4 u -->",
        "<!-- 8 u -->",
        "<!-- 16 u -->",
        "<b>KNEE</b> pass: ",
        "fail: ",
        "pooled over all",
        "at different loads",
    ):
        assert title in text, title
    assert re.search(r"fail: (over-saturated|tpot p95 [\d.]+ ms &gt; 30.5 ms)", text)
    assert "<b>Goodput:</b>" not in text  # the unlabelled pooled sentence of a plain run
    assert "<script" not in text
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (Debian package 'chromium'; .ci/run installs it)")
    shot = tmp_path / "sweep.png"
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1280,2400",
            f"--screenshot={shot}",
            (closed_sweep / "report.html").as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    import struct
    import zlib

    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    chunks, pos = [], 8
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        if data[pos + 4 : pos + 8] == b"IDAT":
            chunks.append(data[pos + 8 : pos + 8 + n])
        pos += 12 + n
    raw = zlib.decompress(b"".join(chunks))
    row = 1 + width * (len(raw) // height - 1) // width  # bytes per row incl. the filter byte
    # the charts sit below the tables: the lower half of the page must hold drawn pixels too
    lower = raw[row * (height // 3) : row * (2 * height // 3)]
    assert sum(1 for b in lower[::97] if b < 200) > 1000
    shutil.copy(shot, closed_sweep / "sweep.png")


def test_steps_with_slos_say_which_slo_failed_and_name_the_knee(runs: Pool) -> None:
    """Closed-loop steps 4, 14, 24 users against the knee simulator, SLO TPOT <= 20 ms: TPOT(N) =
    10 + (N - 1) ms, so 4 users pass (13 ms) and 14 and 24 fail (23, 33 ms): the console and the
    report say so per stage, name TPOT as the SLO that failed, and name 4 users the knee."""
    run = _ok(runs, "slo_steps")
    report, proc = run.report, run.proc
    stages = read_summary(report)["stages"]
    assert [st["users"] for st in stages] == [4, 14, 24]
    rows = {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r"^\s+(\d)\s+\d+ u .*?((?:pass|fail): .*)$", proc.stdout, re.M)
    }
    assert rows[0].startswith("pass: 100.0% met every SLO") and rows[0].endswith("<- knee"), proc.stdout
    for i, tpot in ((1, 23.0), (2, 33.0)):
        m = re.match(r"fail: tpot p95 ([\d.]+) ms > 20 ms \((\d+)% met\)$", rows[i])
        assert m, rows[i]
        # the stage's own p95 and share, as summary.json has them; ttft (met) never named
        assert float(m.group(1)) == pytest.approx(stages[i]["tpot"]["p95"], abs=0.051)
        share = stages[i]["slo"]["share_meeting"]["tpot"] * 100
        assert abs(int(m.group(2)) - share) <= 0.5 + 1e-9 and share < 95
        assert stages[i]["tpot"]["p50"] >= tpot - 2  # the simulator's pace is a floor (client load only adds)
    assert (
        "knee (highest load meeting the SLOs for 95% of requests, below every failing one): 4 u (stage 0)"
        in proc.stdout
    )
    assert "goodput pooled over all 3 stages at different loads" in proc.stdout
    text = (report / "report.html").read_text()
    assert "<b>KNEE</b> pass: 100.0% met every SLO" in text and text.count("fail: tpot p95") == 2
    assert "4 u (stage 0)" in text and "pooled over all 3 stages" in text
    assert text.index("Goodput at the knee") < text.index("Goodput, pooled") < text.index("Per request name")
    for label in (
        "<!-- SLO TPOT ≤ 20 ms -->",
        "<!-- SLO TTFT ≤ 500 ms -->",
        "<!-- 14 u -->",
        "<!-- 24 u -->",
        "stage 2",
    ):
        assert label in text, label


def test_decode_slope_knee_named(runs: Pool) -> None:
    """Issue 32 item 3 (see tests/e2e/test_knee_explained.py), on the run above: ``--itl-slope-ms 1``
    (ITL = 10 + (running - 1) ms), an unlimited batch and 4, 14, 24 users, TPOT SLO 20 ms: nothing
    waits, the batch grows and each token slows; the sentence must name decode, never queueing.
    The server's /metrics is found on ``--host`` without any option."""
    run = _ok(runs, "slo_steps")
    proc = run.proc
    s = read_summary(run.report)
    found = s["server_metrics"]  # on --host, without any option
    assert (found["mode"], found["dialect"], found["url"]) == ("auto", "vllm", f"{run.sim_url}/metrics")
    stages = s["stages"]
    assert [st["users"] for st in stages] == [4, 14, 24]
    for st in stages:
        assert st["server_metrics"]["server_num_requests_waiting"]["max"] == 0  # nothing ever queues
    itl = stages[1]["server_metrics"]["server_itl_mean_ms"]["mean"]
    running = stages[1]["server_metrics"]["server_num_requests_running"]["mean"]
    itl_24 = stages[2]["server_metrics"]["server_itl_mean_ms"]["mean"]
    running_24 = stages[2]["server_metrics"]["server_num_requests_running"]["mean"]
    # Figures the simulator decides, not the machine's pace: the batch (one request a user at most)
    # and the gap it schedules, 10 + (running - 1) ms, whose mean over a stage is that schedule's (a
    # late timer is caught up on the next chunks: the mean moves by the lateness over ~1,800 gaps);
    # the histogram's gaps trail the gauge a little (tokens of requests that began at a smaller batch)
    figures = (running, itl, running_24, itl_24)
    assert 8 <= running <= 14 and running_24 <= 24 and itl_24 > itl + 3, figures
    assert abs(itl - (10 + running - 1)) <= 3 and abs(itl_24 - (10 + running_24 - 1)) <= 3, figures
    knee = s["knee"]
    assert (knee["users"], knee["first_failing_users"]) == (4, 14)
    why = knee["explanation"]
    assert why.startswith("TPOT p95 passes 20 ms from 14 u ("), why
    assert "decode slowing as the batch grows (running requests " in why and "queueing" not in why, why
    m = re.search(
        r"running requests ([\d.]+) -> ([\d.]+), server time per token ([\d.]+) -> ([\d.]+) ms", why
    )
    assert m and float(m.group(2)) == pytest.approx(running, abs=0.051), why
    assert float(m.group(4)) == pytest.approx(itl, abs=0.051)
    assert f"why the knee: {why}" in proc.stdout


@pytest.mark.parametrize(("args", "says"), BAD_OPTIONS)
def test_bad_study_options_are_one_clear_line(args, says, runs: Pool) -> None:
    proc = runs.run(f"bad{BAD_OPTIONS.index((args, says))}").proc
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("locust-llm:")]
    assert len(lines) == 1 and says in lines[0], proc.stderr[-2000:]


def test_sweep_under_processes_2(runs: Pool) -> None:
    """The sweep's controller runs on the master from merged data (workers ship every 2 s);
    --processes drops -t on its workers, which must not stop them."""
    report = _ok(runs, "processes_sweep").report
    s = read_summary(report)
    sw = s["sweep"]
    assert [p["concurrency"] for p in sw["points"]][:2] == [16, 32]
    lo, hi = sw[
        "bracket"
    ]  # a short budget (points wait 2 s longer for shipped data): the bracket holds the truth
    assert lo <= CLOSED_KNEE < hi and sw["knee"]["concurrency"] == lo, sw["points"]
    assert len({r["worker"] for r in read_records(report)}) == 2
