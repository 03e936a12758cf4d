"""Issue 28: a real headless run prints exactly one self-check line, and the report shows the
same sentence in the colour of its level (all requests failing; a calm run)."""

from __future__ import annotations

import pytest

from tests.helpers import read_summary, run_locust

CLIENT_WORDS = ("self-check", "client healthy", "client saturated", "other processes", "client pauses")


def verdict_lines(stdout: str) -> list[str]:
    """Every line of the console about the client's own health."""
    return [line for line in stdout.splitlines() if any(w in line for w in CLIENT_WORDS)]


def test_all_failed_run_says_so_in_one_line(sim_factory, tmp_path) -> None:
    sim = sim_factory("--fault-rate", "1", "--fault-kinds", "http_500", "--output-tokens", "5", "--seed", "3")
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--llm-html", "on", "--host", sim.url, "-u", "2", "-r", "2", "-t", "3s", "--llm-model", "m",
                      report=report, timeout=90)
    check = read_summary(report)["self_check"]
    assert check["level"] == "failed" and check["failing"] and check["top_failure"] == "http_500", check
    lines = verdict_lines(proc.stdout)
    assert len(lines) == 1, proc.stdout[-3000:]
    assert lines[0].startswith("self-check: all requests failed (") and "top category http_500" in lines[0]
    assert lines[0] == f"self-check: {check['message']}" and "healthy" not in lines[0]
    html = (report / "report.html").read_text()
    assert "<p class='verdict lv-bad' data-level='failed'><b>Client self-check:</b> all requests failed (" in html
    assert "client healthy" not in html


def test_calm_run_says_healthy_in_one_line(sim_factory, tmp_path) -> None:
    # a 250 ms TTFT: the client's tolerance is 12.5 ms, well above a calm client's lag
    sim = sim_factory("--ttft-ms", "250", "--itl-ms", "20", "--output-tokens", "10", "--seed", "1")
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--llm-html", "on", "--host", sim.url, "-u", "4", "-r", "4", "-t", "4s", "--stop-timeout", "10",
                      report=report, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    check = read_summary(report)["self_check"]
    node = check["nodes"][0]
    assert node["loop_lag_ms"]["count"] >= 50  # at 50 probes/s, >= 1 s of the measured window
    assert node["outside_window"]["loop_lag_ms"]["count"] >= 5  # start-up (the warm-up) and stop kept apart
    assert verdict_lines(proc.stdout) == [f"self-check: {check['message']}"], proc.stdout[-3000:]
    html = (report / "report.html").read_text()
    if node["contention_detail"] or (node["machine_busy"] or {}).get("lag"):  # a machine so busy that other
        assert check["level"] == "caution", check["message"]  # processes' waits matter (shared CI): that alone is said
        assert check["message"].startswith("caution: the machine is busy: other processes held the client's core on local (")
        assert check["message"].endswith("stamps taken then are late by as much (give the load generator its own cores)")
        return
    assert check["level"] == "healthy", check["message"]
    assert check["message"].startswith("client healthy: loop lag ")
    assert "<p class='verdict lv-ok' data-level='healthy'><b>Client self-check:</b> client healthy" in html


SLOW_START = '''
import time

from locust import events

from llm_users import plugin
from llm_users.users import VLLMUser

plugin.register(events)


class SlowStart(VLLMUser):
    def on_start(self) -> None:
        end = time.thread_time() + 0.3  # 300 ms of CPU: the loop is blocked, as a heavy start-up blocks it
        while time.thread_time() < end:
            pass
        super().on_start()
'''


@pytest.mark.serial  # 50 lag samples in 6 s, none of 250 ms: run alone (tests/sharding.py)
def test_distributed_start_up_stays_out_of_the_verdict(sim_factory, tmp_path) -> None:
    """Two workers whose users each block the loop 300 ms as they start: the blocks are seen,
    kept apart as start-up (before the first measured request), and the verdict is not
    "saturated" from them, in one line."""
    from tests.real.servers import free_port

    sim = sim_factory("--ttft-ms", "250", "--itl-ms", "20", "--output-tokens", "10", "--seed", "1")
    (tmp_path / "slow_start.py").write_text(SLOW_START)
    report = tmp_path / "r"
    port = str(free_port())
    proc = run_locust(str(tmp_path / "slow_start.py"), "--processes", "2", "--master-bind-port", port,
                      "--master-port", port, "--host", sim.url, "-u", "4", "-r", "4", "-t", "6s",
                      "--stop-timeout", "10", "--llm-model", "m", "--llm-spawn-spread", "off",
                      # each worker's preflight (one 250 ms request as its test starts) would shorten its
                      # 6 s, whose 2 s self-check pieces have no slack for it under a busy machine
                      "--llm-preflight", "off", report=report, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check = read_summary(report)["self_check"]
    assert len(check["nodes"]) == 2, check
    for node in check["nodes"]:
        assert node["outside_window"]["loop_lag_ms"]["max"] >= 250, node  # the start-up block, seen
        assert node["loop_lag_ms"]["count"] >= 50 and node["loop_lag_ms"]["max"] < 250, node  # and kept apart
        assert node["lag_figure_ms"] < 12.5, node  # under 5% of the 250 ms TTFT
    assert check["level"] in ("healthy", "caution"), check["message"]  # caution: a busy machine's other processes
    assert verdict_lines(proc.stdout) == [f"self-check: {check['message']}"], proc.stdout[-3000:]
