"""Issue 9: raw and SDK mode give every fault the same outcome, category, HTTP status, token
counts and finish reason. Each simulator fault goes through both modes of every backend with
an SDK, in-process (Locust as a library), against one shared simulator."""

from __future__ import annotations

import argparse
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
from locust.env import Environment

from llm_users.users import ClaudeUser, GeminiUser, OllamaUser, VLLMUser
from tests.helpers import get_json

pytestmark = pytest.mark.slow

USERS = {"vllm": VLLMUser, "claude": ClaudeUser, "gemini": GeminiUser, "ollama": OllamaUser,
         "responses": VLLMUser}
ENDPOINTS = {"responses": "responses"}  # a backend's other route under test (default: its first)
FIELDS = ("status", "error_category", "http_status", "output_tokens", "input_tokens", "reasoning_tokens",
          "finish_reason", "partial_output_tokens", "error_code", "reasoning_chunks", "reasoning_tokens_source")
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
    "stall": ("read_timeout", 200),
    "big_frame": (None, 200),  # a 4 MiB frame mid-stream: parsed, the stream goes on  # the stall (1.5 s) outlasts the read limit (0.4 s) in every client
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
    options.setdefault("llm_endpoint", ENDPOINTS.get(backend))
    opts = argparse.Namespace(llm_client=client, llm_api_key_env="LLM_TEST_KEY", llm_model="sim-model",
                              llm_read_timeout=0.4, **options)
    env = Environment(user_classes=[cls], host=host, parsed_options=opts)
    return cls(env)


def _send(user: Any, fault: str | None) -> dict[str, Any]:
    user.extra_headers = {"X-Sim-Fault": f"{fault};after=3"} if fault else {}
    rec = user.send(MESSAGES)
    assert rec.e2e_ns is not None and rec.e2e_ns > 0  # failures too: when it became visible
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
    if category is None:
        assert raw["status"] == "ok" and raw["output_tokens"] == 12 and raw["input_tokens"] > 0
        assert raw["finish_reason"]
        # reasoning usage in each protocol's own field; Ollama's API reports none: one a thinking chunk
        # (big_frame too: the 4 MiB chunk is one token)
        assert raw["reasoning_tokens"] == 4 and raw["reasoning_chunks"] == (1 if backend == "gemini" else 4)
        assert raw["reasoning_tokens_source"] == ("estimated" if backend == "ollama" else "usage")
    else:
        assert raw["status"] == "error" and raw["output_tokens"] is None
    if backend == "gemini" and fault in ("midstream_error", "truncate", "reset", "malformed", "stall"):
        # Gemini's usageMetadata is a running count in every chunk: kept apart, not as the output
        assert raw["partial_output_tokens"] is not None and 0 < raw["partial_output_tokens"] < 12


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


# Recorded-shape transcripts (tests/fixtures/transcripts, see build.py there), replayed byte for
# byte over loopback: the first request gets the protocol's ok.http (keep-alive), the second the
# case under test, on the same connection where the client keeps it (the openai SDK closes a
# stream's connection after [DONE] without reading the chunked terminator, so it reconnects).
TRANSCRIPTS = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts"
PROTOCOL_USERS = {"openai": "vllm", "anthropic": "claude", "gemini": "gemini", "ollama": "ollama"}
CASE_EXPECTED: dict[str, tuple[str | None, int | None]] = {
    "ok": (None, 200),
    "reasoning": (None, 200),
    "big_frame": (None, 200),
    "midstream_error": ("server_error", 200),
    "empty_200": ("empty_response", 200),
    "truncated": ("stream_truncated", 200),
    "malformed": ("malformed_stream", 200),
    "reset_after_read": ("connection_reset", None),
}
TRANSCRIPT_CASES = sorted((proto, f.stem) for proto in PROTOCOL_USERS for f in (TRANSCRIPTS / proto).glob("*.http"))


def _load(proto: str, case: str) -> bytes:
    return (TRANSCRIPTS / proto / f"{case}.http").read_bytes().replace(b"@@PAD4MiB@@", b"x" * (4 << 20))


