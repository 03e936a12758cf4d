"""Embeddings and rerank: the non-streaming request kinds, for every dialect that has them.

A route here has ``kind`` ``"embed"`` or ``"rerank"`` (chat routes are ``"chat"``); its request
carries a batch of inputs (``RequestSpec.inputs``: ``--llm-batch-size`` texts from the workload,
or the prompt's text when none are given, as the preflight and the tokenizer probe send) and its
answer is one JSON body, not a stream. Shapes, from the servers' and SDKs' sources:

- OpenAI / vLLM ``POST /v1/embeddings`` ``{model, input: [..], encoding_format: "float"}`` ->
  ``{data: [{embedding, index}], model, usage: {prompt_tokens, total_tokens}}``;
- vLLM ``POST /v1/rerank`` (also ``/rerank``) ``{model, query, documents: [..]}`` ->
  ``{id, model, usage: {prompt_tokens?, total_tokens}, results: [{index, relevance_score}]}``;
- Ollama ``POST /api/embed`` ``{model, input: [..]}`` -> ``{model, embeddings: [[..]],
  prompt_eval_count, total_duration, load_duration}``;
- Gemini ``POST /{v}/models/{model}:batchEmbedContents`` ``{requests: [{model, content: {parts:
  [{text}]}}]}`` -> ``{embeddings: [{values}]}`` (what google-genai's ``embed_content`` sends);
  ``:embedContent`` ``{model, content}`` -> ``{embedding: {values}}`` (one input);
- TEI ``POST /embed`` ``{inputs: [..]}`` -> ``[[..], ..]``; ``POST /rerank`` ``{query, texts}``
  -> ``[{index, score}]``. TEI reports no token counts in the body.

:class:`JSONAnswerParser` decodes the whole body at its end and yields the usual events plus
:class:`~llm_users.protocols.base.Results` (how many vectors or scores came back; the request
state compares it with the inputs sent). A body that is not JSON is ``malformed_stream``; an
``{"error": ..}`` body on HTTP 200 is ``server_error``; a body past ``--llm-max-body-bytes``
``response_too_large``, cut as it arrives (:mod:`.limits`). SDK mode (openai ``embeddings.create``,
ollama ``embed``, google-genai ``models.embed_content``) hands the SDK's answer, dumped back to
the wire's JSON shape, to the same parser. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson

from llm_users.errors import ProtocolError
from llm_users.protocols import limits
from llm_users.protocols.backend import RequestSpec, Route, SDKBinding, SDKChunk, sdk_arguments
from llm_users.protocols.base import (
    Event,
    HTTPRequest,
    ModelName,
    Results,
    ServerError,
    Usage,
    bearer,
    error_message,
    json_post,
)
from llm_users.protocols.sdk_clients import genai_client, ollama_client, openai_client

#: What a rerank request asks when the User class does not say (its ``rerank_query``).
DEFAULT_QUERY = "Which passage answers the question best?"
RERANK_OPTIONS = (("rerank_query", DEFAULT_QUERY),)


def texts(spec: RequestSpec) -> list[str]:
    """The request's inputs: the batch, else the prompt's text (one input)."""
    if spec.inputs:
        return list(spec.inputs)
    return [message_text(spec.messages)]


def message_text(messages: list[dict[str, Any]]) -> str:
    """A prompt's messages as one input text: their contents, one per line (no role names,
    which would add tokens the workload did not ask for)."""
    return "\n".join(str(m.get("content") or "") for m in messages)


def _query(spec: RequestSpec) -> str:
    return str(spec.options.get("rerank_query") or DEFAULT_QUERY)


# builders -----------------------------------------------------------------------------------------
def build_openai_embeddings(spec: RequestSpec) -> HTTPRequest:
    body = {"model": spec.model, "input": texts(spec), "encoding_format": "float"}
    return json_post("/v1/embeddings", body, accept="application/json", auth=bearer(spec.api_key))


def vllm_rerank_builder(path: str) -> Callable[[RequestSpec], HTTPRequest]:
    def build(spec: RequestSpec) -> HTTPRequest:
        body = {"model": spec.model, "query": _query(spec), "documents": texts(spec)}
        return json_post(path, body, accept="application/json", auth=bearer(spec.api_key))

    return build


def build_ollama_embed(spec: RequestSpec) -> HTTPRequest:
    return json_post("/api/embed", {"model": spec.model, "input": texts(spec)}, accept="application/json",
                     auth=bearer(spec.api_key))


def _gemini(spec: RequestSpec) -> tuple[str, str, tuple[str, str] | None]:
    model = spec.model.removeprefix("models/")
    version = spec.options.get("api_version", "v1beta")
    return model, f"/{version}/models/{model}", ("x-goog-api-key", spec.api_key) if spec.api_key else None


def build_gemini_batch(spec: RequestSpec) -> HTTPRequest:
    model, base, auth = _gemini(spec)
    body = {"requests": [{"model": f"models/{model}", "content": {"parts": [{"text": t}]}} for t in texts(spec)]}
    return json_post(base + ":batchEmbedContents", body, accept="application/json", auth=auth)


def build_gemini_one(spec: RequestSpec) -> HTTPRequest:
    model, base, auth = _gemini(spec)
    body = {"model": f"models/{model}", "content": {"parts": [{"text": texts(spec)[0]}]}}
    return json_post(base + ":embedContent", body, accept="application/json", auth=auth)


def build_tei_embed(spec: RequestSpec) -> HTTPRequest:
    return json_post("/embed", {"inputs": texts(spec)}, accept="application/json", auth=bearer(spec.api_key))


def build_tei_rerank(spec: RequestSpec) -> HTTPRequest:
    body = {"query": _query(spec), "texts": texts(spec)}
    return json_post("/rerank", body, accept="application/json", auth=bearer(spec.api_key))


# the answer ---------------------------------------------------------------------------------------
Shape = Callable[[Any, list[Event]], None]


class JSONAnswerParser:
    """One JSON answer, decoded when the body ends (``close``) or handed over whole (``payload``).
    ``shape(obj, events)`` reads the dialect's fields; it raises ProtocolError where a field the
    answer must have is missing. ``max_bytes``: the body bound (default: the process's)."""

    __slots__ = ("shape", "body", "complete", "frames", "max_bytes")
    protocol = "JSON"

    def __init__(self, shape: Shape, max_bytes: int | None = None) -> None:
        self.shape = shape
        self.body = bytearray()
        self.complete = False
        self.frames = 0
        self.max_bytes = limits.CURRENT.body_bytes if max_bytes is None else max_bytes

    def feed(self, data: bytes) -> list[Event]:
        self.body += data
        if len(self.body) > self.max_bytes:
            self.body = bytearray()  # held no longer (a failure's traceback keeps the parser a while)
            raise limits.body_too_large(self.max_bytes)
        return []

    def close(self) -> list[Event]:
        if not self.body.strip():
            return []  # frames 0: the request state says empty_response
        try:
            obj = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            raise ProtocolError(f"the answer is not JSON: {bytes(self.body[:200])!r}") from None
        return self.payload(obj)

    def payload(self, obj: Any, name: bytes | None = None) -> list[Event]:
        self.frames += 1
        events: list[Event] = []
        if isinstance(obj, dict) and obj.get("error") is not None:
            err = obj["error"]
            status = err.get("code") if isinstance(err, dict) and isinstance(err.get("code"), int) else None
            kind = (err.get("type") or err.get("status")) if isinstance(err, dict) else obj.get("error_type")
            events.append(ServerError(error_message(err), status=status, kind=str(kind) if kind else None))
            return events
        self.shape(obj, events)
        self.complete = True
        return events


def _list(obj: Any, key: str | None) -> list[Any]:
    value = obj if key is None else (obj.get(key) if isinstance(obj, dict) else None)
    if not isinstance(value, list):
        where = f"'{key}'" if key else "a JSON array"
        raise ProtocolError(f"the answer has no {where}: {orjson.dumps(obj)[:200]!r}")
    return value


def _model(obj: Any, events: list[Event]) -> None:
    model = obj.get("model") if isinstance(obj, dict) else None
    if model:
        events.append(ModelName(str(model)))


def _openai_usage(obj: dict[str, Any], events: list[Event]) -> None:
    usage = obj.get("usage")
    if isinstance(usage, dict):
        n = usage.get("prompt_tokens")
        events.append(Usage(input_tokens=n if isinstance(n, int) else usage.get("total_tokens")))


def openai_embeddings_shape(obj: Any, events: list[Event]) -> None:
    data = _list(obj, "data")
    _model(obj, events)
    _openai_usage(obj, events)
    events.append(Results(len(data), _dim(data[0].get("embedding") if data and isinstance(data[0], dict) else None)))


def vllm_rerank_shape(obj: Any, events: list[Event]) -> None:
    results = _list(obj, "results")
    _model(obj, events)
    _openai_usage(obj, events)
    events.append(Results(len(results)))


OLLAMA_SERVER_FIELDS = ("total_duration", "load_duration", "prompt_eval_duration")


def ollama_embed_shape(obj: Any, events: list[Event]) -> None:
    vectors = _list(obj, "embeddings")
    _model(obj, events)
    server = {k: obj[k] for k in OLLAMA_SERVER_FIELDS if isinstance(obj.get(k), int)} or None
    n = obj.get("prompt_eval_count")
    if isinstance(n, int) or server:
        events.append(Usage(input_tokens=n if isinstance(n, int) else None, server=server))
    events.append(Results(len(vectors), _dim(vectors[0] if vectors else None)))


def gemini_embed_shape(obj: Any, events: list[Event]) -> None:
    if isinstance(obj, dict) and isinstance(obj.get("embedding"), dict):  # :embedContent
        vectors = [obj["embedding"]]
    else:
        vectors = _list(obj, "embeddings")
    usage = obj.get("usageMetadata") or obj.get("usage_metadata")
    if isinstance(usage, dict):
        n = usage.get("promptTokenCount", usage.get("prompt_token_count"))
        if isinstance(n, int):
            events.append(Usage(input_tokens=n))
    first = vectors[0] if vectors and isinstance(vectors[0], dict) else None
    events.append(Results(len(vectors), _dim(first.get("values") if first else None)))


def tei_embed_shape(obj: Any, events: list[Event]) -> None:
    vectors = _list(obj, None)
    events.append(Results(len(vectors), _dim(vectors[0] if vectors else None)))


def tei_rerank_shape(obj: Any, events: list[Event]) -> None:
    events.append(Results(len(_list(obj, None))))


def _dim(vector: Any) -> int | None:
    return len(vector) if isinstance(vector, list) else None


def parser_for(shape: Shape) -> Callable[[], JSONAnswerParser]:
    def make() -> JSONAnswerParser:
        return JSONAnswerParser(shape)

    return make


# SDK mode -----------------------------------------------------------------------------------------
def _openai_embed(client: Any, spec: RequestSpec, body: dict[str, Any]) -> Iterator[SDKChunk]:
    create = client.embeddings.create
    yield create(**sdk_arguments(create, body)).to_dict(), None


def _ollama_embed(client: Any, spec: RequestSpec, body: dict[str, Any]) -> Iterator[SDKChunk]:
    yield client.embed(**body).model_dump(exclude_none=True), None


def _genai_embed(client: Any, spec: RequestSpec, body: dict[str, Any]) -> Iterator[SDKChunk]:
    contents = [r["content"] for r in body["requests"]]
    resp = client.models.embed_content(model=spec.model.removeprefix("models/"), contents=contents)
    yield resp.model_dump(mode="json", by_alias=True, exclude_none=True), None


OPENAI_SDK = SDKBinding("openai", "openai", openai_client, _openai_embed, http_package="httpx2")
OLLAMA_SDK = SDKBinding("ollama", "ollama", ollama_client, _ollama_embed)
GENAI_SDK = SDKBinding("google.genai", "google-genai", genai_client, _genai_embed)


# the routes the descriptors list ------------------------------------------------------------------
def openai_embeddings_route() -> Route:
    return Route("embeddings", "/v1/embeddings", build_openai_embeddings, parser_for(openai_embeddings_shape),
                 protocol="openai", sdk=OPENAI_SDK, kind="embed")


def vllm_rerank_routes() -> tuple[Route, ...]:
    return (Route("rerank", "/v1/rerank", vllm_rerank_builder("/v1/rerank"), parser_for(vllm_rerank_shape),
                  protocol="openai", kind="rerank"),
            Route("rerank_root", "/rerank", vllm_rerank_builder("/rerank"), parser_for(vllm_rerank_shape),
                  protocol="openai", kind="rerank"))


def ollama_embed_route() -> Route:
    return Route("embed", "/api/embed", build_ollama_embed, parser_for(ollama_embed_shape), protocol="ollama",
                 sdk=OLLAMA_SDK, kind="embed")


def gemini_embed_routes() -> tuple[Route, ...]:
    return (Route("embed", "/v1beta/models/{model}:batchEmbedContents", build_gemini_batch,
                  parser_for(gemini_embed_shape), protocol="gemini", sdk=GENAI_SDK, kind="embed"),
            Route("embed_content", "/v1beta/models/{model}:embedContent", build_gemini_one,
                  parser_for(gemini_embed_shape), protocol="gemini", kind="embed", max_inputs=1))


def tei_routes() -> tuple[Route, ...]:
    return (Route("embed", "/embed", build_tei_embed, parser_for(tei_embed_shape), protocol="tei", kind="embed"),
            Route("rerank", "/rerank", build_tei_rerank, parser_for(tei_rerank_shape), protocol="tei",
                  kind="rerank"))
