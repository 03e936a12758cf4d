"""Tests for the master exporter (exporters/prometheus.py); its wiring options: tests/exporters/test_live.py.

Bucket counts and quantiles are checked against the HDR histograms they come from; the
exposition against promtool; the endpoint over real HTTP. The real master + workers +
Prometheus server run is tests/e2e/test_prometheus_e2e.py.
"""

from __future__ import annotations

import logging
import random
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import gevent
import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporters.prometheus import (
    ITL_BUCKETS,
    LATENCY_BUCKETS,
    Cumulative,
    Exporter,
    LLMCollector,
    buckets,
    build_registry,
)
from llm_users.distributed import Collector
from llm_users.health.selfcheck import SelfMonitor
from llm_users.metrics import Distribution, RequestRecord

REPO = Path(__file__).resolve().parents[2]
CHAT, COMP = "/v1/chat/completions", "/v1/completions"
ALLOWED_LABELS = {"backend", "model", "name", "status", "reason", "quantile", "le", "node", "target"}


def record(i: int, rnd: random.Random, name: str = CHAT, **kw: object) -> RequestRecord:
    ttft = int(rnd.lognormvariate(17.5, 1.0))
    itl = [int(rnd.lognormvariate(15.0, 0.6)) for _ in range(12)]
    fields: dict = dict(request_id=f"r{i}", name=name, backend="vllm", model="m1", start_time=time.time(),
                        ttft_ns=ttft, ttfb_ns=ttft // 2, e2e_ns=ttft + sum(itl), itl_ns=itl, output_tokens=13,
                        input_tokens=7, ttst_ns=ttft + itl[0], reasoning_chunks=i % 3, reasoning_tokens=i % 3,
                        ttfo_ns=ttft + sum(itl[: i % 3]))  # i % 3 reasoning chunks first
    fields.update(kw)
    return RequestRecord(**fields)


@pytest.fixture
def merged() -> Collector:
    """Two names; warm-up, cool-down and two error categories on the chat one."""
    c = Collector()
    rnd = random.Random(3)
    for i in range(600):
        kw: dict = {}
        if i < 4:
            kw["warmup"] = True
        elif i % 97 == 0:
            kw = {"status": "error", "error_category": "http_500"}
        elif i % 89 == 0:
            kw = {"status": "error", "error_category": "read_timeout"}
        elif i == 599:
            kw["cooldown"] = True
        c.add_record(record(i, rnd, **kw))
    for i in range(50):
        c.add_record(record(1000 + i, rnd, name=COMP, backend="tgi", model="m2"))
    mon = SelfMonitor("local")
    for ns in (20_000, 40_000, 900_000):
        mon.lag.add(ns)
    c.add_health(mon.to_wire())
    return c


def scrape_text(c: Collector, errors: dict[str, int] | None = None) -> str:
    labels = {CHAT: ("vllm", "m1"), COMP: ("tgi", "m2")}
    collector = LLMCollector(c, labels, lambda: 7, (lambda: errors) if errors is not None else None)
    return generate_latest(build_registry(collector)).decode()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def L(**kw: str) -> frozenset:  # noqa: N802  (a label set, read like the exposition)
    return frozenset(kw.items())


