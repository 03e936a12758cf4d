"""The preflight: before the load starts, one tiny request per LLM User class's route (and the
model probe, ``GET /v1/models``, where the backend discovers its model) that must succeed.

It goes through the run's own request path: the class's descriptor builds it from the user's
settings (model, endpoint, key, client raw or SDK) with one output token and the shortest
prompt, and the same stream client or SDK sends it, so a route that works here works for the
run. It is never counted: no Locust ``request`` and no ``llm_response`` event.

What it finds (:func:`explain`, pure):

- connection refused / TLS trouble, 401/403, 404/405, another 4xx (a bad model name), or a 200
  that is not the dialect's stream (:data:`TRIES` times in a row): **fatal**: one ``locust-llm:`` line naming the cause and the
  likely fix (the locustfile, ``--host``, ``--llm-endpoint``, ``--llm-model``, the key's
  variable by NAME, never its value); the run exits 1 before any load.
- 408/429/5xx, an overload answer, a timeout, a reset: **transient**: tried again
  (:data:`TRIES` in all, :data:`RETRY_WAIT_S` apart), then one warning line and the run goes on
  (a busy or warming-up server is not a wrong setup; the mid-run fail-stop,
  :mod:`llm_users.health.guard`, ends a run that never recovers).

Where it runs is the plugin's choice (``llm_users/plugin.py``): the process that sends the load
(the local runner at start; each worker as its test starts, since a master may not reach the
server). ``--llm-preflight off`` skips it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import gevent

from llm_users.errors import (
    ConfigError,
    ConnectError,
    EmptyResponse,
    HTTPStatusError,
    LLMRequestError,
    ProtocolError,
    ReadTimeout,
    TLSError,
    TotalTimeout,
    TransportError,
)
from llm_users.metrics import RequestRecord
from llm_users.settings import Settings, Timeouts

#: the shortest prompt; the answer is one token
PROMPT = ({"role": "user", "content": "Hi"},)
TRIES = 3
RETRY_WAIT_S = 1.0
#: the preflight's own limits (a dead host must not hold the start for the run's 10 s connect limit,
#: a silent or endless one for its 120 s first-byte and 600 s limits): each try at most TOTAL_S,
#: so the whole preflight of a route at most TRIES x TOTAL_S
CONNECT_S = 5.0
TOTAL_S = 20.0
_TRANSIENT_4XX = frozenset({408, 409, 425, 429})
#: answers that are not the dialect's stream at all (a truncated one is a fault of the moment)
_BROKEN = (ProtocolError, EmptyResponse)


@dataclass(frozen=True, slots=True)
class Finding:
    """What the preflight of one route found: ``fatal`` stops the run; otherwise a warning."""

    fatal: bool
    message: str


@dataclass(frozen=True, slots=True)
class Target:
    """What is checked, and the words a message needs."""

    user: str  # the User class's name
    locustfile: str  # e.g. vllm.py (the backend's shipped locustfile), "" if unknown
    backend: str
    endpoint: str
    endpoints: tuple[str, ...]
    request: str  # "POST /v1/chat/completions"
    host: str
    key_names: str  # the variable(s) the key is read from, by name
    key_set: bool
    limit_field: str = "its output-token limit"  # the request's field that asks for N tokens at most (by name)


def explain(exc: LLMRequestError, t: Target, chunks: int = 0) -> Finding:
    """The finding for a failed preflight request (pure: the tests call it directly); ``chunks``:
    the token chunks it had streamed (it asked for one)."""
    what = f"the preflight request ({t.request} at {t.host}, {t.user})"
    if chunks > 1 and (exc.category == "runaway_stream" or isinstance(exc, (TotalTimeout, ReadTimeout))):
        return Finding(False, f"{what} asked for 1 output token and was still streaming ({chunks} chunks, "
                              f"{exc.category}): the server does not honour the output limit this dialect sends "
                              f"({t.limit_field}); the run's answers may not end where --llm-max-tokens says; going on")
    locustfile = t.locustfile or f"the {t.backend} one"
    other = f"is it a {t.backend} server? (wrong locustfile for this server? {locustfile} speaks {t.backend}'s API)."
    status = exc.status if isinstance(exc, HTTPStatusError) else None
    if isinstance(exc, TLSError):
        return Finding(True, f"{what} failed: {exc.message}; check the https:// URL in --host "
                             f"(or --llm-insecure true for a self-signed certificate)")
    if isinstance(exc, ConnectError):
        return Finding(True, f"{what} could not connect: {exc.message}; is the server up, "
                             f"and is --host right?")
    if status in (401, 403):
        if t.key_set:
            fix = f"the key in {t.key_names} was refused: check it, or name another variable with --llm-api-key-env"
        elif t.key_names != "(none named)":
            fix = f"set the server's API key in {t.key_names}, or name another variable with --llm-api-key-env"
        else:
            fix = "put the server's API key in an environment variable and name it with --llm-api-key-env NAME"
        return Finding(True, f"{what} answered {status} ({'unauthorized' if status == 401 else 'forbidden'}): {fix}")
    if status in (404, 405):
        ends = ", ".join(t.endpoints)
        return Finding(True, f"{what} answered {status} (no such route): {other} Or pick another "
                             f"--llm-endpoint ({ends}; now {t.endpoint}), or drop a path from --host")
    if status is not None and 400 <= status < 500 and status not in _TRANSIENT_4XX:
        if _NO_REASON.match(exc.message.strip()):  # nothing to go on: no guess at a cause
            return Finding(True, f"{what} answered {status} with an empty body: the server refused something "
                                 f"in the request (a field or a header) without saying what; the run's requests "
                                 f"are built the same way (the server's log may say)")
        return Finding(True, f"{what} answered {status}: {_short(exc.message)}; check --llm-model and the "
                             f"sampling options (the run's requests are built the same way)")
    if type(exc) in _BROKEN:
        return Finding(True, f"{what} got an answer that is not a {t.backend} stream ({exc.category}: "
                             f"{_short(exc.message)}); {other} Or check --llm-endpoint ({t.endpoint})")
    kind = f"{status}" if status is not None else exc.category
    return Finding(False, f"{what} failed ({kind}: {_short(exc.message)}) {TRIES} times; going on: "
                          f"the server may be busy or warming up")


def explain_probe(exc: LLMRequestError, t: Target) -> Finding:
    """The model probe (GET /v1/models) failed: the same rules, named as the probe."""
    probe = replace(t, request="GET /v1/models")
    if isinstance(exc, HTTPStatusError) and exc.status in (404, 405):
        return Finding(True, f"the model probe (GET /v1/models at {t.host}, {t.user}) answered {exc.status}: "
                             f"is it an OpenAI-compatible server? (wrong locustfile for this server: "
                             f"{t.locustfile or t.backend} speaks OpenAI's API); or give --llm-model")
    if isinstance(exc, ProtocolError):
        return Finding(True, f"the model probe (GET /v1/models at {t.host}, {t.user}) did not answer JSON: "
                             f"is it an OpenAI-compatible server? (or give --llm-model)")
    return explain(exc, probe)


#: what an error's message says when the answer had no body: our raw client's "HTTP 400", the
#: openai/anthropic SDKs' "Error code: 400" (after ours: "HTTP 400: Error code: 400")
_NO_REASON = re.compile(r"^(?:(?:HTTP|Error code:) \d{3}(?::\s*(?:None|\{\})?)?\s*)+$")


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- sending --------------------------------------------------------------------------------------

def _with_one_token(settings: Settings) -> Settings:
    t = settings.timeouts
    timeouts = Timeouts(connect=min(t.connect or CONNECT_S, CONNECT_S), first_byte=min(t.first_byte or TOTAL_S, TOTAL_S),
                        read=t.read, total=min(t.total or TOTAL_S, TOTAL_S))
    return replace(settings, sampling=replace(settings.sampling, max_tokens=1), timeouts=timeouts)


def probe_user(cls: type, settings: Settings, host: str) -> Any:
    """An instance of the User class that can build and send, made without Locust's ``User``
    constructor (which would take a user number and a workload): the attributes the request
    path reads, from the run's settings for that class."""
    from llm_users.client.stream import StreamClient

    user = cls.__new__(cls)
    user.settings = _with_one_token(settings)
    user.host = host
    user.api_key = settings.api_key_for(host)  # only to a host given at start (key_scope.py)
    user.model_name = settings.model or "default"
    user.stream_client = StreamClient(user.client_base_url(host), timeouts=user.settings.timeouts,
                                      verify_tls=settings.verify_tls)
    user._sdk = None
    user._sdk_names = {}
    return user


