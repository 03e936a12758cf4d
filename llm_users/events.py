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


def install(events: Any) -> EventHook:
    """Add ``llm_response`` to ``events`` unless it is there; return the hook."""
    hook = getattr(events, "llm_response", None)
    if hook is None:
        hook = EventHook()
        events.llm_response = hook
    return hook
