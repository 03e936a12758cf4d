"""Issue 53 item 6, real `locust` processes: one warm-up setting for the whole run (the master's,
applied by every worker and stated as they applied it), and failed warm-up requests counted
(summary.json ``window.warmup``, the console) instead of the hint blaming the run's length."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import (
    free_port,
    master_args,
    read_records,
    read_summary,
    run_locust,
    start_locust,
    wait_until,
    worker_args,
)

pytestmark = pytest.mark.slow

NONE_APPLIED = {"requests_per_user": 0, "seconds": 0.0, "ramp": False}


def test_only_the_master_given_warmup_0_is_what_every_worker_applies(sim_factory, tmp_path: Path) -> None:
    """Only the master got ``--llm-warmup 0``: the console said "first 0 per user" while the
    workers used their default of 1 (4 requests left out). Now the workers take the master's
    setting, the summary says what each applied, and one worker's own ``--llm-warmup 2`` gives
    way, with a line in its log."""
    sim = sim_factory("--ttft-ms", "30", "--itl-ms", "3", "--output-tokens", "10", "--seed", "5")
    port, report = free_port(), tmp_path / "r"
    master = start_locust([*master_args(port), "--headless", "--only-summary", "--host", sim.url, "-u", "4", "-r", "4",
                           "-t", "4s", "--stop-timeout", "10", "--llm-preflight", "off", "--llm-prometheus-port", "0",
                           "--llm-warmup", "0", "--llm-report", str(report)], tmp_path / "master.log")
    workers = [start_locust([*worker_args(port), *own], tmp_path / f"w{i}.log")
               for i, own in enumerate(([], ["--llm-warmup", "2"]))]
    procs = [master, *workers]
    try:
        assert wait_until(lambda: master.poll() is not None, 120), "the master did not exit"
        wait_until(lambda: all(w.poll() is not None for w in workers), 30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    log = (tmp_path / "master.log").read_text()
    assert master.returncode == 0, log[-3000:]
    summary = read_summary(report)
    records = read_records(report)
    assert records and not [r for r in records if r["warmup"]], "a worker flagged warm-up"
    assert summary["overall"]["excluded_warmup"] == 0
    assert summary["overall"]["requests"] == sum(1 for r in records if r["status"] != "interrupted")  # each one ended
    assert "warm-up excluded: 0 requests (first 0 per user, as applied by all 2 workers)" in log, log[-3000:]
    warmup = summary["window"]["warmup"]
    assert warmup["requests_per_user"] == 0 and warmup["workers"] == dict.fromkeys(summary["workers"]["reported"],
                                                                                   NONE_APPLIED), warmup
    assert len(warmup["workers"]) == 2 and warmup["excluded"] == warmup["failed"] == 0
    for i, own in enumerate((1, 2)):  # the default, and --llm-warmup 2: each gave way
        text = (tmp_path / f"w{i}.log").read_text()
        assert (f"warm-up as the master set it (first 0 per user), not as this worker's own options would (first "
                f"{own} per user): one --llm-warmup for the whole run") in text, text[-2000:]


def _failing_run(sim_factory, tmp_path: Path, *, fault_rate: str, seed: str,  # noqa: ANN001
                 warmup: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """A 3-s run of 2 users against a simulator failing ``fault_rate`` of its requests with
    HTTP 500, ``--llm-warmup warmup``: the run and its report directory."""
    sim = sim_factory("--ttft-ms", "20", "--itl-ms", "3", "--output-tokens", "10", "--fault-rate", fault_rate,
                      "--fault-kinds", "http_500", "--seed", seed)
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--host", sim.url, "-u", "2", "-r", "2", "-t", "3s", "--stop-timeout", "10",
                      "--llm-preflight", "off", "--llm-prometheus-port", "0", "--llm-warmup", warmup, report=report)
    return proc, report


def test_failed_warm_ups_are_counted_and_stated(sim_factory, tmp_path: Path) -> None:
    """Every request fails (the simulator's fault injection): each user's 2 warm-up requests
    failed and appeared nowhere; now summary.json and the console count them."""
    proc, report = _failing_run(sim_factory, tmp_path, fault_rate="1", seed="1", warmup="2")
    out = proc.stdout + proc.stderr
    failed = [r for r in read_records(report) if r["warmup"] and r["status"] == "error"]
    assert len(failed) == 4, out[-3000:]  # each of the 2 users' first 2 (a failing user backs off, then sends again)
    assert "warm-up excluded: 4 requests (first 2 per user; 4 of them failed (http_500: 4))" in out, out[-3000:]
    warmup = read_summary(report)["window"]["warmup"]
    assert (warmup["excluded"], warmup["failed"], warmup["failed_by_category"]) == (4, 4, {"http_500": 4}), warmup


def test_nothing_measured_after_failed_warm_ups_names_them_not_the_run_length(sim_factory, tmp_path: Path) -> None:
    """Every request is warm-up (``--llm-warmup 1000``) and about half fail: the hint said only
    "run longer than N s"; it names the failed warm-ups, counted as summary.json counts them."""
    proc, report = _failing_run(sim_factory, tmp_path, fault_rate="0.5", seed="2", warmup="1000")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]  # nothing measured
    records = [r for r in read_records(report) if r["status"] in ("ok", "error")]
    assert records and all(r["warmup"] for r in records)
    failed = Counter(r["error_category"] for r in records if r["status"] == "error")
    ok = sum(1 for r in records if r["status"] == "ok")
    assert failed and ok, (failed, ok)  # the seed's draws: both kinds among the first requests
    assert "run longer than" not in out, out[-3000:]
    line = (f"nothing measured: the {len(records)} requests that ended were warm-up and {failed.total()} of them "
            f"failed (top category http_500: {failed['http_500']}; summary.json window.warmup.failed); the server "
            "failed part of the warm-up: find why before running longer (-t)")
    assert line in out, out[-3000:]
    warmup = read_summary(report)["window"]["warmup"]
    assert (warmup["excluded"], warmup["failed"]) == (len(records), failed.total()), warmup
