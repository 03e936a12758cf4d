"""Embeddings and rerank routes (issue 31 item 2): what each dialect's request carries, how each
answer is read, the failures (malformed, empty, an error body, a wrong vector count), a body
past its bound (the batch lane: tests/workload/test_batch.py; the batch-size option's checks:
tests/test_settings.py)."""

from __future__ import annotations

import orjson
import pytest

from llm_users.client.request_state import RequestState
from llm_users.errors import EmptyResponse, ProtocolError, ServerStreamError, WrongResultCount
from llm_users.metrics import RequestRecord
from llm_users.protocols.backend import RequestSpec, all_backends, get_backend
from llm_users.protocols.base import ModelName, Results, ServerError, Usage
from llm_users.protocols.sampling import Sampling
from llm_users.users import (
    GeminiEmbedUser,
    OllamaEmbedUser,
    OpenAIEmbedUser,
    TEIEmbedUser,
    TEIRerankUser,
    VLLMEmbedUser,
    VLLMRerankUser,
)

SPEC = RequestSpec(model="m", messages=[{"role": "user", "content": "x"}], sampling=Sampling(), api_key="k",
                   inputs=("one two", "three four five"), options={"rerank_query": "q?"})

#: (backend, endpoint) -> (path, the body's batch field, route kind)
ROUTES = {
    ("vllm", "embeddings"): ("/v1/embeddings", ("input",), "embed"),
    ("openai", "embeddings"): ("/v1/embeddings", ("input",), "embed"),
    ("vllm", "rerank"): ("/v1/rerank", ("documents",), "rerank"),
    ("vllm", "rerank_root"): ("/rerank", ("documents",), "rerank"),
    ("ollama", "embed"): ("/api/embed", ("input",), "embed"),
    ("tei", "embed"): ("/embed", ("inputs",), "embed"),
    ("tei", "rerank"): ("/rerank", ("texts",), "rerank"),
}


def test_every_non_chat_route_is_listed_here() -> None:
    found = {(b.name, r.endpoint) for b in all_backends().values() for r in b.routes if r.kind != "chat"}
    assert found == set(ROUTES) | {("gemini", "embed"), ("gemini", "embed_content")}


@pytest.mark.parametrize(("backend", "endpoint"), list(ROUTES))
def test_each_route_sends_the_whole_batch(backend: str, endpoint: str) -> None:
    path, field, kind = ROUTES[(backend, endpoint)]
    route = get_backend(backend).route(endpoint)
    req = route.build(SPEC)
    body = orjson.loads(req.body)
    assert (req.path, route.kind) == (path, kind)
    assert body[field[0]] == ["one two", "three four five"]
    assert req.headers["Authorization"] == "Bearer k" and req.headers["Accept"] == "application/json"
    if kind == "rerank":
        assert body["query"] == "q?"
    if backend in ("vllm", "openai") and kind == "embed":
        assert body["encoding_format"] == "float" and body["model"] == "m"


def test_gemini_batch_and_single() -> None:
    gem = get_backend("gemini")
    batch = gem.route("embed").build(SPEC)
    assert batch.path == "/v1beta/models/m:batchEmbedContents" and batch.headers["x-goog-api-key"] == "k"
    assert orjson.loads(batch.body) == {"requests": [
        {"model": "models/m", "content": {"parts": [{"text": "one two"}]}},
        {"model": "models/m", "content": {"parts": [{"text": "three four five"}]}}]}
    one = gem.route("embed_content").build(RequestSpec(model="models/m", messages=[{"role": "user", "content": "hi"}],
                                                       sampling=Sampling()))
    assert one.path == "/v1beta/models/m:embedContent"
    assert orjson.loads(one.body) == {"model": "models/m", "content": {"parts": [{"text": "hi"}]}}


def test_without_a_batch_the_prompt_is_one_input() -> None:
    """The preflight and the tokenizer probe send a prompt: one input, its messages' text."""
    spec = RequestSpec(model="m", messages=[{"role": "system", "content": "a b"}, {"role": "user", "content": "c"}],
                       sampling=Sampling())
    assert orjson.loads(get_backend("vllm").route("embeddings").build(spec).body)["input"] == ["a b\nc"]


VEC = [0.1, -0.2, 0.3]
ANSWERS = {
    ("vllm", "embeddings"): {"object": "list", "model": "m", "usage": {"prompt_tokens": 5, "total_tokens": 5},
                             "data": [{"index": 0, "embedding": VEC}, {"index": 1, "embedding": VEC}]},
    ("vllm", "rerank"): {"id": "r", "model": "m", "usage": {"total_tokens": 9},
                         "results": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]},
    ("ollama", "embed"): {"model": "m", "embeddings": [VEC, VEC], "prompt_eval_count": 5, "total_duration": 1234},
    ("gemini", "embed"): {"embeddings": [{"values": VEC}, {"values": VEC}]},
    ("tei", "embed"): [VEC, VEC],
    ("tei", "rerank"): [{"index": 1, "score": 0.9}, {"index": 0, "score": 0.1}],
}


