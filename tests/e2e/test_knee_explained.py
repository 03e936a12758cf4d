"""Issue 32 items 2, 3: the server's /metrics found without any option and read on the run's time
axis, and a knee that explains itself, on simulator step runs whose cause is known.

- Queueing: ``--max-batch 4`` and 2, 4, 8 users, TTFT SLO 150 ms, with a GPU sidecar (fake
  NVML) whose utilisation follows the batch. A request is served in
  20 + 19 x 10 = 210 ms; at 4 users none waits, at 8 four wait for a slot, so the simulator's
  waiting gauge is about 4 (less while slots turn over) and a request queues for up to one
  service time: the sentence must name queueing, with those figures.
- Decode slope: ``--itl-slope-ms 1`` (ITL = 10 + (running - 1) ms), an unlimited batch and
  4, 14, 24 users, TPOT SLO 20 ms: nothing waits, the batch grows and each token slows; the
  sentence must name decode, never queueing (tests/e2e/test_studies.py's
  ``test_decode_slope_knee_named``: on the run of its SLO steps, the same study).
- The same server in a distributed run (``--processes 2``, SDK mode; the records merged on the
  master, which alone scrapes).

The page is found on ``--host`` without any option in all three.
"""

from __future__ import annotations

import csv
import re
import threading
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from exporters.nvml import GPUCollector, serve
from tests.e2e.test_studies import KNEE_SIM
from tests.exporters.fake_nvml import FakeGPU, FakeNVML
from tests.helpers import free_port, read_summary, run_locust

pytestmark = pytest.mark.slow


