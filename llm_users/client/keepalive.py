"""What each server does with a connection after a response, learned as requests go.

Some servers close a connection right after a response although they announced keep-alive
(llama.cpp's server after every streamed response, about 60 us after its last chunk). A request
written in the moment before that close arrives reaches nobody and fails as
``connection_reset``, and must not be resent (it might have been read). So both clients (raw
:mod:`.stream`, SDK :mod:`.sdk`), until a server is seen to carry a second request on a
connection, give its close :data:`CLOSE_GRACE_NS` after the previous response before reusing
it; a server seen closing then gets a connection per request. Kept per (scheme, host, port,
chunked): llama.cpp keeps a connection after a JSON answer and closes it after a stream.
Shared by every client in the process; pure bookkeeping, no I/O but one log line.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

#: How long after a response a connection is watched for the server's close before its first
#: reuse on a server not yet seen to keep connections (20 ms leaves room for a busy machine).
#: Spent before t0, so it delays the next request but is in none of its figures.
CLOSE_GRACE_NS = 20_000_000
#: A close found this soon after a response is the server closing after responses, not an idle
#: timeout (those are seconds: cpp-httplib and uvicorn 5 s, nginx 75 s).
CLOSED_AFTER_RESPONSE_NS = 1_000_000_000

Server = tuple[str, str, int, bool]  # scheme, host, port, whether the response was chunked

_CLOSES: dict[Server, bool] = {}


def closes_after_response(server: Server) -> bool | None:
    """True if the server closes connections right after such a response, False if it keeps
    them, None while unknown."""
    return _CLOSES.get(server)


def learn(server: Server, *, closes: bool, label: str) -> None:
    """Note what the server did (the first finding stands); a closing server is said once."""
    if server in _CLOSES:
        return
    _CLOSES[server] = closes
    if closes:
        log.warning("locust-llm: %s closes its connection right after each %sresponse although it announces "
                    "keep-alive; from now on each such request opens its own connection (its connect time is in "
                    "connect_ns)", label, "streamed " if server[3] else "")
