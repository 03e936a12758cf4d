"""Wiring of the exporter and the scraper into a run (the master or the local runner).

:func:`attach` runs once per run, on the ``llm_run_ready`` event that :mod:`llm_users.plugin`
fires at Locust's ``init`` for the master or the local runner (:func:`register` adds the
listener; the plugin core never imports this package). It starts the Prometheus endpoint at once (so it serves in headless runs and between web-UI tests), starts
scraping at ``test_start``, takes a last scrape at ``test_stop`` (before the run writes its
report: these listeners are added first) and, at ``quitting``, keeps the endpoint up for
``--llm-prometheus-linger`` seconds so Prometheus gets the final numbers, then stops it.
"""

from __future__ import annotations

import logging
from typing import Any

import gevent

from llm_users import events as llm_events
from llm_users.health.idle import serve_ready_io

from .discover import discover
from .prometheus import Exporter, LLMCollector, build_registry
from .scrape import Scraper

log = logging.getLogger("exporters.live")


class Live:
    """The exporter and scraper of one run; built from the run's configuration (``run.config``,
    parsed once in :mod:`llm_users.options`)."""

    def __init__(self, environment: Any, run: Any) -> None:
        config = run.config
        self.environment = environment
        self.run = run
        self.port = config.prometheus_port
        self.host = config.prometheus_host
        self.linger = config.prometheus_linger_s
        sidecars, server = list(config.gpu_sidecars), config.server_metrics
        self.auto = config.server_metrics_auto and server is None  # find it on --host at each test start
        self.scraper = (Scraper(sidecars, server, config.scrape_interval_s, run.collector.timeline.add_extra,
                                pause=serve_ready_io)  # a page parsed in slices: the streams' reads go first
                        if sidecars or server or self.auto else None)
        self.found: dict[str, Any] = ({"mode": "url", "url": server} if server else
                                      {"mode": "auto"} if self.auto else {"mode": "off"})
        self._probed_host: str | None = None
        self.exporter: Exporter | None = None

    def users(self) -> int:
        runner = self.environment.runner
        return int(runner.user_count) if runner is not None else 0

    def start_exporter(self) -> None:
        if not self.port:
            return
        collector = LLMCollector(self.run.collector, self.run.collector.labels, self.users,
                                 self.scraper.errors if self.scraper is not None else None)
        exporter = Exporter(build_registry(collector), self.host, self.port)
        if exporter.start():
            self.exporter = exporter

    # events ---------------------------------------------------------------------------------
    def on_test_start(self, **_: Any) -> None:
        if self.scraper is not None:
            self.scraper.start()
        if self.auto:  # beside the load, never holding up its start (a silent host takes the timeout)
            gevent.spawn(self.discover)

    def discover(self) -> None:
        """Look for the server's /metrics on --host (once per host: the web UI may change it)."""
        host = self.environment.host
        if self.scraper is None or host == self._probed_host:
            return
        self._probed_host = host
        found = discover(host, self.scraper.fetch, pause=self.scraper.pause)
        self.found = {"mode": "auto", "url": found.url, "dialect": found.dialect, "note": found.note}
        self.scraper.set_server(found.url, samples=found.samples)  # what it read is the first sample
        (log.warning if found.dialect and not found.url else log.info)("locust-llm: %s", found.note)

    def on_test_stop(self, **_: Any) -> None:
        if self.scraper is not None:
            self.scraper.stop(final=True)

    def add_sections(self, summary: dict[str, Any]) -> None:
        if self.scraper is not None:
            total = self.run.collector.stats.total
            summary.update(self.scraper.sections(total.first_start, total.last_end, total.output_tokens))
        server = summary.get("server") or {}
        summary["server_metrics"] = {**self.found, "url": server.get("url", self.found.get("url")),
                                     "dialect": server.get("dialect", self.found.get("dialect")),
                                     "series": server.get("series", {})}

    def on_quitting(self, **_: Any) -> None:
        if self.scraper is not None:
            self.scraper.stop(final=False)
        if self.exporter is not None:
            if self.linger > 0:
                log.info("Prometheus exporter stays up %g s more (--llm-prometheus-linger)", self.linger)
                gevent.sleep(self.linger)
            self.exporter.stop()
            self.exporter = None


def attach(environment: Any, run: Any) -> Live:
    """Start the exporter now and hook the scraper and the summary sections into the run."""
    live = Live(environment, run)
    live.start_exporter()
    ev = environment.events
    ev.test_start.add_listener(live.on_test_start)
    ev.test_stop.add_listener(live.on_test_stop)
    ev.quitting.add_listener(live.on_quitting)
    run.summary_hooks.append(live.add_sections)
    return live


_registered: set[int] = set()


def register(events: Any = None) -> None:
    """Attach the exporter to every run that fires ``llm_run_ready`` on these events (once)."""
    events = llm_events.first_time(events, _registered)
    if events is None:
        return
    llm_events.install_run_ready(events).add_listener(attach_on_ready)


def attach_on_ready(environment: Any, run: Any, **_: Any) -> None:
    attach(environment, run)
