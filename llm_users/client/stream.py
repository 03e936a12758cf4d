"""The streaming HTTP/1.1 client: gevent sockets, llhttp (httptools) parsing, a timestamp per recv.

Why not Locust's HttpSession/FastHttpSession: their ``iter_lines``/``iter_content(1024)`` wait
for a kilobyte before yielding, which smears TTFT and ITL. Here every ``recv`` is stamped with
``time.perf_counter_ns()`` the moment it returns and its bytes go straight through the C HTTP
parser into the protocol parser, so a chunk's time is when its bytes reached us.

Costs on the hot path are kept to one wait and one ``recv_into`` per network event: we wait for
readability first (gevent's own ``socket.recv`` tries a non-blocking recv before waiting, two
syscalls per event), reuse one buffer, and reuse the per-connection timeout timers.

One :class:`StreamClient` per Locust user: it keeps one keep-alive connection, verifies TLS by
default, sends ``Accept-Encoding: identity`` (a 2xx body compressed all the same fails as
``malformed_stream`` naming its encoding: raw mode does not inflate) and enforces four time limits
(connect, first byte, gap between reads, whole request) and the size bounds of
:mod:`llm_users.protocols.limits` (the response head here, a line, event or body in the parsers).
Failures raise the :mod:`llm_users.errors` tree. A request is
never sent twice: an idle keep-alive connection is checked (zero-timeout, as urllib3's
``is_connection_dropped``) *before* sending and replaced if the server closed it; anything that
fails after the bytes went out is that request's failure. Some servers close a connection right
after a response although they announced keep-alive (llama.cpp's server after every streamed
response): a request sent on it in the microseconds before the close arrives would fail having
never reached the server. So until a server is seen to carry a second request on a connection,
the first reuse waits a moment after the previous response for its close, and a server seen
closing right after responses gets a new connection per request (:mod:`.keepalive`).
Stamping, events, end rules and in-stream error categories are
:class:`~llm_users.client.request_state.RequestState`'s, shared with SDK mode.
"""

from __future__ import annotations

import _socket  # the C socket type, which gevent's monkey-patching leaves alone
import socket as _stdsocket  # constants only: the class may be gevent's after monkey-patching
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import gevent
import gevent.socket
import gevent.ssl
import httptools
import orjson
from gevent import Timeout

from llm_users.client import keepalive
from llm_users.client.bodies import BodyCollector, refuse_encoding, status_error
from llm_users.client.cancel import CancelPlan
from llm_users.client.connection import Connection, ReadDeadline
from llm_users.client.request_state import DEFAULT_OVERLOAD, RequestState
from llm_users.errors import (
    Cancelled,
    ConnectError,
    ConnectionResetError_,
    ConnectTimeout,
    FirstByteTimeout,
    LLMRequestError,
    ProtocolError,
    ReadTimeout,
    TLSError,
    TotalTimeout,
)
from llm_users.metrics import RequestRecord
from llm_users.protocols import limits
from llm_users.protocols.base import HTTPRequest, StreamParser
from llm_users.protocols.server_side import ServerSide
from llm_users.settings import Timeouts  # the time limits are part of the configuration

perf_counter_ns = time.perf_counter_ns

_BUF_SIZE = 16384
# One receive buffer per process, shared by every connection: bytes are copied out of it (by
# httptools into ``on_body``) before the greenlet can switch, so no two reads can overlap.
# A buffer per user would cost its size in RSS per open stream. Its size is also the most one
# greenlet parses between two visits to the hub: a stream that fell behind has many chunks
# waiting in its socket, and a 64 KB read of them (about 300 SSE chunks) ran 6-11 ms without a
# switch, late-stamping every other stream (issue 14); 16 KB bounds that to about a millisecond.
_BUF = bytearray(_BUF_SIZE)
_VIEW = memoryview(_BUF)
_MAX_ERROR_BODY = 65536
_NO_BOUND = 1 << 62  # the head bound once the head is in