def send_once(user: Any) -> None:
    """One request through the run's path (raw or SDK); raises the error tree on failure."""
    messages = list(PROMPT)
    spec = user.request_spec(messages, user.settings)
    from llm_users.client.stream import new_request_id

    # a UUID as every request's (a server may validate X-Request-Id: llama-cpp-python answers 400)
    rec = user.preflight_record = RequestRecord(new_request_id(), user.route.path, user.backend, user.model_name)
    if user.settings.client == "sdk":
        from llm_users.client.sdk import sdk_stream

        sdk_stream(user, spec, rec)
        return
    req = user.route.build(spec)
    req.headers.update(user.extra_headers)
    req.headers["X-Request-Id"] = rec.request_id  # as the run's requests carry it (users.py)
    user.stream_client.stream(req, user.route.parser(), rec, user.descriptor.overload_statuses)


def discover_model(user: Any) -> str:
    """GET /v1/models: the model the server serves (the run's users then ask no more)."""
    header = user.descriptor.auth_header
    headers = {}
    if user.api_key and header:  # a server that wants a key wants it here too (vLLM --api-key)
        headers[header] = f"Bearer {user.api_key}" if header == "Authorization" else user.api_key
    data = user.stream_client.fetch_json("/v1/models", headers)
    try:
        return str(data["data"][0]["id"])
    except (KeyError, IndexError, TypeError):
        raise ProtocolError("GET /v1/models did not list a model") from None


