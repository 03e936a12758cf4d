"""Pull the GPU sidecars' and the LLM server's own /metrics during a run (master or local runner).

A gevent greenlet scrapes every target every ``interval`` seconds (over kept connections:
:class:`PageClient`; targets are fetched concurrently), parses the text
with prometheus_client's parser and turns it into columns (:mod:`exporters.series`). Each
scrape's values fill the timeline seconds since the previous scrape, so timeseries.csv and the
report's charts show continuous lines. A target that does not answer is logged once, counted,
and tried again at the next tick; it never stops the run.

:meth:`Scraper.sections` gives summary.json its ``gpu``, ``server`` and ``scrape`` sections,
including the energy per output token. Documented in docs/prometheus.md.
"""

from __future__ import annotations

import io
import logging
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from typing import Any
from urllib.parse import urlsplit

import gevent
from geventhttpclient import HTTPClient
from geventhttpclient.url import URL

from .series import (
    GPU_SAMPLES,
    SERVER_SAMPLES,
    Samples,
    SeriesStats,
    ServerSeries,
    energy_between,
    gpu_series,
    parse,
)

log = logging.getLogger("exporters.scrape")
Fetch = Callable[[str, float], str]
ACCEPT = {"Accept": "text/plain;version=0.0.4"}


def metrics_url(url: str) -> str:
    """'gpu-node:9835' -> 'http://gpu-node:9835/metrics'; a URL with a path is kept as given."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/") + "/metrics" if urlsplit(url).path in ("", "/") else url


class PageClient:
    """``client(url, timeout)``: GET a page as classic Prometheus text over a kept connection
    (geventhttpclient, the client of Locust's FastHttpUser: one ``HTTPClient`` per scheme, host,
    port and timeout). urllib took 1.3 ms of CPU a page and held the loop about 1 ms in one
    piece reading the response (its header parser), on the load generator's own loop every
    interval; this takes 0.5 ms, in pieces under 0.5 ms (a slow 2-core VM, issue 34 item 1).
    An HTTP error status raises ``urllib.error.HTTPError`` (code, body) as urllib did; a refused
    or silent server raises as a socket does; redirects are not followed (a /metrics page is
    served where it is asked for)."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str, str, int, float], HTTPClient] = {}

    def __call__(self, url: str, timeout: float) -> str:
        u = URL(url)
        key = (u.scheme, u.host, u.port, timeout)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = HTTPClient.from_url(
                u, concurrency=1, connection_timeout=timeout, network_timeout=timeout)
        response = client.get(u.request_uri, headers=ACCEPT)
        try:
            body = response.read()
        finally:
            response.release()
        if response.status_code >= 400:
            raise urllib.error.HTTPError(url, response.status_code, f"HTTP {response.status_code}", Message(),
                                         io.BytesIO(body))
        return body.decode("utf-8", errors="replace")

    def close(self) -> None:
        """Close the kept connections (a later call opens new ones)."""
        clients, self._clients = self._clients, {}
        for client in clients.values():
            client.close()


@dataclass
class Target:
    url: str
    kind: str  # "gpu" | "server"
    node: str | None = None  # GPU key prefix when several sidecars are pulled
    scrapes: int = 0
    errors: int = 0
    last_error: str | None = None
    logged: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "kind": self.kind, "scrapes": self.scrapes, "errors": self.errors,
                "last_error": self.last_error}