class GPUFollowingTheBatch:
    """A GPU sidecar over the fake NVML whose utilisation follows the simulator's batch
    (25% per running request of 4) and holds 20 of 80 GiB; started once the simulator is known."""

    def __init__(self) -> None:
        self.gpu = FakeGPU(uuid="GPU-knee", name="Fake H100", memory_used=20 * 1024**3)
        nvml = FakeNVML([self.gpu])
        nvml.nvmlInit()
        registry = CollectorRegistry()
        registry.register(GPUCollector(nvml))
        self.server, _ = serve(registry, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.stop = threading.Event()

    def follow(self, sim_url: str) -> None:
        def loop() -> None:
            while not self.stop.wait(0.2):
                try:
                    with urllib.request.urlopen(sim_url + "/metrics", timeout=2) as r:
                        text = r.read().decode()
                except OSError:
                    continue
                m = re.search(r"^vllm:num_requests_running\{[^}]*\} ([\d.]+)", text, re.M)
                if m:
                    self.gpu.util_gpu = int(25 * float(m.group(1)))

        threading.Thread(target=loop, daemon=True).start()


@pytest.fixture
def gpu() -> Iterator[GPUFollowingTheBatch]:
    g = GPUFollowingTheBatch()
    yield g
    g.stop.set()
    g.server.shutdown()
    g.server.server_close()


@pytest.mark.serial  # two scrapes in each 3 s stage: run alone (tests/sharding.py)
def test_queueing_knee_named_with_the_servers_and_gpus_figures(sim_factory, gpu, tmp_path) -> None:
    sim = sim_factory(
        "--max-batch", "4", "--ttft-ms", "20", "--itl-ms", "10", "--output-tokens", "20", "--seed", "1"
    )
    gpu.follow(sim.url)
    report = tmp_path / "r"
    proc = run_locust(
        "vllm.py",
        "--llm-html",
        "on",
        "--host",
        sim.url,
        "--llm-stages",
        "2:3s,4:3s,8:3s",
        "--llm-slo",
        "ttft=150ms",
        "--llm-gpu-sidecar",
        gpu.url,
        "--llm-scrape-interval",
        "0.5",
        "--llm-prometheus-port",
        "0",
        report=report,
        timeout=150,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = read_summary(report)
    # found without any option
    found = s["server_metrics"]
    assert found["mode"] == "auto" and found["dialect"] == "vllm", found
    assert found["url"] == sim.url + "/metrics"
    assert s["scrape"]["errors"] == 0
    stages = s["stages"]
    assert [st["users"] for st in stages] == [2, 4, 8]
    windows = [
        (
            st["users"],
            st["start"],
            st["settle_s"],
            st["measured_s"],
            st["end"],
            st["server_metrics"]["server_num_requests_running"]["samples"],
        )
        for st in stages
    ]
    for st in stages:  # every stage has the server's figures over its own window
        assert st["server_metrics"]["server_num_requests_running"]["samples"] >= 2, (windows, s["scrape"])
    assert stages[0]["server_metrics"]["server_num_requests_waiting"]["max"] == 0
    waiting = stages[2]["server_metrics"]["server_num_requests_waiting"]["mean"]
    queue = stages[2]["server_metrics"]["server_queue_time_mean_ms"]["mean"]
    assert 2.0 <= waiting <= 4.0, waiting
    assert 60 <= queue <= 260, queue
    assert stages[2]["server_metrics"]["server_num_requests_running"]["max"] == 4
    knee = s["knee"]
    assert (knee["users"], knee["first_failing_users"]) == (4, 8)
    why = knee["explanation"]
    assert why.startswith("TTFT p95 passes 150 ms from 8 u ("), why
    assert "queueing in the server (waiting requests " in why and "decode" not in why, why
    m = re.search(r"waiting requests ([\d.]+) -> ([\d.]+), queue time mean ([\d.]+) -> ([\d.]+) ms", why)
    assert m, why
    assert float(m.group(2)) == pytest.approx(waiting, abs=0.051) and float(m.group(4)) == pytest.approx(
        queue, rel=0.01
    )
    # the GPU on the same axis and in the sentence: 2 users run 1 or 2 of 4 (25-50%), 8 fill the batch
    util = [st["server_metrics"]["gpu_0_utilization_ratio"]["mean"] for st in stages]
    assert 0.2 <= util[0] <= 0.55 and util[2] >= 0.9, util
    g = re.search(r"; GPU utilisation (\d+)% -> (\d+)%, memory 25%$", why)
    assert g and int(g.group(2)) == round(100 * util[2]) and int(g.group(1)) == round(100 * util[1]), why
    # the console, the report, timeseries.csv
    assert f"why the knee: {why}" in proc.stdout
    html = (report / "report.html").read_text()
    assert (
        "Why the knee:" in html and "Server latency beside ours" in html and "Server batch and queue" in html
    )
    with (report / "timeseries.csv").open() as f:
        rows = list(csv.DictReader(f))
    col = [float(r["server_num_requests_waiting"]) for r in rows if r.get("server_num_requests_waiting")]
    assert len(col) >= 6 and max(col) == 4 and min(col) == 0
    # queued 60-260 ms: inside vLLM's first bucket (0, 300 ms], so the p99 is that bound, no number
    assert any(
        r.get("server_queue_time_p99_hi_ms") == "300" and not r.get("server_queue_time_p99_ms") for r in rows
    )


DECODE_SIM = KNEE_SIM  # the decode-slope knee of tests/e2e/test_studies.py


def test_distributed_sdk_run_scrapes_on_the_master_and_explains(sim_factory, tmp_path) -> None:
    """Two worker processes in SDK mode, records merged on the master, which alone scrapes. On a
    loaded machine the clients may lag (the self-check says so), so only what does not depend
    on their pace is asserted: the page found, each stage's server figures, nothing queued, and
    a sentence that names decode (never queueing) when TPOT is what broke, or, when the clients
    were saturated, says so and that the server did not move."""
    sim = sim_factory(*DECODE_SIM)
    report = tmp_path / "r"
    port = str(free_port())
    proc = run_locust(
        "vllm.py",
        "--host",
        sim.url,
        "--processes",
        "2",
        "--master-bind-port",
        port,
        "--master-port",
        port,
        "--llm-client",
        "sdk",
        "--llm-stages",
        "4:9s,24:5s",
        "--llm-slo",
        "tpot=20ms,ttft=2000ms",
        "--llm-scrape-interval",
        "0.5",
        "--llm-prometheus-port",
        "0",
        report=report,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = read_summary(report)
    found = s["server_metrics"]
    assert (found["mode"], found["dialect"], found["url"]) == ("auto", "vllm", sim.url + "/metrics")
    assert [t["url"] for t in s["scrape"]["targets"]] == [sim.url + "/metrics"]  # one scraper: the master's
    stages = s["stages"]
    for st in stages:
        assert st["server_metrics"]["server_num_requests_waiting"]["max"] == 0
        assert st["server_metrics"]["server_num_requests_running"]["samples"] >= 3
    assert (
        stages[1]["server_metrics"]["server_num_requests_running"]["max"]
        > stages[0]["server_metrics"]["server_num_requests_running"]["max"]
    )
    why = (s.get("knee") or {}).get("explanation")
    if why and why.startswith("TPOT"):
        assert "queueing" not in why, why
        saturated = s["self_check"]["saturated"]
        assert ("the load generator was saturated (self-check)" in why) == saturated, why
        # decode is named when the server's time per token rose with its batch; clients too busy to
        # fill the batch (a loaded machine) leave it flat, and the sentence blames no server part
        assert "decode slowing as the batch grows" in why or (
            saturated and "the server's queue, batch and per-token time did not move" in why
        ), why
        assert f"why the knee: {why}" in proc.stdout
