"""The simulator with images over HTTP: a bad image is a 400 (in-stream on TGI's /generate_stream)
in the route's own error shape naming what is wrong, nothing is counted for it; a good one adds its tokens to the prompt
count the answer reports, and --prefill-us-per-token charges them in TTFT (ground truth)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest

from llm_users.protocols.backend import RequestSpec, get_backend
from llm_users.protocols.sampling import Sampling
from llm_users.sim.images import image_tokens
from llm_users.sim.launcher import start_simulator
from llm_users.workload.images import SyntheticImages

PREFILL_US = 50.0


@pytest.fixture(scope="module")
def sim() -> Any:
    with start_simulator(["--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "2",
                          "--prefill-us-per-token", str(PREFILL_US)]) as s:
        yield s


def _post(url: str, path: str, body: dict[str, Any], rid: str) -> tuple[int, Any]:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "X-Request-Id": rid,
                                          "x-api-key": "k", "anthropic-version": "2023-06-01"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _body(backend: str, endpoint: str | None, images) -> tuple[str, dict[str, Any]]:
    route = get_backend(backend).route(endpoint)
    req = route.build(RequestSpec("m", [{"role": "user", "content": "look at this"}], Sampling(max_tokens=2),
                                  api_key="k", images=images))
    return req.path, json.loads(req.body)


CASES = [("vllm", "chat"), ("claude", None), ("gemini", None), ("ollama", "chat"), ("ollama", "generate"),
         ("tgi", "generate_stream"), ("tgi", "chat")]


@pytest.mark.parametrize(("backend", "endpoint"), CASES)
def test_images_count_in_the_prompt_and_in_ttft(sim, backend, endpoint) -> None:
    images = SyntheticImages(2, (100, 60), seed=2).for_request(0, 1)
    path, body = _body(backend, endpoint, images)
    rid = uuid.uuid4().hex
    status, _ = _post(sim.url, path, body, rid)
    assert status == 200
    trace = json.loads(urllib.request.urlopen(sim.url + "/_sim/trace?request_id=" + rid, timeout=10).read())
    t = next(r for r in (trace if isinstance(trace, list) else [trace]) if r["request_id"] == rid)
    per_image = image_tokens(100, 60)  # 112x56 after the resize: 4x2 blocks + 2
    assert per_image == 10
    assert (t["images"], t["image_tokens"]) == (2, 2 * per_image)
    assert t["input_tokens"] == 3 + 2 * per_image  # "look at this" + the images
    assert (t["ttft_target_ns"] - t["arrival_ns"]) / 1e6 == pytest.approx(5 + PREFILL_US / 1000 * t["input_tokens"],
                                                                          abs=0.01)


@pytest.mark.parametrize(("backend", "endpoint"), CASES)
def test_a_bad_image_is_refused_in_the_routes_own_shape(sim, backend, endpoint) -> None:
    images = SyntheticImages(1, (16, 16), seed=0).for_request(0, 1)
    path, body = _body(backend, endpoint, images)
    raw = json.dumps(body).replace(images[0].data, "AAAA" + images[0].data[8:])  # the PNG signature broken
    status, answer = _post(sim.url, path, json.loads(raw), uuid.uuid4().hex)
    # TGI's /generate_stream says a validation error in the stream, on HTTP 200, as TGI does
    assert status == (200 if endpoint == "generate_stream" else 400), answer
    message = answer.decode() if isinstance(answer, bytes) else json.dumps(answer)
    assert "not a PNG, JPEG, GIF or WebP image" in message, answer
    shape = {"vllm": "message", "claude": "invalid_request_error", "gemini": "INVALID_ARGUMENT", "ollama": "error",
             "tgi": "error"}[backend]
    assert shape in message, answer