class _Exchange:
    """httptools callbacks for one request/response: headers, the error body, the end; body
    bytes go to the protocol parser and its events to the request's state, which alone holds
    the status, the parser and the record."""

    __slots__ = ("state", "feed", "now", "headers", "error_body", "done", "http", "keep_alive", "failed")

    def __init__(self, state: RequestState) -> None:
        self.state = state
        self.feed = state.parser.feed
        self.now = 0
        self.headers: dict[bytes, bytes] = {}
        self.error_body = bytearray()
        self.done = False
        self.http: Any = None
        self.keep_alive = False
        self.failed = False  # an HTTP error status: the body is the error's, not the stream's

    # httptools callbacks -------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        status = self.http.get_status_code()
        self.failed = status >= 300
        self.state.response(status, self.now, self.headers)
        if not self.failed and b"content-encoding" in self.headers:
            refuse_encoding(status, self.headers[b"content-encoding"])

    def on_body(self, body: bytes) -> None:
        if self.failed:
            if len(self.error_body) < _MAX_ERROR_BODY:
                self.error_body += body
            return
        events = self.feed(body)
        if events:
            self.state.handle(events, self.now)

    def on_message_complete(self) -> None:
        self.done = True
        self.keep_alive = self.http.should_keep_alive()


class StreamClient:
    """Streams requests to one base URL over one keep-alive connection (per Locust user)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeouts: Timeouts | None = None,
        verify_tls: bool = True,
        ssl_context: Any = None,
        user_agent: str = "locust-llm",
    ) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"host must be an http:// or https:// URL, got {base_url!r}")
        self.scheme = url.scheme
        self.hostname = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.base_path = url.path.rstrip("/")
        self.host_header = url.netloc.rsplit("@", 1)[-1]
        self.timeouts = timeouts or Timeouts()
        self.user_agent = user_agent
        self._ssl_context = ssl_context
        if url.scheme == "https" and ssl_context is None:
            self._ssl_context = gevent.ssl.create_default_context()
            if not verify_tls:
                self._ssl_context.check_hostname = False
                self._ssl_context.verify_mode = gevent.ssl.CERT_NONE
        self._conn: Connection | None = None
        self._server = (self.scheme, self.hostname, self.port)
        self.reconnects = 0  # stale idle connections replaced before sending
        t = self.timeouts
        self._read_timer = Timeout(t.read)  # thrown by the deadline; its seconds serve TLS reads
        self._read_deadline = ReadDeadline(t.read, self._read_timer) if t.read is not None else None

    # connection management --------------------------------------------------------------------
    def _connect(self) -> Connection:
        t0 = perf_counter_ns()
        try:
            gsock = gevent.socket.create_connection((self.hostname, self.port), timeout=self.timeouts.connect)
        except TimeoutError as e:
            raise ConnectTimeout(f"connect to {self.hostname}:{self.port} timed out") from e
        except OSError as e:
            raise ConnectError(f"cannot connect to {self.hostname}:{self.port}: {e.strerror or e}") from e
        gsock.setsockopt(_stdsocket.IPPROTO_TCP, _stdsocket.TCP_NODELAY, 1)
        if self.scheme == "https":
            try:
                gsock.settimeout(self.timeouts.connect)
                sock = self._ssl_context.wrap_socket(gsock, server_hostname=self.hostname)
            except (OSError, gevent.ssl.SSLError) as e:
                gsock.close()
                raise TLSError(f"TLS handshake with {self.hostname} failed: {e}") from e
            conn = Connection(sock, tls=True)
        else:
            raw = _socket.socket(fileno=gsock.detach())
            raw.setblocking(False)
            conn = Connection(raw, tls=False)
        self._connect_ns = perf_counter_ns() - t0
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _request_bytes(self, req: HTTPRequest) -> bytes:
        path = self.base_path + req.path
        lines = [
            f"{req.method} {path} HTTP/1.1",
            f"Host: {self.host_header}",
            f"User-Agent: {self.user_agent}",
            "Accept-Encoding: identity",
            f"Content-Length: {len(req.body)}",
        ]
        lines.extend(f"{k}: {v}" for k, v in req.headers.items())
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head + req.body

    # the request -----------------------------------------------------------------------------
    def fetch_json(self, path: str, headers: dict[str, str] | None = None) -> Any:
        """GET ``path`` and decode its JSON body (raises the error tree on failure)."""
        req = HTTPRequest("GET", path, dict(headers or {}, Accept="application/json"), b"", name=path)
        body = BodyCollector()
        self.stream(req, body, RequestRecord("", path, "", ""))
        try:
            return orjson.loads(body.body)
        except orjson.JSONDecodeError:
            raise ProtocolError(f"GET {path} did not return JSON") from None

    def call_json(self, req: HTTPRequest) -> Any:
        """Send a small non-streaming request and decode its JSON answer (e.g. POST /tokenize)."""
        body = BodyCollector()
        self.stream(req, body, RequestRecord("", req.name, "", ""))
        try:
            return orjson.loads(body.body)
        except orjson.JSONDecodeError:
            raise ProtocolError(f"{req.method} {req.path} did not return JSON") from None

    def stream(self, req: HTTPRequest, parser: StreamParser, record: RequestRecord,
               overload_statuses: frozenset[int] = DEFAULT_OVERLOAD, cancel: CancelPlan | None = None,
               side: ServerSide | None = None) -> RequestRecord:
        """Send ``req``, feed the response body to ``parser``, fill ``record``.

        Returns the record on success; raises an :class:`LLMRequestError` (with the record
        filled as far as the request got) on failure. A greenlet kill (Locust stopping a user)
        propagates untouched and leaves no half-open connection behind. ``cancel``: abandon
        the request at that point (:mod:`.cancel`): raises :class:`Cancelled` with the
        connection closed, never reused.
        """
        state = RequestState(record, parser, overload_statuses, cancel.after_tokens or 0 if cancel else 0, side)
        cancel_timer = cancel_timeout(cancel)
        total = Timeout(self.timeouts.total)
        total.start()
        try:
            return self._stream_once(req, state, total, cancel_timer)
        except Timeout as t:
            if t is total:
                self.close()
                raise TotalTimeout(f"request exceeded the total limit of {self.timeouts.total:g}s") from None
            raise
        except Cancelled as e:
            e.stamp()  # the end the record keeps: before the server can see the close
            self.close()  # abandoned: the server sees the connection close
            raise
        finally:
            total.close()
            if cancel_timer is not None:
                cancel_timer.close()

    def _ready_connection(self, record: RequestRecord) -> Connection:
        """The keep-alive connection if it is still good, else a new one. Checked before
        sending, so a request is never resent: a server's close is found while idle."""
        conn = self._conn
        if conn is not None:
            key = (*self._server, conn.after_chunked)
            closes = keepalive.closes_after_response(key)
            if closes is None:  # not yet seen to keep connections: give its close time to arrive
                wait = conn.idle_since + keepalive.CLOSE_GRACE_NS - perf_counter_ns()
                if wait > 0:
                    conn.wait_readable(wait / 1e9)
            if conn.is_dropped():
                if closes is None and perf_counter_ns() - conn.idle_since < keepalive.CLOSED_AFTER_RESPONSE_NS:
                    self._learn(key, closes=True)
                self.close()
                conn = None
                self.reconnects += 1
                record.reconnected = True
        if conn is None:
            conn = self._conn = self._connect()
            record.connect_ns = self._connect_ns
        return conn

    def _stream_once(self, req: HTTPRequest, state: RequestState, total: Timeout,
                     cancel_timer: Timeout | None = None) -> RequestRecord:
        record = state.record
        conn = self._ready_connection(record)
        data = self._request_bytes(req)
        ex = _Exchange(state)
        http = ex.http = httptools.HttpResponseParser(ex)
        try:
            return self._exchange(conn, data, state, ex, http, total, cancel_timer)
        finally:
            # the parser holds the exchange's bound callbacks and the exchange the parser: a
            # reference cycle per request, left for the garbage collector (and its gen1
            # passes, the client's longest pauses) unless broken here (issue 14)
            ex.http = None

    def _exchange(self, conn: Connection, data: bytes, state: RequestState, ex: _Exchange, http: Any,
                  total: Timeout, cancel_timer: Timeout | None = None) -> RequestRecord:
        record = state.record
        state.start()
        if cancel_timer is not None:  # --llm-cancel-after DURATION: from t0
            cancel_timer.start()
        first_byte = Timeout(self.timeouts.first_byte)  # a fresh one per request (see recv_into)
        try:
            conn.send_all(data)
            n = conn.recv_into(_BUF, first_byte)
        except Timeout as t:
            if t is total:
                raise
            self.close()
            raise FirstByteTimeout(f"no response byte within {self.timeouts.first_byte:g}s") from None
        except OSError as e:
            self.close()
            raise ConnectionResetError_(f"connection lost after the request was sent, before any response: {e}") from e
        finally:
            first_byte.close()
        if n == 0:
            reused = conn.requests > 0
            key = (*self._server, conn.after_chunked)
            self.close()
            if reused:
                self._learn(key, closes=True)
            raise ConnectionResetError_("server closed the connection after the request was sent, before responding"
                                        + (" (a reused keep-alive connection)" if reused else ""))
        ex.now = state.first_byte()
        if conn.requests:
            self._learn((*self._server, conn.after_chunked), closes=False)
        conn.requests += 1
        deadline = None if conn.tls else self._read_deadline
        try:
            if deadline is not None:
                deadline.start(ex)
            self._read_body(conn, http, ex, n, total, None if deadline is not None else self._read_timer)
        except BaseException as e:
            if isinstance(e, Cancelled):
                e.stamp()  # before the close: the server never sees it before the recorded end
            self.close()
            raise
        finally:
            if deadline is not None:
                deadline.stop()
        chunked = b"chunked" in ex.headers.get(b"transfer-encoding", b"").lower()
        if not ex.keep_alive or keepalive.closes_after_response((*self._server, chunked)):
            self.close()
        else:
            conn.idle_since = ex.now
            conn.after_chunked = chunked
        return record

    def _learn(self, key: keepalive.Server, *, closes: bool) -> None:
        if keepalive.closes_after_response(key) is None:
            keepalive.learn(key, closes=closes, label=f"{self.scheme}://{self.host_header}")

    def _read_body(
        self, conn: Connection, http: Any, ex: _Exchange, n: int, total: Timeout, read_timer: Timeout | None
    ) -> None:
        state = ex.state
        view = _VIEW
        buf = _BUF
        received = 0
        head = limits.CURRENT.header_bytes  # the response head's bound, then none
        eof = False
        while True:
            received += n
            try:
                http.feed_data(view[:n])
            except httptools.HttpParserCallbackError as e:
                cause = e.__context__
                if isinstance(cause, LLMRequestError):
                    raise cause from None
                raise
            except httptools.HttpParserError as e:
                raise ProtocolError(f"invalid HTTP response: {e}") from None
            if ex.done or eof:
                break
            if received > head:
                if not state.responded:
                    raise limits.head_too_large(head)
                head = _NO_BOUND
            try:
                n = conn.recv_into(buf, read_timer)
            except Timeout as t:
                if t is total:
                    raise
                raise ReadTimeout(f"no bytes for {self.timeouts.read:g}s mid-response") from None
            except OSError as e:
                raise ConnectionResetError_(f"connection lost mid-response: {e}") from e
            ex.now = perf_counter_ns()
            if n == 0:
                if self._body_until_close(ex):
                    eof = True
                    break
                if not ex.failed and state.parser.complete:
                    break  # every protocol byte arrived; only HTTP framing was cut
                raise ConnectionResetError_("server closed the connection mid-response")
        state.record.response_bytes = received
        end = ex.now
        if ex.failed or not state.responded:
            raise status_error(ex.state.status, bytes(ex.error_body), ex.headers)
        events = state.parser.close()
        if events:
            state.handle(events, end)
        state.finish(end)

    @staticmethod
    def _body_until_close(ex: _Exchange) -> bool:
        h = ex.headers
        return b"content-length" not in h and b"chunked" not in h.get(b"transfer-encoding", b"").lower()


def cancel_timeout(plan: CancelPlan | None) -> Timeout | None:
    """``--llm-cancel-after DURATION``: a timer (not started) that raises :class:`Cancelled` in
    the request's greenlet wherever it waits; None when the plan counts tokens or is off."""
    if plan is None or plan.after_ns is None:
        return None
    return Timeout(plan.after_ns / 1e9, Cancelled(f"the client cancelled the request {plan.after_ns / 1e6:g} ms "
                                                  "after it was sent"))


def new_request_id() -> str:
    return uuid.uuid4().hex