def test_bucket_counts_are_exact_counts_of_recorded_values() -> None:
    rnd = random.Random(7)
    raw = [int(rnd.lognormvariate(16.5, 1.6)) for _ in range(5000)] + [10_000_000, 9_999_500, 500_000]
    d = Distribution()
    for ns in raw:
        d.add(ns)
    h = d.hist
    recorded = [h.get_highest_equivalent_value(min((ns + 500) // 1000, 3_600_000_000)) for ns in raw]
    for bounds in (LATENCY_BUCKETS, ITL_BUCKETS):
        got = buckets(Cumulative(d), bounds)
        assert got[-1] == ("+Inf", float(len(raw)))
        for (le, count), bound in zip(got, bounds, strict=False):
            assert float(le) == bound
            assert count == sum(1 for v in recorded if v <= bound * 1e6), le
            # and within HDR resolution of the true count of values <= bound
            exact = sum(1 for ns in raw if ns <= bound * 1e9)
            slack = sum(1 for ns in raw if abs(ns - bound * 1e9) <= bound * 1e9 * 1e-3 + 1000)
            assert abs(count - exact) <= slack


def test_merged_wire_distributions_give_the_same_buckets_and_quantiles() -> None:
    rnd = random.Random(5)
    values = [int(rnd.lognormvariate(17.0, 1.2)) for _ in range(3000)]
    whole, merged = Distribution(), Distribution()
    for part in (values[:1000], values[1000:]):  # as two workers would ship them
        d = Distribution()
        d.add_many(part)
        merged.merge_wire(d.to_wire())
    whole.add_many(values)
    a, b = Cumulative(whole), Cumulative(merged)
    assert buckets(a, LATENCY_BUCKETS) == buckets(b, LATENCY_BUCKETS)
    for q in (0.5, 0.9, 0.99, 1.0):
        assert a.value_at(q) == b.value_at(q) == whole.hist.get_value_at_percentile(q * 100)


def test_quantiles_equal_the_hdr_percentiles_of_the_report(merged: Collector) -> None:
    got = samples(scrape_text(merged))
    summary = merged.stats.summary()["by_name"][CHAT]
    lab = dict(backend="vllm", model="m1", name=CHAT)
    for family, key in (("llm_time_to_first_token_seconds", "ttft"), ("llm_inter_token_latency_seconds", "itl"),
                        ("llm_time_to_first_output_token_seconds", "ttfo"), ("llm_time_to_second_token_seconds", "ttst"),
                        ("llm_time_per_output_token_seconds", "tpot"), ("llm_request_duration_seconds", "e2e")):
        for q, p in (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99")):
            assert got[(family + "_quantile", L(**lab, quantile=q))] == pytest.approx(summary[key][p] / 1e3, rel=1e-12)
        assert got[(family + "_count", L(**lab))] == summary[key]["count"]
        assert got[(family + "_sum", L(**lab))] == pytest.approx(summary[key]["mean"] * summary[key]["count"] / 1e3)
        assert got[(family + "_bucket", L(**lab, le="+Inf"))] == summary[key]["count"]
    # a quantile whose HDR bucket reaches past the exact maximum is kept at the maximum, as in the report
    d = Distribution()
    d.add_many([10_000_001, 10_000_002])  # HDR bucket [10000 µs, 10007 µs]
    assert Cumulative(d).seconds_at(0.99) == 0.010000002 == pytest.approx(d.percentile_ms(99) / 1e3, rel=1e-12)


def test_counters_labels_users_lag_and_scrape_errors(merged: Collector) -> None:
    text = scrape_text(merged, {"http://gpu:9835/metrics": 3})
    got = samples(text)
    chat = dict(backend="vllm", model="m1", name=CHAT)
    s = merged.stats.by_name[CHAT]
    assert got[("llm_requests_total", L(**chat, status="ok"))] == s.requests - s.failures
    assert got[("llm_requests_total", L(**chat, status="http_500"))] == s.failures_by_category["http_500"] > 0
    assert got[("llm_requests_total", L(**chat, status="read_timeout"))] == s.failures_by_category["read_timeout"] > 0
    assert got[("llm_excluded_requests_total", L(**chat, reason="warmup"))] == 4
    assert got[("llm_excluded_requests_total", L(**chat, reason="cooldown"))] == 1
    assert got[("llm_output_tokens_total", L(**chat))] == s.output_tokens
    assert got[("llm_input_tokens_total", L(**chat))] == s.input_tokens
    assert got[("llm_reasoning_tokens_total", L(**chat))] == s.reasoning.reasoning_tokens
    assert got[("llm_inputs_total", L(**chat))] == s.inputs == s.requests - s.failures  # a chat request is one input
    assert got[("llm_requests_total", L(backend="tgi", model="m2", name=COMP, status="ok"))] == 50
    assert got[("llm_users", L())] == 7
    assert got[("llm_client_loop_lag_seconds_count", L(node="local"))] == 3
    assert got[("llm_client_loop_lag_seconds", L(node="local", quantile="0.99"))] == pytest.approx(0.0009, rel=1e-3)
    assert got[("llm_scrape_errors_total", L(target="http://gpu:9835/metrics"))] == 3
    used = {k for key in got for k, _ in key[1]}
    assert used <= ALLOWED_LABELS
    assert "llm_scrape_errors" not in scrape_text(merged)  # only when a scraper runs
    # every family is a base-unit llm_* name
    assert {f.name for f in text_string_to_metric_families(text)} <= {
        "llm_requests", "llm_excluded_requests", "llm_output_tokens", "llm_input_tokens", "llm_reasoning_tokens",
        "llm_inputs", "llm_users", "llm_client_loop_lag_seconds", "llm_scrape_errors",
        *(f"llm_{n}_seconds{s}" for n in ("time_to_first_token", "time_to_first_output_token",
                                          "time_to_second_token", "inter_token_latency", "time_per_output_token",
                                          "request_duration") for s in ("", "_quantile"))}


def test_empty_run_scrapes_cleanly() -> None:
    text = scrape_text(Collector())
    assert "# TYPE llm_time_to_first_token_seconds histogram" in text
    assert "llm_users 7.0" in text


def test_nothing_lands_on_the_global_registry(merged: Collector) -> None:
    scrape_text(merged)
    names = {m.name for m in REGISTRY.collect()}
    assert not any(n.startswith("llm_") for n in names)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
def test_promtool_check_metrics_accepts_the_exposition(merged: Collector) -> None:
    text = scrape_text(merged, {"http://gpu:9835/metrics": 1})
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
def test_promtool_check_config_accepts_the_shipped_example() -> None:
    p = subprocess.run(["promtool", "check", "config", str(REPO / "docker/prometheus/prometheus.yml")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr


def http_get(url: str) -> tuple[int, str]:
    """Fetch from a real thread so this (unpatched) process's gevent hub can serve meanwhile."""
    def get() -> tuple[int, str]:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    return gevent.get_hub().threadpool.apply(get)


def test_exporter_serves_over_http_and_a_busy_port_is_one_log_line(merged: Collector, caplog) -> None:
    registry = build_registry(LLMCollector(merged, {}, lambda: 2))
    exporter = Exporter(registry, "127.0.0.1", 0)
    assert exporter.start()
    try:
        status, body = http_get(f"http://127.0.0.1:{exporter.port}/metrics")
        assert status == 200 and 'llm_requests_total{backend="",model="",name="/v1/chat/completions"' in body
        with caplog.at_level(logging.WARNING, logger="exporters.prometheus"):
            second = Exporter(registry, "127.0.0.1", exporter.port)
            assert not second.start()
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{exporter.port}" in lines[0]
    finally:
        exporter.stop()
    with socket.socket() as s:  # the port is released (SO_REUSEADDR, as servers bind, past TIME_WAIT)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", exporter.port))
        s.listen()
