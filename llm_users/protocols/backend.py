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
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ..errors import ConfigError
from .base import HTTPRequest, StreamParser
from .sampling import Sampling

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
class Route:
    """One ``--llm-endpoint`` value of a backend: its path, how to build it, how to parse it.

    ``protocol`` names the wire protocol the route speaks (a backend's ``openai`` route speaks
    OpenAI's even when the backend's own is another), so stream semantics follow the route.
    """

    endpoint: str
    path: str
    build: Callable[[RequestSpec], HTTPRequest]
    parser: Callable[[], StreamParser]
    protocol: str


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
    sdk_module: str | None = None  # the official SDK's import name (``--llm-client sdk``)
    sdk_package: str | None = None  # its pip name
    strip_v1: bool = False  # accept a base URL given the SDK way (".../v1")
    discover_model: bool = False  # ask GET /v1/models when no model was given
    sends_ignore_eos: bool = False  # the request can carry ignore_eos (so output length is exact)
    docs: BackendDocs | None = None

    @property
    def default_endpoint(self) -> str:
        return self.routes[0].endpoint

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
    from .. import protocols

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
