"""SDK client mode (``--llm-client sdk``): the same request through the backend's official SDK.

This measures what an application built on the SDK experiences, with raw mode's semantics:

- the request is the one the route's builder made for raw mode (its JSON body becomes the
  SDK call's arguments), so both modes send the same settings;
- each chunk the SDK yields is dumped back to the wire's JSON shape and goes through the
  route's own parser into the same :class:`~llm_users.client.request_state.RequestState` as raw mode,
  so end signals (``empty_response``, ``stream_truncated``), in-stream error categories, token
  and reasoning counts are judged by the same rules; SDK exceptions are mapped in
  :mod:`llm_users.client.failures`;
- the SDK's HTTP client is an ``httpx.Client`` of ours: its request hook applies our connect
  and first-byte limits (whatever timeout the SDK passes), its response hook stamps TTFB when
  the response head arrives and switches to the read-gap limit; the total limit is a gevent
  ``Timeout`` as in raw mode. ``max_retries=0``: every attempt is one request;
- the request hook asks for ``Accept-Encoding: identity`` (every SDK, as raw mode) and the
  response hook puts the body behind raw mode's size bounds, inflating a body compressed all
  the same in bounded pieces (:mod:`.sdk_body`); the runaway bound is the request state's.

Sync clients run under gevent (Locust monkey-patches sockets). The SDKs are the optional extra
``locust-llm[sdk]``, imported when the run is set up (:func:`check_sdk_available`), not inside
the first request. Their per-request HTTP log lines are quiet unless the run logs at DEBUG
(:func:`quiet_http_logs`). A request is named ``sdk:`` + raw mode's name for it (``LLMUser.sdk_name``).
"""

from __future__ import annotations

import importlib
import time
from typing import Any
from urllib.parse import urlsplit

import gevent
import orjson
from gevent import GreenletExit, Timeout, getcurrent

from llm_users.client import keepalive
from llm_users.client.cancel import CancelPlan
from llm_users.client.failures import from_sdk_exception
from llm_users.client.request_state import RequestState
from llm_users.client.sdk_body import LINE_ENDS, SSE_ENDS, bound
from llm_users.client.stream import cancel_timeout
from llm_users.errors import Cancelled, ConfigError, LLMRequestError, TotalTimeout
from llm_users.metrics import RequestRecord
from llm_users.protocols import limits
from llm_users.protocols.backend import SDKSetup, all_backends

perf_counter_ns = time.perf_counter_ns


def import_sdk(module: str) -> Any:
    """Import an SDK. A locustfile named like the SDK (``locustfiles/openai.py`` is imported by
    Locust as the module ``openai``) must not stand in for it: :func:`llm_users.plugin.register`
    takes such a locustfile out of ``sys.modules`` under the SDK's name, and this refuses a
    plain file where a package belongs (a run started inside ``locustfiles/`` would find it)."""
    top = importlib.import_module(module.split(".")[0])
    if not hasattr(top, "__path__"):  # a plain file where the SDK is a package
        raise ImportError(f"{module!r} resolves to {top.__file__}, not the SDK package "
                          "(a locustfile of that name? run locust from another folder)")
    return importlib.import_module(module)


#: The SDKs' loggers that log at INFO for every request: httpx (``HTTP Request: POST ...``, under
#: the openai and google-genai SDKs), httpx2 (the same line, under the anthropic SDK) and
#: google-genai (its function-calling notes). ``ANTHROPIC_LOG=info`` and the like still win.
CHATTY_LOGGERS = ("httpx", "httpx2", "google_genai")


def quiet_http_logs() -> list[str]:
    """Set the SDKs' per-request loggers to WARNING, unless the run logs at DEBUG
    (``--loglevel DEBUG``: the root logger at DEBUG) or a logger was given a level already
    (by the user's own logging setup). Returns the loggers quietened."""
    import logging

    if logging.getLogger().getEffectiveLevel() <= logging.DEBUG:
        return []
    quiet = []
    for name in CHATTY_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)
            quiet.append(name)
    return quiet


