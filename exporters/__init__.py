"""Prometheus exporters: the master-side client metrics, the NVML GPU sidecar, and scraping.

The plugin core (``llm_users``) never imports this package: a locustfile that wants the
master's ``/metrics`` calls :func:`register` beside ``llm_users.plugin.register`` (the shipped
locustfiles do), and the exporter attaches itself to each run through the ``llm_run_ready``
event.
"""

from __future__ import annotations

from typing import Any


def register(events: Any = None) -> None:
    """Serve the run's merged statistics on ``--llm-prometheus-port`` (and scrape the sidecars
    and the server's /metrics), for every run these ``events`` start. Call once per locustfile."""
    from .live import register as register_live

    register_live(events)
