"""Issue 32 item 2 against the real llama.cpp server: its /metrics found on --host without any
option (``llamacpp:`` names), scraped through the run onto timeseries.csv and the report's
charts, its token rate adding up to its own counter; and the same server without ``--metrics`` named as such,
with what to do, while the run goes on.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.helpers import read_summary, run_locust
from tests.real.conftest import SLOTS
from tests.real.observe import Window, launched, run_until
from tests.real.servers import start_llama

pytestmark = pytest.mark.slow


def run(server, tmp_path, users: int, seconds: int):
    report = tmp_path / "r"
    proc = run_locust(
        "vllm.py",
        "--llm-html",
        "on",
        "--host",
        server.url,
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        f"{seconds}s",
        "--stop-timeout",
        "60",
        "--llm-model",
        "gemma-3-270m",
        "--llm-max-tokens",
        "16",
        "--llm-warmup",
        "0",  # a loaded CI machine's CPU model: 2-6 s a request, one a user
        "--llm-scrape-interval",
        "0.5",
        "--llm-prometheus-port",
        "0",
        report=report,
        timeout=180,
    )
    return proc, report


def test_llamacpp_metrics_found_without_any_option_and_plotted(llama, tmp_path) -> None:
    window = Window.open(llama)
    proc, report = run(llama, tmp_path, users=SLOTS, seconds=8)
    generated = window.delta("tokens_predicted_total")  # the server's own counter over the run
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = read_summary(report)
    found = s["server_metrics"]
    assert (found["mode"], found["dialect"], found["url"]) == ("auto", "llamacpp", llama.url + "/metrics"), (
        found
    )
    assert s["scrape"]["errors"] == 0
    series = found["series"]
    # 4 users on 4 slots: the server says it processes up to 4 at once, never defers more than it gets
    assert 1 <= series["server_num_requests_running"]["max"] <= SLOTS
    assert series["server_num_requests_waiting"]["max"] <= SLOTS
    # its generated tokens/s (a counter's rate per 0.5 s pull, averaged over the pulls) against what
    # its counter gained over the test (the preflight's few tokens and the first pull's half
    # second aside; users finish their request before the stop, so the last pull sees them)
    rate = series["server_generation_tokens_per_s"]
    expected = generated / (s["window"]["test_stop"] - s["window"]["test_start"])
    assert generated > 0 and 0.6 * expected <= rate["mean"] <= 1.4 * expected, (rate, generated)
    with (report / "timeseries.csv").open() as f:
        rows = list(csv.DictReader(f))
    running = [float(r["server_num_requests_running"]) for r in rows if r.get("server_num_requests_running")]
    assert len(running) >= 5 and max(running) >= 1
    html = (report / "report.html").read_text()
    assert "Server batch and queue" in html and "Server latency beside ours" in html


def _stderr(report: Path) -> str:
    """What a :func:`run_until` run has written to its stderr so far."""
    try:
        return (report.parent / f"{report.name}.stderr").read_text(errors="replace")
    except OSError:
        return ""


def test_llamacpp_without_metrics_is_named_and_the_run_goes_on(real_logs, tmp_path) -> None:
    server = start_llama(real_logs, slots=1, ctx_per_slot=512, metrics=False)
    first = launched(server, 2)  # the preflight's generation, then the user's first request
    try:
        # stopped once the run has named the missing page and the server has launched the user's first
        # request (the stop lets it end), not after a fixed 3 s
        report = tmp_path / "r"
        proc = run_until(
            "vllm.py",
            "--host",
            server.url,
            "-u",
            "1",
            "-r",
            "1",
            "--stop-timeout",
            "60",
            "--llm-model",
            "gemma-3-270m",
            "--llm-max-tokens",
            "16",
            "--llm-warmup",
            "0",
            "--llm-scrape-interval",
            "0.5",
            "--llm-prometheus-port",
            "0",
            report=report,
            until=lambda r: first(r) and "has its /metrics off" in _stderr(r),
        )
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [ln for ln in proc.stderr.splitlines() if "has its /metrics off" in ln]
    assert len(said) == 1 and "start llama-server with --metrics" in said[0], proc.stderr[-2000:]
    s = read_summary(report)
    assert s["server_metrics"]["url"] is None and s["server_metrics"]["dialect"] == "llamacpp"
    assert s["overall"]["requests"] >= 1 and "scrape" not in s