@pytest.fixture
def replay():
    """A loopback server that answers from transcripts; ``served`` counts requests read."""
    import gevent
    import gevent.socket

    class Replay:
        def __init__(self) -> None:
            self.listener = gevent.socket.socket()
            self.listener.bind(("127.0.0.1", 0))
            self.listener.listen(8)
            self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
            self.warm = b""
            self.case = b""
            self.served = 0
            self.requests: list[tuple[bytes, bytes]] = []  # (request line, body)
            self.warm_next = True
            self.greenlets = [gevent.spawn(self._accept)]

        def _accept(self) -> None:
            while True:
                conn, _ = self.listener.accept()
                self.greenlets.append(gevent.spawn(self._serve, conn))

        def _serve(self, conn: Any) -> None:
            buf = b""
            try:
                while True:
                    while b"\r\n\r\n" not in buf:
                        data = conn.recv(65536)
                        if not data:
                            return
                        buf += data
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":")[1])
                    while len(buf) < length:
                        buf += conn.recv(65536)
                    self.requests.append((head.split(b"\r\n")[0], buf[:length]))
                    buf = buf[length:]
                    self.served += 1
                    answer = self.warm if self.warm_next else self.case
                    self.warm_next = False
                    if answer == b"@@RESET@@":
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        return
                    conn.sendall(answer)
                    if b"Connection: close" in answer.partition(b"\r\n\r\n")[0]:
                        return
            finally:
                conn.close()

        def close(self) -> None:
            for g in self.greenlets:
                g.kill()
            self.listener.close()

    r = Replay()
    yield r
    r.close()


@pytest.mark.parametrize(("proto", "case"), TRANSCRIPT_CASES)
def test_raw_and_sdk_mode_agree_on_every_transcript(proto: str, case: str, replay, monkeypatch) -> None:
    monkeypatch.setenv("LLM_TEST_KEY", "sk-test")
    backend = PROTOCOL_USERS[proto]
    replay.warm = _load(proto, "ok")
    replay.case = _load(proto, case)
    outcomes = {}
    for client in ("raw", "sdk"):
        user = _user(backend, client, replay.url)
        replay.warm_next = True
        user.send(MESSAGES)  # the protocol's ok answer on a keep-alive connection
        before = replay.served
        rec = user.send(MESSAGES)
        assert replay.served - before == 1, client  # sent once, never resent
        assert rec.e2e_ns is not None and rec.e2e_ns > 0
        outcomes[client] = {f: getattr(rec, f) for f in FIELDS}
        user.on_stop()
    raw, sdk = outcomes["raw"], outcomes["sdk"]
    assert raw == sdk, (raw, sdk)
    category, status = CASE_EXPECTED[case]
    if proto == "anthropic" and category == "server_error":
        category = "server_overloaded"  # the transcript's event is overloaded_error
    assert raw["error_category"] == category and raw["http_status"] == status, raw
    if category is None:
        assert raw["status"] == "ok" and raw["output_tokens"] and raw["input_tokens"] and raw["finish_reason"]
    if case == "reasoning":
        assert raw["reasoning_tokens"] == {"openai": 5, "anthropic": 7, "gemini": 6}[proto]
    if case == "midstream_error":
        assert raw["error_code"] == {"openai": 500, "anthropic": "overloaded_error", "gemini": 500,
                                     "ollama": None}[proto]


