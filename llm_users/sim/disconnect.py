"""Noticing at once that a client went away, whatever its request is doing.

aiohttp does not cancel a handler when its client disconnects (``handler_cancellation`` is off
by default, and turning it on would cancel the handler inside its own writes, after a whole
answer too), and the streamer only looks at the transport when a chunk is due. So a request
whose client left while it was queued or in prefill kept its slot (or its queue place) until its
first token was due: seconds, under a long TTFT. A client that cancels (``--llm-cancel-after``,
a user closing the tab) must free the slot as a real server does (vLLM aborts the request when
the connection closes).

:func:`watch` puts a thin :class:`_Watch` protocol in front of aiohttp's own on the request's
transport (``transport.set_protocol``, asyncio's and uvloop's public API; once per connection,
every call passed through) and hands ``on_lost`` to the request in hand; the transport's
``connection_lost`` calls it in the same loop iteration. The lifecycle then cancels the queue
place, or ends the stream (``aborted``) and frees its slot (:class:`ClientGone`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class _Watch(asyncio.Protocol):
    """aiohttp's protocol with a hook on ``connection_lost`` for the request in hand."""

    __slots__ = ("inner", "on_lost")

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.on_lost: Callable[[], None] | None = None

    def connection_made(self, transport: Any) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        on_lost, self.on_lost = self.on_lost, None
        try:
            self.inner.connection_lost(exc)
        finally:
            if on_lost is not None:
                on_lost()


def watch(transport: Any, on_lost: Callable[[], None]) -> bool:
    """Call ``on_lost`` when ``transport``'s connection is lost (until :func:`unwatch`). False
    when it is gone already (or cannot be watched)."""
    if transport is None or transport.is_closing():
        return False
    proto = transport.get_protocol()
    if not isinstance(proto, _Watch):
        proto = _Watch(proto)
        transport.set_protocol(proto)
    proto.on_lost = on_lost
    return True


def unwatch(transport: Any) -> None:
    """The request ended: its connection's loss is no longer its business."""
    if transport is not None:
        proto = transport.get_protocol()
        if isinstance(proto, _Watch):
            proto.on_lost = None


class ClientGone:
    """A request's ``on_lost``: cancels its queue place (the handler, awaiting it, ends the
    request ``aborted``) or ends its stream (``Streamer.client_gone``: the slot is freed now)."""

    __slots__ = ("waiter", "streamer", "fired")

    def __init__(self, waiter: asyncio.Future[None] | None) -> None:
        self.waiter = waiter
        self.streamer: Any = None
        self.fired = False

    def __call__(self) -> None:
        self.fired = True
        if self.streamer is not None:
            self.streamer.client_gone()
        elif self.waiter is not None and not self.waiter.done():
            self.waiter.cancel()
