"""Issue 9: raw and SDK mode give every fault the same outcome, category, HTTP status, token
counts and finish reason. Each simulator fault goes through both modes of every backend with
an SDK, in-process (Locust as a library), against one shared simulator."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from locust.env import Environment

from llm_users.users import ClaudeUser, GeminiUser, OllamaUser, VLLMUser
from tests.helpers import get_json

pytestmark = pytest.mark.slow

USERS = {"vllm": VLLMUser, "claude": ClaudeUser, "gemini": GeminiUser, "ollama": OllamaUser}
FIELDS = ("status", "error_category", "http_status", "output_tokens", "input_tokens", "reasoning_tokens",
          "finish_reason")
MESSAGES = [{"role": "user", "content": "Say something."}]

# fault -> (error_category, http_status) both modes must give; None: the request succeeds
EXPECTED: dict[str | None, tuple[str | None, int | None]] = {
    None: (None, 200),
    "midstream_error": ("server_error", 200),
    "malformed": ("malformed_stream", 200),
    "truncate": ("stream_truncated", 200),
    "reset": ("connection_reset", 200),
    "empty_200": ("empty_response", 200),
    "http_429": ("http_429", 429),
    "http_500": ("http_500", 500),
    "reset_after_read": ("connection_reset", None),
    "stall": ("read_timeout", 200),  # the stall (1.5 s) outlasts the read limit (0.4 s) in every client
}


@pytest.fixture(scope="module")
def sim(request):
    from llm_users.sim.launcher import start_simulator

    s = start_simulator(["--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "12", "--seed", "3",
                         "--stall-ms", "1500", "--reasoning-tokens", "4"])
    yield s
    s.stop()


@pytest.fixture
def silent_server():
    """Accepts, reads the request, never answers (a server stuck before its response head)."""
    import gevent
    import gevent.socket

    listener = gevent.socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held = []

    def serve() -> None:
        while True:
            conn, _ = listener.accept()
            conn.recv(65536)
            held.append(conn)

    g = gevent.spawn(serve)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    g.kill()
    for c in held:
        c.close()
    listener.close()


def _user(backend: str, client: str, host: str, **options: Any) -> Any:
    base = USERS[backend]
    cls = type(f"Test{backend}{client}", (base,), {"abstract": False, "host": host, "warmup_requests": 0})
    opts = argparse.Namespace(llm_client=client, llm_api_key_env="LLM_TEST_KEY", llm_model="sim-model",
                              llm_read_timeout=0.4, **options)
    env = Environment(user_classes=[cls], host=host, parsed_options=opts)
    return cls(env)


def _send(user: Any, fault: str | None) -> dict[str, Any]:
    user.extra_headers = {"X-Sim-Fault": f"{fault};after=3"} if fault else {}
    rec = user.send(MESSAGES)
    return {f: getattr(rec, f) for f in FIELDS}


@pytest.mark.parametrize("fault", list(EXPECTED))
@pytest.mark.parametrize("backend", list(USERS))
def test_raw_and_sdk_mode_agree_on_every_fault(backend: str, fault: str | None, sim, monkeypatch) -> None:
    monkeypatch.setenv("LLM_TEST_KEY", "sk-test")
    outcomes = {}
    for client in ("raw", "sdk"):
        user = _user(backend, client, sim.url)
        _send(user, None)  # the connection is now a reused keep-alive one
        before = get_json(sim.url + "/_sim/stats")
        outcomes[client] = _send(user, fault)
        after = get_json(sim.url + "/_sim/stats")
        assert after["started"] - before["started"] == 1, (client, before, after)  # sent once, never again
        user.on_stop()
    raw, sdk = outcomes["raw"], outcomes["sdk"]
    assert raw == sdk, (raw, sdk)
    category, status = EXPECTED[fault]
    if backend == "claude" and category == "server_error":
        category = "server_overloaded"  # the simulator's Claude error event is overloaded_error
    assert raw["error_category"] == category and raw["http_status"] == status, raw
    if fault is None:
        assert raw["status"] == "ok" and raw["output_tokens"] == 12 and raw["input_tokens"] > 0
        assert raw["finish_reason"]
        # reasoning usage in each protocol's own field (Ollama's API reports none)
        assert raw["reasoning_tokens"] == (None if backend == "ollama" else 4)
    else:
        assert raw["status"] == "error" and raw["output_tokens"] is None


@pytest.mark.parametrize("backend", list(USERS))
def test_first_byte_limit_applies_in_both_modes(backend: str, silent_server, monkeypatch) -> None:
    """The first-byte limit (and, in test_raw_and_sdk_mode_agree_on_every_fault[stall], the
    read-gap limit) holds in every SDK client as in raw mode, not only a total timeout."""
    monkeypatch.setenv("LLM_TEST_KEY", "sk-test")
    outcomes = {}
    for client in ("raw", "sdk"):
        user = _user(backend, client, silent_server, llm_first_byte_timeout=0.3)
        rec = user.send(MESSAGES)
        outcomes[client] = {f: getattr(rec, f) for f in FIELDS}
        assert 0.25e9 < rec.e2e_ns < 1.0e9, (client, rec.e2e_ns)  # at the limit (the total is 600 s)
        user.on_stop()
    assert outcomes["raw"] == outcomes["sdk"]
    assert outcomes["raw"]["error_category"] == "first_byte_timeout"