def check_sdk_available(user_cls: Any, endpoint: str | None = None) -> Any:
    """Import the SDK the route needs, now (before the run starts), or raise ConfigError with
    what to install."""
    route = user_cls.descriptor.route(endpoint)
    sdk = route.sdk
    if sdk is None:
        ends = [r.endpoint for r in user_cls.descriptor.routes if r.sdk]
        if ends:  # another of its routes has one (vLLM's rerank: no SDK call)
            raise ConfigError(f"--llm-client sdk is not available for {user_cls.backend}'s {route.endpoint!r} route "
                              f"(it is for {', '.join(ends)})")
        have = sorted(b.name for b in all_backends().values() if b.sdk_module)
        raise ConfigError(f"--llm-client sdk is not available for {user_cls.backend} (it is for {', '.join(have)})")
    try:
        return import_sdk(sdk.module)
    except ImportError as e:
        raise ConfigError(f"--llm-client sdk needs the {sdk.package} package: pip install 'locust-llm[sdk]' ({e})") \
            from None


#: One TLS context per (httpx package, verify) in a process, shared by every user's SDK client.
#: Left to itself httpx builds one per client, loading certifi's store: 20-50 ms of CPU per
#: user spawned (measured: 52 ms an openai client on a busy 2-core VM, 0.9 ms with a shared
#: context), with the loop held while the users already up are streaming.
_TLS_CONTEXTS: dict[tuple[str, bool], Any] = {}


def shared_tls_context(package: str, verify: bool) -> Any:
    """The process's TLS context for SDK clients built on ``package`` (httpx or httpx2), made
    by that package's own ``create_ssl_context`` (its trust store and its ``SSL_CERT_FILE``
    rules); ``verify`` itself where the package has no such function."""
    key = (package, verify)
    ctx = _TLS_CONTEXTS.get(key)
    if ctx is None:
        try:
            ctx = _TLS_CONTEXTS[key] = importlib.import_module(package).create_ssl_context(verify=verify)
        except (ImportError, AttributeError):
            return verify
    return ctx


