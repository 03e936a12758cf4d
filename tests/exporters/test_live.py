"""exporters/live.py: the exporter and scraper of one run, built from the run's configuration (the
Prometheus port, host and linger, the scrape interval, the GPU sidecars, the server's /metrics:
auto, off or a URL)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from exporters.live import Live
from llm_users.distributed import Collector
from llm_users.errors import ConfigError
from llm_users.options import RunConfig


def fake_run(**opts: object) -> tuple[SimpleNamespace, SimpleNamespace]:
    base = dict(llm_prometheus_port=None, llm_prometheus_host=None, llm_prometheus_linger=None,
                llm_scrape_interval=None, llm_gpu_sidecar=None, llm_server_metrics=None)
    base.update(opts)
    config = RunConfig.from_options(SimpleNamespace(**base))
    env = SimpleNamespace(runner=SimpleNamespace(user_count=3))
    run = SimpleNamespace(collector=Collector(), config=config, labels={}, summary_hooks=[])
    return env, run


def test_options_defaults_and_checks() -> None:
    live = Live(*fake_run())  # the server's /metrics: auto by default, looked for at the test start
    assert (live.port, live.host, live.linger, live.auto) == (9646, "0.0.0.0", 0.0, True)
    assert live.scraper is not None and live.scraper.targets == [] and live.found == {"mode": "auto"}
    live = Live(*fake_run(llm_server_metrics="off"))
    assert (live.auto, live.scraper, live.found) == (False, None, {"mode": "off"})
    live = Live(*fake_run(llm_server_metrics="http://srv:8000/metrics"))
    assert not live.auto and [t.url for t in live.scraper.targets] == ["http://srv:8000/metrics"]
    with pytest.raises(ConfigError, match="--llm-server-metrics .a URL, off, or auto."):
        Live(*fake_run(llm_server_metrics="srv"))
    live = Live(*fake_run(llm_prometheus_port="0", llm_gpu_sidecar="a:9835, b:9835", llm_scrape_interval="0.5"))
    assert live.port == 0 and live.scraper is not None and live.scraper.interval == 0.5
    assert [t.url for t in live.scraper.targets] == ["http://a:9835/metrics", "http://b:9835/metrics"]
    for bad in (dict(llm_scrape_interval="0"), dict(llm_prometheus_linger="-1"), dict(llm_prometheus_port="x")):
        with pytest.raises(ConfigError):
            Live(*fake_run(**bad))