@pytest.mark.parametrize(("backend", "endpoint"), list(ANSWERS))
def test_each_answer_is_read_in_pieces(backend: str, endpoint: str) -> None:
    parser = get_backend(backend).route(endpoint).parser()
    body = orjson.dumps(ANSWERS[(backend, endpoint)])
    assert parser.feed(body[:7]) == [] and parser.feed(body[7:]) == [] and not parser.complete
    events = parser.close()
    assert parser.complete and parser.frames == 1
    results = [e for e in events if isinstance(e, Results)]
    assert len(results) == 1 and results[0].count == 2
    assert results[0].dim == (3 if endpoint != "rerank" else None)
    usage = [e.input_tokens for e in events if isinstance(e, Usage)]
    assert usage == {"vllm": [5 if endpoint == "embeddings" else 9], "ollama": [5]}.get(backend, [])
    assert [e.name for e in events if isinstance(e, ModelName)] == (["m"] if backend in ("vllm", "ollama") else [])


def test_ollama_keeps_its_server_timings() -> None:
    parser = get_backend("ollama").route("embed").parser()
    (usage,) = [e for e in parser.payload(ANSWERS[("ollama", "embed")]) if isinstance(e, Usage)]
    assert usage.server == {"total_duration": 1234}


def _state(inputs: int | None = 2) -> RequestState:
    rec = RequestRecord("r", "/v1/embeddings", "vllm", "m")
    rec.inputs = inputs
    rec.t0_ns = 1
    return RequestState(rec, get_backend("vllm").route("embeddings").parser())


def test_a_whole_answer_fills_the_record() -> None:
    st = _state()
    st.response(200, 10)
    st.handle(st.parser.payload(ANSWERS[("vllm", "embeddings")]), 20)
    st.finish(30)
    rec = st.record
    assert (rec.input_tokens, rec.input_tokens_source, rec.vector_dim, rec.e2e_ns) == (5, "usage", 3, 29)
    assert rec.ttft_ns is None and rec.output_tokens is None and rec.itl_ns == []


def test_failures_are_categorized() -> None:
    st = _state(inputs=3)  # two vectors for three inputs
    with pytest.raises(WrongResultCount, match="2 results for 3 inputs") as e:
        st.handle(st.parser.payload(ANSWERS[("vllm", "embeddings")]), 20)
    assert e.value.category == "wrong_result_count"
    st = _state()
    st.parser.feed(b'{"data": [')
    with pytest.raises(ProtocolError, match="not JSON") as e2:
        st.parser.close()
    assert e2.value.category == "malformed_stream"
    st = _state()
    st.response(200, 1)
    assert st.parser.close() == []
    with pytest.raises(EmptyResponse):
        st.finish(2)
    st = _state()
    events = st.parser.payload({"error": {"message": "busy", "type": "overloaded", "code": 503}})
    assert events == [ServerError("busy", status=503, kind="overloaded")]
    with pytest.raises(ServerStreamError) as e3:
        st.handle(events, 3)
    assert e3.value.category == "server_overloaded"
    with pytest.raises(ProtocolError, match="no 'data'"):
        _state().parser.payload({"object": "list"})


def test_embed_users() -> None:
    """The names other checks rely on: ``Embed`` (and ``Rerank``) Users importable from llm_users.users."""
    got = {c.__name__: (c.backend, c.endpoint, c.descriptor.route(c.endpoint).kind) for c in (
        VLLMEmbedUser, VLLMRerankUser, OpenAIEmbedUser, OllamaEmbedUser, GeminiEmbedUser, TEIEmbedUser, TEIRerankUser)}
    assert got == {
        "VLLMEmbedUser": ("vllm", "embeddings", "embed"), "VLLMRerankUser": ("vllm", "rerank", "rerank"),
        "OpenAIEmbedUser": ("openai", "embeddings", "embed"), "OllamaEmbedUser": ("ollama", "embed", "embed"),
        "GeminiEmbedUser": ("gemini", "embed", "embed"), "TEIEmbedUser": ("tei", "embed", "embed"),
        "TEIRerankUser": ("tei", "rerank", "rerank")}
    assert all(c.abstract for c in (VLLMEmbedUser, TEIEmbedUser, TEIRerankUser))


def test_a_body_past_the_bound_is_cut_as_it_arrives() -> None:
    """Issue 54: a whole-body answer was kept without limit until its end."""
    from llm_users.errors import ResponseTooLarge
    from llm_users.protocols.embed import JSONAnswerParser, openai_embeddings_shape

    p = JSONAnswerParser(openai_embeddings_shape, max_bytes=64 * 1024)
    p.feed(b'{"data":[{"embedding":[')
    fed = 0
    with pytest.raises(ResponseTooLarge, match=r"a whole-body answer over 64 KiB \(--llm-max-body-bytes"):
        for _ in range(100):
            p.feed(b"0.1," * 4096)
            fed += 1
    assert fed == 3 and not p.body  # cut in the piece that passed the bound, what it held let go
    whole = orjson.dumps({"data": [{"embedding": [0.5] * 9000, "index": 0}], "model": "m"})
    ok = JSONAnswerParser(openai_embeddings_shape, max_bytes=len(whole))
    ok.feed(whole)
    assert Results(1, 9000) in ok.close()