class Scraper:
    """Scrapes ``gpu_urls`` and ``server_url``; ``add_extra(t, values)`` receives the columns."""

    def __init__(self, gpu_urls: list[str], server_url: str | None, interval: float,
                 add_extra: Callable[[float, dict[str, float]], None], fetch: Fetch | None = None,
                 pause: Callable[[], None] | None = None) -> None:
        self.interval = interval
        self.pause = pause  # between slices of a page's parse: the streams' ready reads go first
        self.timeout = max(0.5, min(interval, 5.0))
        self.add_extra = add_extra
        self._pages: PageClient | None = None  # ours to close at the stop
        if fetch is None:
            fetch = self._pages = PageClient()
        self.fetch = fetch
        several = len(gpu_urls) > 1
        self.targets = [Target(metrics_url(u), "gpu", f"n{i}" if several else None) for i, u in enumerate(gpu_urls)]
        if server_url:
            self.targets.append(Target(metrics_url(server_url), "server"))
        self._greenlet: Any = None
        self.reset()

    def set_server(self, url: str | None, samples: Samples | None = None, now: float | None = None) -> None:
        """Scrape this server page from now on (a discovered one); None: no server page.
        ``samples``, what discovery just read from it (parsed once, there), are taken as its
        first sample at ``now``:
        the seconds between the test start and the next round (up to an interval) have the
        server's figures too, as the first stage's window needs (issue 33's knee test saw a
        3 s stage with one second of them)."""
        current = next((t for t in self.targets if t.kind == "server"), None)
        if current is not None and url is not None and current.url == metrics_url(url):
            return
        self.targets = [t for t in self.targets if t.kind != "server"]
        self.server = ServerSeries()
        if not url:
            return
        target = Target(metrics_url(url), "server")
        self.targets.append(target)
        if samples is not None:
            t = time.time() if now is None else now
            try:
                values = self._ingest(target, samples, t)
            except Exception:  # noqa: BLE001 - the rounds read it again, and count what fails
                return
            target.scrapes += 1
            self.stats.add(values)
            if values:
                self.add_extra(int(t), values)

    def reset(self) -> None:
        """Forget the previous run's samples (a new test in the same process starts afresh)."""
        self.stats = SeriesStats()
        self.server = ServerSeries()
        self.energy: dict[str, list[tuple[float, float]]] = {}
        self.gpus: dict[str, dict[str, Any]] = {}
        self._last_t: float | None = None
        for t in self.targets:
            t.scrapes = t.errors = 0
            t.last_error = None

    # lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        self.stop(final=False)
        self.reset()
        self._greenlet = gevent.spawn(self._loop)

    def stop(self, final: bool = True) -> None:
        """Stop the loop; ``final`` takes one last scrape so the series reach the end of the test."""
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=2)
            self._greenlet = None
            if final:
                self.scrape_once()
        if self._pages is not None:
            self._pages.close()

    def _loop(self) -> None:
        next_at = time.monotonic()
        while True:
            self.scrape_once()
            next_at += self.interval
            now = time.monotonic()
            if next_at < now:  # the scrape took longer than an interval: skip the missed ticks
                next_at = now + self.interval - (now - next_at) % self.interval
            gevent.sleep(next_at - now)

    # one round ------------------------------------------------------------------------------
    def scrape_once(self, now: float | None = None) -> dict[str, float]:
        t = time.time() if now is None else now
        targets = list(self.targets)  # a page found meanwhile (set_server) joins at the next round
        jobs = [gevent.spawn(self._get, target) for target in targets]
        gevent.joinall(jobs)
        values: dict[str, float] = {}
        for target, job in zip(targets, jobs, strict=True):
            if job.value is not None:
                target.scrapes += 1
                values.update(self._ingest(target, job.value, t))
        self.stats.add(values)
        if values:
            start = int(t) if self._last_t is None else int(self._last_t) + 1
            for sec in range(start, int(t) + 1):
                self.add_extra(sec, values)
        self._last_t = t
        return values

    def _get(self, target: Target) -> Any:
        try:
            samples = parse(self.fetch(target.url, self.timeout),
                            GPU_SAMPLES if target.kind == "gpu" else SERVER_SAMPLES, self.pause)
        except Exception as e:  # refused, timeout, HTTP error, malformed text: noted, retried
            target.errors += 1
            target.last_error = f"{type(e).__name__}: {e}"
            if not target.logged:
                target.logged = True
                what = "GPU sidecar" if target.kind == "gpu" else "LLM server metrics"
                log.warning("%s %s does not answer (%s); retrying every %g s, failed scrapes "
                            "are counted in summary.json (logged once)", what, target.url, target.last_error,
                            self.interval)
            return None
        return samples

    def _ingest(self, target: Target, samples: Any, t: float) -> dict[str, float]:
        if target.kind == "server":
            return self.server.update(samples, t)
        cols, energy, info = gpu_series(samples, target.node)
        for key, joules in energy.items():
            self.energy.setdefault(key, []).append((t, joules))
        for key, i in info.items():
            self.gpus[key] = {"target": target.url, **i}
        return cols

    # outputs --------------------------------------------------------------------------------
    def errors(self) -> dict[str, int]:
        return {t.url: t.errors for t in self.targets}

    def sections(self, measured_start: float | None, measured_end: float | None,
                 output_tokens: int) -> dict[str, Any]:
        """summary.json's ``scrape``, ``gpu`` (with energy per token) and ``server`` sections
        (none when nothing was pulled: auto discovery found no server page)."""
        if not self.targets:
            return {}
        out: dict[str, Any] = {"scrape": {
            "interval_s": self.interval, "errors": sum(t.errors for t in self.targets),
            "targets": [t.to_dict() for t in self.targets]}}
        if any(t.kind == "gpu" for t in self.targets):
            out["gpu"] = {"devices": self.gpus, "series": self.stats.summary("gpu_"),
                          **self._energy(measured_start, measured_end, output_tokens)}
        server = next((t for t in self.targets if t.kind == "server"), None)
        if server is not None:
            out["server"] = {"url": server.url, "dialect": self.server.dialect,
                             "series": self.stats.summary("server_")}
        return out

    def _energy(self, t0: float | None, t1: float | None, tokens: int) -> dict[str, Any]:
        window = (t1 - t0) if t0 is not None and t1 is not None else 0.0
        joules, coverage = None, None
        if window > 0 and self.energy:
            parts = [energy_between(s, t0, t1) for s in self.energy.values()]  # type: ignore[arg-type]
            joules = sum(j for j, _ in parts)
            coverage = min(c for _, c in parts) / window
        return {
            "energy_window_s": window or None,
            "energy_joules": joules,
            "energy_coverage": coverage,
            "energy_gpus": sorted(self.energy),
            "output_tokens": tokens,
            "energy_per_output_token_joules": joules / tokens if joules is not None and tokens else None,
        }
