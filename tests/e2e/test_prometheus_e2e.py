"""Issue 5 end to end: a real Prometheus server scrapes the master exporter of a distributed run
(master + 2 workers, real processes, on the simulator); its HTTP API must give the run's numbers.

The master also pulls a TGI-shaped /metrics page (the simulator's TGI lines, served by a small
proxy here) into its timeseries.csv and summary.json.

``llm_requests_total`` counts measured requests, as summary.json does; warm-up requests are in
``llm_excluded_requests_total{reason="warmup"}``. Together they equal the lines of
requests.jsonl. ``--llm-prometheus-linger`` keeps the exporter up after the test stops, so
Prometheus scrapes the final numbers; the test checks that its last sample is from after the
report was written.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    free_port,
    get_json,
    master_args,
    read_records,
    read_summary,
    start_locust,
    worker_args,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("promtool") is None,
                       reason="prometheus/promtool not installed (Debian package prometheus)"),
]
LINGER_S = 3


def only_tgi(text: str) -> str:
    keep = []
    for line in text.splitlines():
        name = line.split(" ")[2] if line.startswith("#") and len(line.split(" ")) > 2 else line
        if name.startswith("tgi_"):
            keep.append(line)
    return "\n".join(keep) + "\n"


def tgi_proxy(sim_url: str) -> ThreadingHTTPServer:
    """Serves the simulator's TGI-shaped metrics only, like a real TGI server's /metrics."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            with urllib.request.urlopen(sim_url + "/metrics", timeout=5) as r:
                body = only_tgi(r.read().decode()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def prometheus(tmp_path: Path):
    """Start a real Prometheus (1 s scrapes) on a target; returns its base URL."""
    procs: list[subprocess.Popen] = []

    def start(target: str) -> str:
        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: locust-llm
    static_configs:
      - targets: ["{target}"]
""")
        log = (tmp_path / "prometheus.log").open("w")
        procs.append(subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return url
            except OSError:
                time.sleep(0.2)
        raise AssertionError("prometheus not ready: " + (tmp_path / "prometheus.log").read_text()[-2000:])

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def wait_scraped(prom: str, master: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    """Until Prometheus has scraped the exporter once (``up`` is 1)."""
    q = urllib.parse.urlencode({"query": 'up{job="locust-llm"}'})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = get_json(f"{prom}/api/v1/query?{q}")["data"]["result"]
        if result and result[0]["value"][1] == "1":
            return
        assert master.poll() is None, log.read_text()[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"Prometheus did not scrape the exporter within {timeout:g} s")


def last_samples(prom: str, selector: str) -> list[tuple[dict[str, str], float, float]]:
    """(labels, timestamp, value) of the last real sample of each series (range selectors skip
    the staleness markers Prometheus writes once the master has gone)."""
    q = urllib.parse.urlencode({"query": f"{selector}[10m]"})
    data = get_json(f"{prom}/api/v1/query?{q}")
    assert data["status"] == "success", data
    return [(s["metric"], float(s["values"][-1][0]), float(s["values"][-1][1])) for s in data["data"]["result"]]



def test_prometheus_scrapes_the_master_exporter_of_a_distributed_run(sim_factory, prometheus, tmp_path) -> None:
    sim = sim_factory("--ttft-ms", "40", "--itl-ms", "4", "--ttft-dist", "lognormal", "--ttft-sd-ms", "10",
                      "--output-tokens", "20", "--seed", "11")
    proxy = tgi_proxy(sim.url)
    exporter = f"127.0.0.1:{free_port()}"
    prom = prometheus(exporter)
    report, port = tmp_path / "r", free_port()
    master = start_locust(
        [*master_args(port), "--headless", "--only-summary", "-u", "6", "-r", "6", "-t", "4s", "--stop-timeout", "10",
         "--host", sim.url, "--llm-report", str(report),
         "--llm-prometheus-host", "127.0.0.1", "--llm-prometheus-port", exporter.split(":")[1],
         "--llm-prometheus-linger", str(LINGER_S),
         "--llm-server-metrics", f"http://127.0.0.1:{proxy.server_port}/metrics", "--llm-scrape-interval", "0.5"],
        tmp_path / "master.log")
    workers: list[subprocess.Popen] = []
    try:
        # Prometheus hands a new target to its scrapers up to ~5 s after it starts (its discovery
        # updates are throttled): the run (4 s, from when both workers connect) waits for a first
        # scrape, or no scrape might see its users at all.
        wait_scraped(prom, master, tmp_path / "master.log")
        workers = [start_locust(worker_args(port),
                                tmp_path / f"w{i}.log") for i in range(2)]
        # While the master lingers after writing its report: promtool on a live scrape of it.
        # (Rendering report.html, when asked, blocks the master a while; the linger starts once the files are
        # written. The "report written" line is held until Locust's own table has printed, at quit,
        # after the linger: outputs/console.hold_until_quit.)
        log, deadline = tmp_path / "master.log", time.monotonic() + 90
        while "exporter stays up" not in log.read_text() and master.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (report / "summary.json").exists(), log.read_text()[-3000:]
        written = (report / "summary.json").stat().st_mtime
        with urllib.request.urlopen(f"http://{exporter}/metrics", timeout=30) as r:
            page = r.read().decode()
        check = subprocess.run(["promtool", "check", "metrics"], input=page, capture_output=True, text=True,
                               timeout=30)
        assert check.returncode == 0, check.stdout + check.stderr
        assert master.wait(60) == 0, (tmp_path / "master.log").read_text()[-3000:]
        for w in workers:
            w.wait(30)
    finally:
        for p in (master, *workers):
            if p.poll() is None:
                p.kill()
        proxy.shutdown()

    records = read_records(report)
    summary = read_summary(report)
    warmup = sum(1 for r in records if r["warmup"])
    assert warmup == 6 and len({r["worker"] for r in records}) == 2

    requests = last_samples(prom, "llm_requests_total")
    assert requests, (tmp_path / "prometheus.log").read_text()[-2000:]
    assert min(ts for _, ts, _ in requests) >= written, "Prometheus has no scrape after the final numbers"
    measured = sum(v for _, _, v in requests)
    excluded = sum(v for labels, _, v in last_samples(prom, 'llm_excluded_requests_total{reason="warmup"}'))
    assert measured == summary["overall"]["requests"] == len(records) - warmup
    assert excluded == warmup
    assert measured + excluded == len(records)
    assert {labels["status"] for labels, _, _ in requests} == {"ok"}
    assert {(labels["backend"], labels["model"], labels["name"]) for labels, _, _ in requests} == {
        ("vllm", "sim-model", "/v1/chat/completions")}

    (labels, _, p50), = last_samples(prom, 'llm_time_to_first_token_seconds_quantile{quantile="0.5"}')
    assert p50 == pytest.approx(summary["overall"]["ttft"]["p50"] / 1e3, rel=1e-3)  # HDR: 3 significant digits
    (_, _, tokens), = last_samples(prom, "llm_output_tokens_total")
    assert tokens == summary["overall"]["output_tokens"]
    (_, _, count), = last_samples(prom, "llm_time_to_first_token_seconds_count")
    assert count == summary["overall"]["ttft"]["count"]
    users = get_json(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": "max_over_time(llm_users[10m])"}))
    assert float(users["data"]["result"][0]["value"][1]) == 6
    assert {labels["node"] for labels, _, _ in last_samples(prom, "llm_client_loop_lag_seconds_count")} == set(
        summary["workers"]["reported"])

    # The TGI-shaped server metrics were pulled on the master into the run's outputs.
    assert summary["server"]["dialect"] == "tgi" and summary["scrape"]["errors"] == 0
    assert summary["server"]["series"]["server_num_requests_running"]["max"] >= 1
    with (report / "timeseries.csv").open() as f:
        rows = list(csv.DictReader(f))
    for col in ("server_num_requests_running", "server_num_requests_waiting", "server_e2e_mean_ms",
                "server_tpot_mean_ms"):
        assert sum(1 for r in rows if r.get(col)) >= 2, col
