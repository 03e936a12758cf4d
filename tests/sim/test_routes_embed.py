"""The simulator's embeddings and rerank routes (issue 31 item 2): the official SDKs read its
answers (openai ``embeddings.create``, ollama ``embed``, google-genai ``models.embed_content``),
the cost model holds (``base + per-token x T`` in ``--embed-max-batch`` slots, a FIFO behind),
and our own client turns each fault into its category."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import ollama
import openai
import orjson
import pytest
from google import genai
from google.genai import types

from llm_users.client.stream import StreamClient
from llm_users.errors import LLMRequestError
from llm_users.metrics import RequestRecord
from llm_users.protocols.backend import RequestSpec, get_backend
from llm_users.protocols.sampling import Sampling
from llm_users.sim.launcher import SimProcess, start_simulator
from tests.helpers import get_json

BASE_MS, TOKEN_MS, SLOTS, DIM = 40.0, 0.5, 2, 8
TEXTS = ["alpha beta gamma", "delta epsilon", "zeta eta theta iota kappa lambda"]  # 3 + 2 + 6 = 11 tokens


@pytest.fixture(scope="module")
def esim() -> Iterator[SimProcess]:
    with start_simulator(["--embed-base-ms", str(BASE_MS), "--embed-token-ms", str(TOKEN_MS), "--embed-max-batch",
                          str(SLOTS), "--embed-dim", str(DIM), "--seed", "3"]) as s:
        yield s
        errors = s.stderr_text()
    assert "Traceback" not in errors, errors


def test_openai_sdk_reads_embeddings(esim: SimProcess) -> None:
    client = openai.OpenAI(base_url=esim.url + "/v1", api_key="x", max_retries=0, timeout=10)
    resp = client.embeddings.create(model="e5", input=TEXTS, encoding_format="float")
    assert [d.index for d in resp.data] == [0, 1, 2] and all(len(d.embedding) == DIM for d in resp.data)
    assert resp.usage.prompt_tokens == 11 and resp.usage.total_tokens == 11 and resp.model == "e5"
    # the SDK's default asks for base64 and decodes it itself: a float answer it still reads
    default = client.embeddings.create(model="e5", input="one two")
    assert len(default.data) == 1 and len(default.data[0].embedding) == DIM


def test_ollama_sdk_reads_embed(esim: SimProcess) -> None:
    resp = ollama.Client(host=esim.url, timeout=10).embed(model="nomic-embed-text", input=TEXTS)
    assert len(resp.embeddings) == 3 and all(len(v) == DIM for v in resp.embeddings)
    assert resp.prompt_eval_count == 11 and resp.total_duration >= BASE_MS * 1e6


def test_genai_sdk_reads_batch_embed_contents(esim: SimProcess) -> None:
    client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=esim.url, api_version="v1beta",
                                                                      timeout=10_000))
    resp = client.models.embed_content(model="gemini-embedding-001", contents=TEXTS)
    assert resp.embeddings is not None and len(resp.embeddings) == 3
    assert all(len(e.values or []) == DIM for e in resp.embeddings)


def _post(url: str, path: str, body: object, headers: dict[str, str] | None = None) -> tuple[int, object, float]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url + path, data=orjson.dumps(body), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            data = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        data, status = e.read(), e.code
    return status, orjson.loads(data) if data else None, (time.perf_counter() - t0) * 1000


def test_rerank_shapes_vllm_and_tei(esim: SimProcess) -> None:
    status, vllm, _ = _post(esim.url, "/v1/rerank", {"model": "bge", "query": "q", "documents": TEXTS})
    assert status == 200 and vllm["usage"]["prompt_tokens"] == 11 + 3 and vllm["model"] == "bge"
    scores = [r["relevance_score"] for r in vllm["results"]]
    assert scores == sorted(scores, reverse=True) and sorted(r["index"] for r in vllm["results"]) == [0, 1, 2]
    status, tei, _ = _post(esim.url, "/rerank", {"query": "q", "texts": TEXTS})
    assert status == 200 and sorted(r["index"] for r in tei) == [0, 1, 2] and set(tei[0]) == {"index", "score"}
    status, root, _ = _post(esim.url, "/rerank", {"model": "bge", "query": "q", "documents": TEXTS})
    assert status == 200 and "results" in root  # vLLM's /rerank: told apart from TEI's by the body
    status, vecs, _ = _post(esim.url, "/embed", {"inputs": TEXTS})
    assert status == 200 and len(vecs) == 3 and len(vecs[0]) == DIM
    status, err, _ = _post(esim.url, "/v1/rerank", {"model": "bge", "query": "q"})
    assert status == 400 and "documents" in err["error"]["message"]


@pytest.mark.serial  # service times to a few ms: a loaded machine adds 16 ms (CI r41)
def test_cost_model_and_slots(esim: SimProcess) -> None:
    """One request alone takes base + per-token x T; 2 x SLOTS at once take two service times."""
    service = BASE_MS + TOKEN_MS * 11
    _, _, alone = _post(esim.url, "/v1/embeddings", {"model": "e5", "input": TEXTS})
    assert service - 2 <= alone <= service + 15, (alone, service)
    t0 = time.perf_counter()  # every end from one start: the queued ones end a service time after the first

    def end_ms(_: int) -> float:
        _post(esim.url, "/v1/embeddings", {"model": "e5", "input": TEXTS})
        return (time.perf_counter() - t0) * 1000

    with ThreadPoolExecutor(2 * SLOTS) as pool:
        ends = sorted(pool.map(end_ms, range(2 * SLOTS)))
    assert all(service - 2 <= t <= service + 25 for t in ends[:SLOTS]), (ends, service)  # the first SLOTS
    assert all(2 * service - 2 <= t <= 2 * service + 30 for t in ends[SLOTS:]), (ends, service)  # queued once


def _send(esim: SimProcess, backend: str, endpoint: str, headers: dict[str, str]) -> RequestRecord:
    route = get_backend(backend).route(endpoint)
    req = route.build(RequestSpec(model="m", messages=[], sampling=Sampling(), inputs=tuple(TEXTS)))
    req.headers.update(headers)
    rec = RequestRecord("r", req.name, backend, "m")
    rec.inputs = len(TEXTS)
    client = StreamClient(esim.url)
    try:
        client.stream(req, route.parser(), rec)
    except LLMRequestError as e:
        rec.error_category = e.category
    finally:
        client.close()
    return rec


@pytest.mark.parametrize(("backend", "endpoint"), [("vllm", "embeddings"), ("ollama", "embed"), ("gemini", "embed"),
                                                   ("tei", "embed"), ("vllm", "rerank"), ("tei", "rerank")])
def test_our_client_reads_each_route_and_categorizes_its_faults(esim: SimProcess, backend: str, endpoint: str) -> None:
    ok = _send(esim, backend, endpoint, {})
    assert ok.error_category is None and ok.http_status == 200 and ok.ttft_ns is None
    assert ok.e2e_ns is not None and ok.e2e_ns >= BASE_MS * 1e6
    tokens = 11 + (3 if endpoint == "rerank" else 0)  # a rerank pair counts the query too ("q" is empty here)
    assert ok.input_tokens == {"vllm": tokens if endpoint == "embeddings" else tokens + 3 * 5,
                               "ollama": 11}.get(backend), ok
    faults = {"http_503": "http_503", "http_429": "http_429", "malformed": "malformed_stream",
              "empty_200": "empty_response"}
    for fault, category in faults.items():
        assert _send(esim, backend, endpoint, {"X-Sim-Fault": fault}).error_category == category, fault
    assert _send(esim, backend, endpoint, {"X-Sim-Vectors": "2"}).error_category == "wrong_result_count"


def test_the_simulator_counts_embed_requests(esim: SimProcess) -> None:
    stats = get_json(esim.url + "/_sim/stats")
    assert stats["by_route"]["/v1/embeddings"]["served"] >= 2 + 2 * SLOTS
    assert stats["faults"]["malformed"] >= 6


def test_usage_zero_reports_no_input_tokens() -> None:
    """(The User then puts the workload's target in, as for chat: metrics.check_usage.)"""
    with start_simulator(["--usage-zero", "input", "--embed-base-ms", "1"]) as s:
        status, body, _ = _post(s.url, "/v1/embeddings", {"model": "e5", "input": TEXTS})
        assert status == 200 and body["usage"] == {"prompt_tokens": 0, "total_tokens": 0} and len(body["data"]) == 3
        rec = _send(s, "ollama", "embed", {})
    assert rec.error_category is None and rec.input_tokens == 0 and rec.input_tokens_source == "usage"
