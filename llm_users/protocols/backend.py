"""The backend descriptor: one per backend, declared in its protocol module.

A :class:`Backend` says everything the rest of the project needs to know about a backend:
its endpoints (each a :class:`Route` with a request builder and a stream parser), how the API
key travels, which statuses mean "overloaded", which official SDK its ``--llm-client sdk`` mode
uses, and the prose for the README's backend table. Users, SDK mode and the docs read it;
nothing else keeps a per-backend table.

Adding a backend = one protocol module that defines ``BACKENDS`` (this file finds it), one
locustfile with a User whose ``descriptor`` is the new backend, one simulator route module.
Pure: no I/O, no Locust, no SDK imports.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from llm_users.errors import ConfigError
from llm_users.protocols.base import HTTPRequest, StreamParser
from llm_users.protocols.sampling import Sampling

Messages = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What one request is built from, the same for raw and SDK mode.

    ``options`` holds a backend's own knobs, taken from the User class (Claude's ``auth`` and
    ``anthropic_version``, Gemini's ``api_version``); builders read what they know.
    """

    model: str
    messages: Messages
    sampling: Sampling
    api_key: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SDKSetup:
    """What an SDK client is made from: our base URL and key, and the keyword arguments of the
    httpx(-compatible) client that carries our time limits and stamps. SDKs use different
    httpx packages (httpx, httpx2), so each binding makes the client with its SDK's own class:
    ``client_class(**setup.httpx_kwargs)``."""

    base_url: str
    api_key: str | None
    httpx_kwargs: Mapping[str, Any]
    options: Mapping[str, Any] = field(default_factory=dict)


#: (payload in the wire's JSON shape, SSE event name or None)
SDKChunk = tuple[dict[str, Any], "bytes | None"]


@dataclass(frozen=True, slots=True)
class SDKBinding:
    """A route's ``--llm-client sdk`` mode: which SDK, how to make its client, and the call.

    ``stream(client, spec, body)`` sends the request whose JSON ``body`` the route's builder
    made (so both modes send the same settings) through the SDK and yields each chunk the SDK
    gives back, dumped to the wire's JSON shape, for the route's parser. No SDK import here:
    the SDK module comes in as an argument."""

    module: str  # import name
    package: str  # pip name
    client: Callable[[Any, SDKSetup], Any]
    stream: Callable[[Any, RequestSpec, dict[str, Any]], Iterator[SDKChunk]]


