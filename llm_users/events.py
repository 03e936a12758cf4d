"""The custom Locust event locust-llm adds, documented like Locust's own ``Events``.

:func:`install` adds the hook to an ``Events`` instance (``environment.events``); listeners are
added the usual way::

    @events.llm_response.add_listener
    def on_llm(record, user, **kwargs): ...
"""

from __future__ import annotations

from typing import Any

from locust.event import EventHook


class LLMEvents:
    """Documentation holder for the events locust-llm fires (not instantiated)."""

    llm_response: EventHook
    """
    Fired once per LLM request when it ends, success or failure, after the matching standard
    ``request`` event (one per LLM request: response_time is E2E in ms, name is the endpoint).

    Event arguments:

    :param record: the :class:`llm_users.metrics.RequestRecord` with TTFB, TTFT, every ITL gap,
        E2E, TPOT, token counts (and whether they are the server's or estimated), status and
        error category.
    :param user: the User instance that sent it (None when re-fired on the master).
    """

    llm_run_ready: EventHook
    """
    Fired once at Locust's ``init``, in the process that holds the merged view (the master or
    the local runner), when the run exists and before it adds its own listeners: extensions
    (the Prometheus exporter in ``exporters/``) attach to the run here, from outside.

    Event arguments:

    :param environment: Locust's Environment.
    :param run: the :class:`llm_users.run.MergingRun` (its ``collector``, ``config`` and
        ``summary_hooks``).
    """


def install(events: Any) -> EventHook:
    """Add ``llm_response`` and ``llm_run_ready`` to ``events`` unless there; return the first."""
    install_run_ready(events)
    return _hook(events, "llm_response")


def install_run_ready(events: Any) -> EventHook:
    """Add ``llm_run_ready`` to ``events`` unless it is there; return the hook."""
    return _hook(events, "llm_run_ready")


def _hook(events: Any, name: str) -> EventHook:
    hook = getattr(events, name, None)
    if hook is None:
        hook = EventHook()
        setattr(events, name, hook)
    return hook


def first_time(events: Any, seen: set[int]) -> Any | None:
    """The ``events`` to register on (Locust's default ``events`` when None), or None when they
    are already in ``seen``: the shared prelude of every ``register(events)`` that must add its
    listeners once per ``Events`` instance."""
    if events is None:
        from locust import events as default_events

        events = default_events
    if id(events) in seen:
        return None
    seen.add(id(events))
    return events