@pytest.fixture
def full_backlog():
    """A listener whose accept queue is full: new connections hang in SYN (Linux drops them)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fill = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fill.append(s)
    yield f"http://127.0.0.1:{port}"
    for s in fill:
        s.close()
    listener.close()


@pytest.mark.parametrize("backend", list(USERS))
def test_connect_limit_applies_in_both_modes(backend: str, full_backlog, monkeypatch) -> None:
    monkeypatch.setenv("LLM_TEST_KEY", "sk-test")
    outcomes = {}
    for client in ("raw", "sdk"):
        user = _user(backend, client, full_backlog, llm_connect_timeout=0.3)
        rec = user.send(MESSAGES)
        outcomes[client] = {f: getattr(rec, f) for f in FIELDS}
        assert 0.25e9 < rec.e2e_ns < 1.0e9, (client, rec.e2e_ns)  # at the connect limit
        user.on_stop()
    assert outcomes["raw"] == outcomes["sdk"]
    assert outcomes["raw"]["error_category"] == "connect_timeout" and outcomes["raw"]["http_status"] is None


SAMPLING_FIELDS = {"openai": ("max_tokens", "temperature", "top_p", "ignore_eos", "stream_options"),
                   "anthropic": ("max_tokens", "temperature", "system"),
                   "gemini": ("generationConfig",),
                   "ollama": ("options", "system")}


@pytest.mark.parametrize(("proto", "endpoint"), [("openai", None), ("anthropic", None), ("gemini", None),
                                                 ("ollama", None), ("ollama", "generate")])
def test_both_modes_send_the_same_request(proto: str, endpoint: str | None, replay, monkeypatch) -> None:
    """One request, built once: SDK mode sends the raw request's path and sampling (Claude's
    temperature 0, Ollama's generate endpoint, vLLM's ignore_eos...)."""
    import json

    monkeypatch.setenv("LLM_TEST_KEY", "sk-test")
    replay.warm = replay.case = _load(proto, "ok")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say something."}]
    sent = {}
    for client in ("raw", "sdk"):
        user = _user(PROTOCOL_USERS[proto], client, replay.url, llm_endpoint=endpoint)
        replay.requests.clear()
        assert user.send(messages).ok
        (line, body), = replay.requests
        sent[client] = (line.split(b" ")[1].split(b"?")[0], json.loads(body))
        user.on_stop()
    (raw_path, raw_body), (sdk_path, sdk_body) = sent["raw"], sent["sdk"]
    assert raw_path == sdk_path
    assert raw_body.get("model") == sdk_body.get("model") or proto == "gemini"  # Gemini: model in the path
    for field in SAMPLING_FIELDS[proto]:
        assert raw_body.get(field) == sdk_body.get(field), (field, raw_body, sdk_body)
    if proto == "anthropic":
        assert sdk_body["temperature"] == 0
    if endpoint == "generate":
        assert sdk_path == b"/api/generate" and "prompt" in sdk_body


@pytest.fixture(scope="module")
def slow_first_token_sim():
    from llm_users.sim.launcher import start_simulator

    s = start_simulator(["--ttft-ms", "300", "--itl-ms", "1", "--output-tokens", "3"])
    yield s
    s.stop()


@pytest.mark.serial  # TTFB read within the simulator's 300 ms before its first token: run alone
@pytest.mark.parametrize("backend", list(USERS))
def test_ttfb_is_the_response_head_in_both_modes(backend: str, slow_first_token_sim, monkeypatch) -> None:
    """The simulator sends the head at once and the first token 300 ms later, as real servers
    do: TTFB is the head in both modes (SDK mode once stamped it at the first parsed chunk).
    Told by the order of events on the one monotonic clock the client and the simulator's trace
    both stamp with, not by the machine's speed: TTFB was stamped before the simulator wrote the
    first token, TTFT after it (and at least its 300 ms)."""
    monkeypatch.setenv("LLM_TEST_KEY", "sk-test")
    for client in ("raw", "sdk"):
        user = _user(backend, client, slow_first_token_sim.url)
        rec = user.send(MESSAGES)
        user.on_stop()
        assert rec.ok, rec.error_message
        trace = get_json(f"{slow_first_token_sim.url}/_sim/trace?request_id={rec.request_id}")
        first_write = trace["chunks"][0][0]
        figures = (client, rec.ttfb_ns, rec.ttft_ns, first_write - rec.t0_ns)
        assert rec.t0_ns + rec.ttfb_ns < first_write <= rec.t0_ns + rec.ttft_ns, figures
        assert rec.ttft_ns >= 300e6 - 1e6, figures