def check_class(cls: type, settings: Settings, host: str, discovered: dict[str, str]) -> Finding | None:
    """The preflight of one User class at ``host``: None when it succeeded."""
    user = probe_user(cls, settings, host)
    descriptor = user.descriptor
    target = Target(
        user=cls.__name__, locustfile=descriptor.docs.locustfile if descriptor.docs else "",
        backend=descriptor.name, endpoint=user.route.endpoint, endpoints=descriptor.endpoints,
        request=f"{user.route.build(user.request_spec(list(PROMPT), user.settings)).method} {user.route.path}",
        host=host, key_names=settings.api_key_names(), key_set=user.api_key is not None,
        limit_field=_limit_field(user.route.build(user.request_spec(list(PROMPT), user.settings)).body),
    )
    try:
        if descriptor.discover_model and settings.model is None:
            key = f"{user.stream_client.scheme}://{user.stream_client.host_header}"
            try:
                user.model_name = discovered[key] = discover_model(user)
            except LLMRequestError as e:
                finding = explain_probe(e, target)
                if finding.fatal:
                    return finding
        last: LLMRequestError | None = None
        for attempt in range(TRIES):
            if attempt:
                gevent.sleep(RETRY_WAIT_S)
            try:
                send_once(user)
                return None
            except LLMRequestError as e:
                last = e
                finding = explain(e, target, _chunks(user))
                if finding.fatal and not (type(e) in _BROKEN and attempt < TRIES - 1):
                    return finding  # a broken stream is tried again: one may be a fault of the moment
                if not isinstance(e, (TransportError, HTTPStatusError)) and e.category not in (
                        "server_error", "server_overloaded"):
                    break
        return explain(last, target, _chunks(user)) if last is not None else None
    except ConfigError as e:  # a setting the run could not use either
        return Finding(True, str(e))
    except Exception as e:  # noqa: BLE001 - a custom builder's bug is the run's to show, not the preflight's
        return Finding(False, f"the preflight of {cls.__name__} could not run ({type(e).__name__}: {e}); going on")
    finally:
        user.stream_client.close()


UNKNOWN_LIMIT = "its output-token limit"
#: the fields in which the dialects ask for an output limit (OpenAI, vLLM, Anthropic, the Responses
#: API, Gemini, Ollama, TGI)
LIMIT_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens", "maxOutputTokens", "num_predict",
                "max_new_tokens")


def _limit_field(body: bytes) -> str:
    """The field of a request body that asks for the output limit, by name (where it sits)."""
    try:
        obj = json.loads(body or b"{}")
    except ValueError:
        return UNKNOWN_LIMIT
    todo = [obj]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            for name in LIMIT_FIELDS:
                if name in node:
                    return name
            todo += node.values()
    return UNKNOWN_LIMIT


def _chunks(user: Any) -> int:
    rec = getattr(user, "preflight_record", None)
    return rec.chunks if rec is not None else 0


def run_preflight(classes: Iterable[tuple[type, Settings, str]], discovered: dict[str, str]) -> list[Finding]:
    """Every class's preflight, each distinct (backend, route, client, host, model) once; the
    fatal findings first. ``discovered``: where model probes store what they found."""
    seen: set[tuple[Any, ...]] = set()
    findings: list[Finding] = []
    for cls, settings, host in classes:
        key = (getattr(cls, "descriptor", None), settings.endpoint, settings.client, host, settings.model,
               settings.api_key_env)
        if key in seen:
            continue
        seen.add(key)
        finding = check_class(cls, settings, host, discovered)
        if finding is not None:
            findings.append(finding)
            if finding.fatal:
                break
    return sorted(findings, key=lambda f: not f.fatal)