class SDKSession:
    """One user's SDK client and the httpx client under it (its hooks stamp the request of the
    greenlet they run in)."""

    def __init__(self, user: Any) -> None:
        t = user.settings.timeouts
        self.timeouts = t
        # the request each greenlet is streaming: the hooks run in the greenlet that made the SDK
        # call, and the open-loop scheduler sends many requests at once through one user's session
        self.streaming: dict[Any, RequestState] = {}
        # connect, read (the first byte until the head arrives), write, pool: a tuple, which
        # every httpx flavour takes; the request hook re-applies it whatever the SDK passes
        self._limits = {"connect": t.connect, "read": t.first_byte, "write": t.read, "pool": t.connect}
        self.user = user
        self.route = user.route
        kind, protocol = self.route.kind, self.route.protocol  # what the event bound counts (sdk_body.py)
        self._ends = () if kind != "chat" else LINE_ENDS if protocol == "ollama" else SSE_ENDS
        binding = self.route.sdk
        if binding is None:
            raise ConfigError(f"--llm-client sdk is not available for {user.backend}")
        self.binding = binding
        kwargs: dict[str, Any] = {
            "timeout": (t.connect, t.first_byte, t.read, t.connect),
            "verify": shared_tls_context(binding.http_package, user.settings.verify_tls),
            "event_hooks": {"request": [self._on_request], "response": [self._on_response]},
        }
        module = check_sdk_available(type(user), user.settings.endpoint)
        setup = SDKSetup(
            base_url=user.descriptor.base_url(user.host),
            api_key=user.api_key,
            httpx_kwargs=kwargs,
            options={name: getattr(user, name) for name in user.request_options},
        )
        self.client = binding.client(module, setup)
        # keep-alive habits (keepalive.py): the SDK's streams are chunked responses from this server
        url = urlsplit(setup.base_url)
        self._server: keepalive.Server = (url.scheme, url.hostname or "", url.port or (443 if url.scheme == "https"
                                                                                   else 80), True)
        self._label = f"{url.scheme}://{url.netloc.rsplit('@', 1)[-1]}"
        self._last_stream: Any = None  # the network stream the last response came on (httpcore's)
        self._reuse_candidate: Any = None
        self._response_stream: dict[Any, Any] = {}  # by greenlet, as ``streaming``
        self._responses: dict[Any, Any] = {}  # the httpx response each greenlet streams (closed on a cancel)
        self._cancel_timers: dict[Any, Timeout] = {}  # --llm-cancel-after DURATION, by greenlet: from t0 (_trace)
        self._unsent: set[Any] = set()  # greenlets whose request httpx has not begun to write (_trace)
        self._connecting: dict[Any, int] = {}  # by greenlet: when its request's connect began (_trace)
        self._last_end_ns = 0

    def _before_send(self) -> None:
        """Until the server is seen to keep connections after a stream, give its close a moment
        after the previous response (before t0), so httpx's pool finds the connection closed
        instead of writing the request into a closing one (keepalive.py). Once it is known to
        close them, requests say ``Connection: close`` and the pool never reuses one; the wait
        still covers the connection left from before that was known."""
        last = self._last_stream  # None after a request that said Connection: close
        if last is None or keepalive.closes_after_response(self._server) is False:
            return
        info = getattr(last, "get_extra_info", lambda name: None)
        sock = info("socket")
        if sock is None or sock.fileno() == -1:  # the SDK closed it itself: the pool will not reuse it,
            return  # so there is no close to wait for (the openai SDK does at [DONE]: 20 ms a request saved)
        wait = self._last_end_ns + keepalive.CLOSE_GRACE_NS - perf_counter_ns()
        if wait > 0:
            gevent.sleep(wait / 1e9)
        if sock.fileno() == -1:  # closed during the wait
            return
        if info("is_readable") and perf_counter_ns() - self._last_end_ns < keepalive.CLOSED_AFTER_RESPONSE_NS:
            keepalive.learn(self._server, closes=True, label=self._label)

    def _on_request(self, request: Any) -> None:
        # our limits, whatever the SDK passed per request; the id the simulator traces by
        request.extensions["timeout"] = dict(self._limits)
        request.headers["Accept-Encoding"] = "identity"  # as raw mode; a server that compresses anyway: sdk_body
        request.headers.update(self.user.extra_headers)
        state = self.streaming.get(getcurrent())
        if state is not None:
            request.extensions["trace"] = self._trace  # httpcore's: when the request's first byte goes
            self._unsent.add(getcurrent())
            request.headers["X-Request-Id"] = state.record.request_id
            if keepalive.closes_after_response(self._server):  # it closes anyway: so the pool knows
                request.headers["Connection"] = "close"
                self._response_stream[getcurrent()] = None  # the pool will not reuse it

    def _trace(self, name: str, _info: Any) -> None:
        """httpcore's trace of the request's connection and exchange. t0 as in raw mode (decision
        2): just before the request's first byte is written, after any connect or wait for a
        pooled connection; until then the request is unsent, and a stop that cuts it there cuts
        nothing the server saw (no record, as raw mode's stop during a connect)."""
        if name.endswith("send_request_headers.started"):
            me = getcurrent()
            self._unsent.discard(me)
            state = self.streaming.get(me)
            if state is not None:
                state.start()
                timer = self._cancel_timers.get(me)
                if timer is not None:  # the cancel counts from t0, as in raw mode: not from the SDK call
                    self._cancel_timers[me] = restarted(timer)
        elif name.startswith("connection."):
            self._connect_trace(name)

    def _connect_trace(self, name: str) -> None:
        """The request opened a connection: its TCP (and TLS) connect time is ``connect_ns``, as raw
        mode's, before t0 and in none of the request's other figures."""
        me = getcurrent()
        if name in ("connection.connect_tcp.started", "connection.connect_unix_socket.started"):
            self._connecting[me] = perf_counter_ns()
        elif name.endswith(".complete") and (name.startswith(("connection.connect_", "connection.start_tls"))):
            began, state = self._connecting.get(me), self.streaming.get(me)
            if began is not None and state is not None:
                state.record.connect_ns = perf_counter_ns() - began

    def _on_response(self, response: Any) -> None:
        now = perf_counter_ns()
        self._unsent.discard(getcurrent())  # a transport that gave no trace: the answer says it was sent
        state = self.streaming.get(getcurrent())
        if state is not None:
            side = state.side
            headers = response.headers
            kept = {n.encode(): v.encode("latin-1") for n in side.wanted if (v := headers.get(n)) is not None} \
                if side is not None else None
            state.response(response.status_code, now, kept)
            self._responses[getcurrent()] = response
            stream = response.extensions.get("network_stream")
            if stream is not None and stream is self._reuse_candidate:  # a connection carried another request
                keepalive.learn(self._server, closes=False, label=self._label)
            if getcurrent() not in self._response_stream:  # not one sent with Connection: close
                self._response_stream[getcurrent()] = stream
        # bytes flow from here on: the longest gap between reads is the read limit
        response.request.extensions["timeout"]["read"] = self.timeouts.read
        bound(response, limits.CURRENT, self._ends)  # the size bounds (raises response_too_large)

    def stream(self, spec: Any, rec: RequestRecord, overload_statuses: frozenset[int],
               cancel: CancelPlan | None = None) -> RequestRecord:
        """One request through the SDK; fills ``rec`` or raises the error tree. ``cancel``:
        abandon it at that point (raises :class:`Cancelled`; the SDK's stream is closed, so
        its connection is closed, not returned to the pool)."""

        self._before_send()
        # the connection this request may reuse; the last stream is set again when it ends well
        self._reuse_candidate, self._last_stream = self._last_stream, None
        req = self.route.build(spec)
        body = orjson.loads(req.body)
        state = RequestState(rec, self.route.parser(), overload_statuses, cancel.after_tokens or 0 if cancel else 0,
                             self.route.server_side)
        parser = state.parser
        me = getcurrent()
        self.streaming[me] = state
        cancel_timer = cancel_timeout(cancel)
        chunks: Any = None
        total = Timeout(self.timeouts.total)
        total.start()
        try:
            state.start()  # t0 for now; again when httpx begins to write the request (_trace)
            if cancel_timer is not None:
                cancel_timer.start()  # again at the real t0 (_trace), where the SDK lets us see it
                self._cancel_timers[me] = cancel_timer
            chunks = self.binding.stream(self.client, spec, body)
            for obj, name in chunks:
                now = perf_counter_ns()
                state.handle(parser.payload(obj, name), now)
            state.finish(perf_counter_ns())
            self._last_stream, self._last_end_ns = self._response_stream.get(me), perf_counter_ns()
        except Timeout as t:
            if t is not total:
                raise
            raise TotalTimeout(f"request exceeded the total limit of {self.timeouts.total:g}s") from None
        except Cancelled as e:
            e.stamp()  # the end the record keeps: before we close (the SDK may have closed already)
            self._abandon(me)
            raise
        except LLMRequestError:
            raise
        except GreenletExit:
            if me in self._unsent:  # stopped before a byte was written: no request, no record
                rec.t0_ns = 0
            raise
        except Exception as e:  # whatever the SDK raises: the category raw mode gives that fault
            cancelled = _cancel_in(e)
            if cancelled is not None:  # the cancel timer fired inside the SDK, which wrapped it
                cancelled.stamp()
                self._abandon(me)
                raise cancelled from None
            raise from_sdk_exception(e, state) from e
        finally:
            total.close()
            for timer in (cancel_timer, self._cancel_timers.pop(me, None)):
                if timer is not None:
                    timer.close()
            if chunks is not None and getattr(chunks, "close", None) is not None:
                chunks.close()  # a stream left early (cancelled, failed): the SDK closes its response
            del self.streaming[me]
            self._unsent.discard(me)
            self._connecting.pop(me, None)
            self._response_stream.pop(me, None)
            self._responses.pop(me, None)
        return rec

    def _abandon(self, me: Any) -> None:
        """A cancelled request: close its response now, so its connection closes (the server
        sees the client leave) instead of waiting in the SDK's stream object for the garbage
        collector (the openai SDK's stream refers to itself through its generator)."""
        response = self._responses.get(me)
        if response is not None:
            try:
                response.close()
            except Exception:  # noqa: BLE001 - closing is all that is left to do
                pass


def restarted(timer: Timeout) -> Timeout:
    """A timer of ``timer``'s length and exception started now, ``timer`` closed. Not
    ``cancel()`` and ``start()``: libev's stop keeps the time that was left and its start
    resumes it, so the timer would still fire at its first deadline (an SDK cancel 6 ms early
    after a 6 ms connect)."""
    fresh = Timeout(timer.seconds, timer.exception)
    timer.close()
    fresh.start()
    return fresh


def _cancel_in(exc: BaseException | None) -> Cancelled | None:
    """The :class:`Cancelled` an SDK exception wraps (as its cause or context), if any."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, Cancelled):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def sdk_stream(user: Any, spec: Any, rec: RequestRecord, cancel: CancelPlan | None = None) -> RequestRecord:
    """Run one request (its ``spec`` built by the user) through the user's SDK session (made
    in ``on_start``, or here on first use)."""
    if user._sdk is None:
        user._sdk = SDKSession(user)
    return user._sdk.stream(spec, rec, user.descriptor.overload_statuses, cancel)