def sdk_arguments(call: Callable[..., Any], body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as keyword arguments of an SDK method: the fields its signature names go as
    they are, the rest in ``extra_body`` (which these SDKs merge into the JSON they send), so
    the SDK sends what raw mode sends even where its signature lags the API."""
    params = _parameters(call)
    known = {k: v for k, v in body.items() if k in params}
    extra = {k: v for k, v in body.items() if k not in params}
    if extra:
        known["extra_body"] = extra
    return known


def _parameters(call: Callable[..., Any]) -> frozenset[str]:
    key = getattr(call, "__func__", call)
    cached = _SIGNATURES.get(key)
    if cached is None:
        cached = _SIGNATURES[key] = frozenset(inspect.signature(call).parameters)
    return cached


_SIGNATURES: dict[Any, frozenset[str]] = {}


@dataclass(frozen=True, slots=True)
class Route:
    """One ``--llm-endpoint`` value of a backend: its path, how to build it, how to parse it.

    ``protocol`` names the wire protocol the route speaks (a backend's ``openai`` route speaks
    OpenAI's even when the backend's own is another), so stream semantics follow the route.
    ``chunk_has_a_token``: every token-bearing chunk carries at least one token the server's
    output count includes (OpenAI-style, TGI and Ollama streams; not Gemini, whose count leaves
    thoughts out), so a count below the chunk count cannot be true (:func:`~llm_users.metrics.check_usage`).
    """

    endpoint: str
    path: str
    build: Callable[[RequestSpec], HTTPRequest]
    parser: Callable[[], StreamParser]
    protocol: str
    sdk: SDKBinding | None = None
    chunk_has_a_token: bool = False


@dataclass(frozen=True, slots=True)
class BackendDocs:
    """The cells of the README's backend table (see :func:`backend_table`)."""

    locustfile: str
    user: str
    auth_env: str
    sampling: str
    tokens: str
    cannot: str


@dataclass(frozen=True, slots=True)
class Backend:
    """Everything about one backend. ``routes[0]`` is the default endpoint."""

    name: str
    routes: tuple[Route, ...]
    auth_header: str | None  # the header that carries the key ("Authorization" = Bearer)
    api_key_env: str | None  # comma-separated variable names, first set wins
    overload_statuses: frozenset[int] = frozenset({429, 503})
    strip_v1: bool = False  # accept a base URL given the SDK way (".../v1")
    discover_model: bool = False  # ask GET /v1/models when no model was given
    sends_ignore_eos: bool = False  # the request can carry ignore_eos (so output length is exact)
    docs: BackendDocs | None = None

    @property
    def default_endpoint(self) -> str:
        return self.routes[0].endpoint

    @property
    def sdk_module(self) -> str | None:
        """The official SDK of the default route (``--llm-client sdk``), if it has one."""
        sdk = self.routes[0].sdk
        return sdk.module if sdk else None

    @property
    def endpoints(self) -> tuple[str, ...]:
        return tuple(r.endpoint for r in self.routes)

    def route(self, endpoint: str | None) -> Route:
        """The route for an ``--llm-endpoint`` value (None: the default), or a ConfigError
        naming the ones there are."""
        if endpoint is None:
            return self.routes[0]
        for r in self.routes:
            if r.endpoint == endpoint:
                return r
        raise ConfigError(f"--llm-endpoint for {self.name} must be one of {', '.join(self.endpoints)}, "
                          f"got {endpoint!r}")

    def base_url(self, host: str) -> str:
        """The base URL our paths go under (they carry /v1 themselves where they need it)."""
        host = host.rstrip("/")
        return host[:-3] if self.strip_v1 and host.endswith("/v1") else host


@cache
def all_backends() -> dict[str, Backend]:
    """Every backend declared by a protocol module (``BACKENDS``), by name, in table order."""
    from llm_users import protocols

    found: list[Backend] = []
    for info in pkgutil.iter_modules(protocols.__path__):
        module = importlib.import_module(f"{protocols.__name__}.{info.name}")
        found.extend(getattr(module, "BACKENDS", ()))
    found.sort(key=lambda b: _ORDER.index(b.name) if b.name in _ORDER else len(_ORDER))
    return {b.name: b for b in found}


_ORDER = ("vllm", "openai", "tgi", "ollama", "claude", "gemini")  # the README's order; new ones last


def get_backend(name: str) -> Backend:
    try:
        return all_backends()[name]
    except KeyError:
        raise ConfigError(f"unknown backend {name!r}: one of {', '.join(all_backends())}") from None


def backend_table() -> str:
    """The README's backend table, rendered from the descriptors."""
    head = ("| locustfile / User | endpoint (default; `--llm-endpoint`) | auth env var "
            "| fixed sampling (temp 0, top_p 1, 512 tokens) | token counts from | cannot do |")
    rows = [head, "| --- | --- | --- | --- | --- | --- |"]
    for b in all_backends().values():
        d = b.docs
        if d is None:
            continue
        others = [f"`{r.endpoint}` = `{r.path}`" for r in b.routes[1:]]
        ep = f"`{b.routes[0].path}`"
        if len(b.routes) > 1:
            ep += f" (`{b.routes[0].endpoint}`, " + ", ".join(others) + ")"
        rows.append(f"| `{d.locustfile}` / `{d.user}` | {ep} | {d.auth_env} | {d.sampling} | {d.tokens} "
                    f"| {d.cannot} |")
    return "\n".join(rows)
