"""The backend descriptor: one per backend, declared in its protocol module.

A :class:`Backend` says everything the rest of the project needs to know about a backend: its
endpoints (each a :class:`Route` with a request builder and a stream parser), how the API key
travels and whether one is required, the User's defaults (model, ignore_eos, the class
attributes its builder reads), which statuses mean "overloaded", which official SDK its
``--llm-client sdk`` mode uses, the server's tokenizer endpoints and environment probes, its name
in the vLLM-bench export, whether its prompt count includes cached tokens (cost), its simulator
route module, and the prose for the README's backend table. Users, SDK mode, the workload probe,
the outputs, the simulator and the docs read it; nothing else keeps a per-backend table.

The registry: the built-ins come from an explicit ordered list (:data:`BUILTINS`, the README's
order); a protocol module outside the package adds its own with :func:`register` (called when
the locustfile imports it). Adding a backend = one protocol module with its descriptor, one
locustfile whose User names it (``descriptor = ...``), one simulator route module (the plugin's
auto-started simulator loads it: ``llm-sim --routes MODULE``).
Pure: no I/O, no Locust, no SDK imports.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from llm_users.errors import ConfigError
from llm_users.protocols.base import HTTPRequest, StreamParser
from llm_users.protocols.images import Image
from llm_users.protocols.sampling import Sampling
from llm_users.protocols.server_side import ServerSide

if TYPE_CHECKING:
    from llm_users.protocols.tools import ToolSpec

Messages = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What one request is built from, the same for raw and SDK mode.

    ``options`` holds a backend's own knobs, taken from the User class (Claude's ``auth`` and
    ``anthropic_version``, Gemini's ``api_version``); builders read what they know.
    ``images`` go with the last user message, in the dialect's parts (:mod:`.images`).
    """

    model: str
    messages: Messages
    sampling: Sampling
    api_key: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    tools: ToolSpec | None = None  # --llm-tools / --llm-response-format (protocols/tools.py)
    #: embeddings and rerank routes: the batch's input texts (empty: the prompt's text, one input)
    inputs: tuple[str, ...] = ()
    images: tuple[Image, ...] = ()


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
    #: the httpx package under the SDK's client: its ``create_ssl_context`` makes the TLS
    #: context every user's client shares (``setup.httpx_kwargs["verify"]``)
    http_package: str = "httpx"


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
    ``kind``: ``chat`` (a stream of tokens), ``embed`` or ``rerank`` (one JSON answer for a batch of
    inputs, :mod:`~llm_users.protocols.embed`); ``max_inputs``: the most inputs one request carries.
    """

    endpoint: str
    path: str
    build: Callable[[RequestSpec], HTTPRequest]
    parser: Callable[[], StreamParser]
    protocol: str
    sdk: SDKBinding | None = None
    chunk_has_a_token: bool = False
    #: the least ``--llm-max-tokens`` the server accepts (OpenAI's /v1/responses: 16); less stops the run at start
    min_output_tokens: int = 1
    #: the server's own timings and request id (headers kept, where they are): server_side.py
    server_side: ServerSide | None = None
    kind: str = "chat"
    max_inputs: int | None = None


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
class Tokenizer:
    """One shape of a server's tokenize endpoint: ``POST path`` with ``body(model, text)``; the
    answer's count is read by :func:`llm_users.workload.tokenizer.token_count` (any known shape)."""

    name: str  # what the log line says ("vllm", "llama.cpp", ...)
    path: str
    body: Callable[[str, str], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Backend:
    """Everything about one backend. ``routes[0]`` is the default endpoint."""

    name: str
    routes: tuple[Route, ...]
    auth_header: str | None  # the header that carries the key ("Authorization" = Bearer)
    api_key_env: str | None  # comma-separated variable names, first set wins
    requires_api_key: bool = False  # the run stops at start when no key is set
    default_model: str | None = None  # the User's model when --llm-model is not given
    overload_statuses: frozenset[int] = frozenset({429, 503})
    strip_v1: bool = False  # accept a base URL given the SDK way (".../v1")
    discover_model: bool = False  # ask GET /v1/models when no model was given
    #: the request can carry ignore_eos (so output length is exact); also the User's default
    sends_ignore_eos: bool = False
    #: class attributes of the User handed to the builder (RequestSpec.options), with defaults
    request_options: tuple[tuple[str, Any], ...] = ()
    tokenizers: tuple[Tokenizer, ...] = ()  # tried in turn until one answers (workload/tokenizer.py)
    probes: tuple[str, ...] = ()  # GET paths telling the server's model and version (outputs/environment.py)
    bench_name: str | None = None  # ``backend`` in the vLLM-bench export (None: our name)
    #: the prompt count includes the cached prompt tokens (OpenAI-style); Anthropic counts them apart
    cached_in_prompt: bool = True
    sim_routes: str | None = None  # the simulator's route module for it (``add_routes(app)``)
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


#: The built-in backends, ``module:attribute``, in the README's order.
BUILTINS = (
    "llm_users.protocols.openai:VLLM",
    "llm_users.protocols.openai:OPENAI",
    "llm_users.protocols.tgi:TGI",
    "llm_users.protocols.ollama:OLLAMA",
    "llm_users.protocols.anthropic:CLAUDE",
    "llm_users.protocols.gemini:GEMINI",
    "llm_users.protocols.tei:TEI",
)

_registered: dict[str, Backend] = {}


@cache
def builtin_backends() -> dict[str, Backend]:
    """The built-in backends (:data:`BUILTINS`), by name, in the README's order."""
    found: dict[str, Backend] = {}
    for ref in BUILTINS:
        module, _, attr = ref.partition(":")
        b: Backend = getattr(importlib.import_module(module), attr)
        found[b.name] = b
    return found


def register(backend: Backend) -> Backend:
    """Add a backend declared outside the package (its protocol module calls this at import).
    Registering a name again replaces it (a module imported twice); a built-in name is refused."""
    if backend.name in builtin_backends():
        raise ConfigError(f"backend {backend.name!r} is built in: give yours another name")
    _registered[backend.name] = backend
    return backend


def all_backends() -> dict[str, Backend]:
    """Every backend by name: the built-ins in the README's order, then the registered ones."""
    return {**builtin_backends(), **_registered}


def find_backend(name: str | None) -> Backend | None:
    """The backend called ``name``, or None (a User class of one's own without a descriptor)."""
    if name is None:
        return None
    return builtin_backends().get(name) or _registered.get(name)


def extra_sim_routes(backends: Iterable[Backend]) -> list[str]:
    """The simulator route modules of ``backends`` that the simulator does not serve by itself
    (the built-ins' it always does): what its ``--routes`` must name for them."""
    builtin = {b.sim_routes for b in builtin_backends().values()}
    return list(dict.fromkeys(b.sim_routes for b in backends if b.sim_routes and b.sim_routes not in builtin))


def get_backend(name: str) -> Backend:
    b = find_backend(name)
    if b is None:
        raise ConfigError(f"unknown backend {name!r}: one of {', '.join(all_backends())}")
    return b


def backend_table() -> str:
    """The README's backend table, rendered from the built-in descriptors."""
    head = ("| locustfile / User | endpoint (default; `--llm-endpoint`) | auth env var "
            "| fixed sampling (temp 0, top_p 1, 512 tokens) | token counts from | cannot do |")
    rows = [head, "| --- | --- | --- | --- | --- | --- |"]
    for b in builtin_backends().values():
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
