"""Backing off when the server cannot be reached or keeps failing the same way.

A load tester should not turn a misconfiguration (a dead host, a missing key, a prompt the server
cannot take) into a flood of thousands of requests a second. Each user counts its *consecutive*
failures of one kind (:func:`backoff_kind`):

- a connection that could not be made (``connect_error``, ``connect_timeout``,
  ``connection_error``, ``tls_error``): kind ``connect``;
- the same 4xx status (``http_401`` ...);
- the same 5xx status with the same message (``http_503`` ``Loading model``: llama.cpp's answer for
  the second or two a restarted server loads its model, some 500 requests in that time without
  this; a gateway's 502 while its upstream is down);
- an empty answer (``empty_response``: status 200 and headers, then no event; llama.cpp's answer
  to an over-long streamed prompt): kind ``empty_response``;
- the same in-stream error (``server_error`` / ``server_overloaded`` with the same code and
  message);
- a stream cut at the same point (``stream_truncated`` after the same number of chunks: the same
  byte offset in the answer's events).

From the :data:`AFTER` th such failure on, the user waits before its next request: :data:`BASE_S`
seconds, doubling each time, at most :data:`MAX_S` (bounded exponential). Any success or a
different failure resets it.

A 429 or 503 that says ``Retry-After`` (seconds or an HTTP date) is honoured at once, from the
first one: the user waits what the server asked, at most :data:`RETRY_AFTER_MAX_S` (a server
may ask for an hour). Only a closed-loop user waits: in open loop the schedule is kept (a delayed
arrival would change the offered load), and the rejection is counted with the wait asked
(``RequestRecord.retry_after_s``; summary.json ``backoff.retry_after``). ``--llm-backoff off`` turns it off. The wait is recorded on the
request (``backoff_s``) so the summary counts it. A failure that varies (a reset or a timeout at a
random point, 5xx answers whose messages differ) does not count: it says nothing about the next
request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from llm_users.metrics import RequestRecord

AFTER = 3  # consecutive failures of one kind before the first wait
RETRY_AFTER_MAX_S = 30.0  # the longest Retry-After a user honours
RETRY_AFTER_STATUSES = frozenset({429, 503})
BASE_S = 0.5
MAX_S = 8.0
CONNECT_CATEGORIES = frozenset({"connect_error", "connect_timeout", "connection_error", "tls_error"})
STREAM_ERROR_CATEGORIES = frozenset({"server_error", "server_overloaded"})
MESSAGE_CHARS = 200  # of an in-stream error's message, compared to call two errors identical


def backoff_kind(rec: RequestRecord) -> str | None:
    """The kind of failure that counts toward backing off, or None. Two failures of the same kind
    are the same failure repeated."""
    if rec.ok:
        return None
    cat = rec.error_category or ""
    if cat in CONNECT_CATEGORIES:
        return "connect"
    if rec.http_status is not None and 400 <= rec.http_status < 500:
        return f"http_{rec.http_status}"
    if rec.http_status is not None and rec.http_status >= 500:
        return f"http_{rec.http_status}:{(rec.error_message or '')[:MESSAGE_CHARS]}"
    if cat == "empty_response":
        return "empty_response"
    if cat in STREAM_ERROR_CATEGORIES:
        return f"{cat}:{rec.error_code}:{(rec.error_message or '')[:MESSAGE_CHARS]}"
    if cat == "stream_truncated":
        return f"stream_truncated@{rec.chunks}"
    return None


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header's wait in seconds (delta-seconds or an HTTP date, RFC 9110), or
    None when there is none or it makes no sense; a date in the past is 0."""
    text = (value or "").strip()
    if not text:
        return None
    if text.isdigit():
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass(slots=True)
class Backoff:
    """One user's state: how many failures of the same kind in a row."""

    enabled: bool = True
    kind: str | None = None
    streak: int = 0

    def after(self, rec: RequestRecord) -> float:
        """Seconds to wait before the next request, given how this one ended: the server's
        ``Retry-After`` on a 429/503 (bounded), else the repeated-failure back-off."""
        kind = backoff_kind(rec)
        if kind is None or kind != self.kind:
            self.kind, self.streak = kind, (1 if kind else 0)
        else:
            self.streak += 1
        if not self.enabled:
            return 0.0
        repeated = 0.0 if self.streak < AFTER else min(MAX_S, BASE_S * 2 ** (self.streak - AFTER))
        if rec.retry_after_s is not None and rec.http_status in RETRY_AFTER_STATUSES:
            return max(repeated, min(rec.retry_after_s, RETRY_AFTER_MAX_S))
        return repeated
