"""The Grafana dashboard (docker/grafana/dashboards/locust-llm.json) loads, and every metric it
queries is one the exporters really emit: checked against live scrapes of the master exporter
(served in-process over HTTP), of the GPU sidecar (in-process, fake NVML) and of the simulator,
which serves the vLLM- and TGI-shaped server metrics the dashboard reads.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import gevent
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from exporters.nvml import GPUCollector, serve
from exporters.prometheus import Exporter, LLMCollector, build_registry
from llm_users.distributed import Collector
from llm_users.health.selfcheck import SelfMonitor
from llm_users.metrics import RequestRecord
from tests.exporters.fake_nvml import fixed_fake

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docker/grafana/dashboards/locust-llm.json"
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or",
            "unless", "inf", "nan"}


def exprs(dashboard: dict) -> list[str]:
    out = []
    for panel in dashboard["panels"]:
        for sub in [panel, *panel.get("panels", [])]:
            out += [t["expr"] for t in sub.get("targets", []) if t.get("expr")]
    return out


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords or labels."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    e = re.sub(r"\$\{?\w+\}?", "1m", e)  # Grafana variables
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # ranges
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)  # label lists
    names = set()
    for m in re.finditer(NAME, e):
        rest = e[m.end():].lstrip()
        if rest.startswith("(") or m.group() in KEYWORDS or (m.start() and e[m.start() - 1].isdigit()):
            continue
        names.add(m.group())
    return names


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def emitted(text: str) -> set[str]:
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def master_exporter_page() -> str:
    """A scrape over HTTP of the master exporter (served by gevent, fetched from a real thread)."""
    c = Collector()
    rnd = random.Random(1)
    for i in range(30):
        ttft = int(rnd.uniform(2e7, 6e7))
        c.add_record(RequestRecord(request_id=str(i), name="/v1/chat/completions", backend="vllm", model="m",
                                   ttft_ns=ttft, e2e_ns=ttft + 40_000_000, itl_ns=[4_000_000] * 10,
                                   output_tokens=11, input_tokens=5, warmup=i == 0,
                                   status="ok" if i % 10 else "error", error_category=None if i % 10 else "http_503"))
    mon = SelfMonitor("local")
    mon.lag.add(30_000)
    c.add_health(mon.to_wire())
    exporter = Exporter(build_registry(LLMCollector(c, {}, lambda: 3, lambda: {"http://gpu:9835/metrics": 1})),
                        "127.0.0.1", 0)
    assert exporter.start()
    try:
        return gevent.get_hub().threadpool.apply(fetch, (f"http://127.0.0.1:{exporter.port}/metrics",))
    finally:
        exporter.stop()


def sidecar_page() -> str:
    nvml = fixed_fake()
    nvml.nvmlInit()
    registry = CollectorRegistry()
    registry.register(GPUCollector(nvml))
    server, _ = serve(registry, "127.0.0.1", 0)
    try:
        return fetch(f"http://127.0.0.1:{server.server_port}/metrics")
    finally:
        server.shutdown()
        server.server_close()


def test_metric_name_extraction() -> None:
    assert metric_names('histogram_quantile(0.99, sum by (le, name) (rate(llm_x_bucket{name=~"$name"}'
                        '[$__rate_interval])))') == {"llm_x_bucket"}
    assert metric_names("sum(rate(a_total[1m])) / sum(rate(vllm:b_total{x=\"y\"}[5m]))") == {"a_total", "vllm:b_total"}


def test_dashboard_queries_only_metrics_the_exporters_emit(sim_factory) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["panels"]
    sim = sim_factory()
    available = emitted(master_exporter_page()) | emitted(sidecar_page()) | emitted(fetch(sim.url + "/metrics"))
    queried: set[str] = set()
    for e in exprs(dashboard):
        queried |= metric_names(e)
    assert queried, "no queries found"
    assert queried <= available, f"not emitted by any exporter: {sorted(queried - available)}"
    # the panels the issue asks for are there
    for metric in ("llm_time_to_first_token_seconds_quantile", "llm_inter_token_latency_seconds_bucket",
                   "llm_output_tokens_total", "llm_users", "llm_requests_total", "gpu_utilization_ratio",
                   "gpu_memory_used_bytes", "gpu_power_watts", "vllm:num_requests_waiting", "tgi_queue_size"):
        assert metric in queried, metric
    titles = " ".join(p["title"] for p in dashboard["panels"])
    for word in ("TTFT", "ITL", "tokens/s", "Users", "Failures", "GPU utilization", "GPU memory", "GPU power",
                 "queue"):
        assert word in titles, word


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    rules = ["groups:", "  - name: dashboard", "    rules:"]
    for i, e in enumerate(exprs(json.loads(DASHBOARD.read_text()))):
        e = e.replace("$__rate_interval", "1m").replace('=~"$backend"', '=~".*"').replace(
            '=~"$model"', '=~".*"').replace('=~"$name"', '=~".*"')
        rules += [f"      - record: dashboard:query{i}", f"        expr: {json.dumps(e)}"]
    path = tmp_path / "rules.yml"
    path.write_text("\n".join(rules) + "\n")
    p = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr
