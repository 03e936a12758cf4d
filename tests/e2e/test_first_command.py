"""Issue 53: what a user reads on the first command is what ran.

- An empty ``--host`` (``--host "$SERVER"`` with the variable unset, ``LOCUST_HOST=``) is refused
  in one line; before, it started the embedded simulator and measured that as "no --host given".
- A run without ``--llm-report`` does not say its interrupted requests are "kept in requests.jsonl".
- Every request id sent is a UUID (the preflight's too), and a 400 with an empty body is said as
  such, not blamed on the model or the sampling options.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.helpers import LOCUSTFILES, run_locust

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("how", ["--host", "LOCUST_HOST"])
def test_an_empty_host_is_refused_not_replaced_by_the_simulator(how: str) -> None:
    args, env = (["--host", ""], None) if how == "--host" else ([], {"LOCUST_HOST": ""})
    proc = run_locust("vllm.py", *args, "-u", "1", "-t", "30s", "--llm-prometheus-port", "0", env=env, timeout=60)
    out = proc.stdout + proc.stderr
    lines = [ln for ln in out.splitlines() if ln.startswith("locust-llm:")]
    assert proc.returncode == 1, out[-2000:]
    assert lines == ["locust-llm: --host is empty (given without a value, or LOCUST_HOST set to nothing): give the "
                     "server's URL, e.g. --host http://localhost:8000, or leave --host out to run against the "
                     "embedded simulator"], out[-2000:]
    assert "started the embedded simulator" not in out and "Traceback" not in out


def test_without_a_report_no_line_names_requests_jsonl() -> None:
    # the simulator's default 512-token answers outlast a 2 s run: every request is interrupted
    proc = run_locust("vllm.py", "-u", "2", "-r", "2", "-t", "2s", "--llm-prometheus-port", "0", timeout=60)
    out = proc.stdout + proc.stderr
    assert "interrupted: 2 requests were in flight when the run stopped" in out, out[-2000:]
    assert "requests.jsonl" not in out


class _Endless(BaseHTTPRequestHandler):
    """A server that ignores the output limit: one token chunk every 50 ms until the client goes."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()  # HTTP/1.0: the body runs until the connection closes
        chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
                 "choices": [{"index": 0, "delta": {"content": "la "}, "finish_reason": None}]}
        line = b"data: " + json.dumps(chunk).encode() + b"\n\n"
        try:
            for _ in range(2000):
                self.wfile.write(line)
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:
            pass

    def log_message(self, *_: object) -> None:
        pass


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_a_preflight_that_never_ends_says_the_output_limit_was_not_honoured(client: str) -> None:
    """Issue 53 item 12: a server that ignores the dialect's output limit held the start for three
    tries of 60 s, then said "the server may be busy". Each try is bounded (here by --llm-timeout)
    and the line names the field the server ignored."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proc = run_locust(LOCUSTFILES[client], "--host", f"http://127.0.0.1:{server.server_address[1]}", "-u", "1",
                          "-t", "1s", "--llm-model", "m", "--llm-timeout", "2", "--llm-prometheus-port", "0",
                          "--llm-client", client, env={"OPENAI_API_KEY": "sk-any"}, timeout=90)
    finally:
        server.shutdown()
        server.server_close()
    out = proc.stdout + proc.stderr
    field = "max_tokens" if client == "raw" else "max_completion_tokens"
    lines = [ln for ln in out.splitlines() if "asked for 1 output token and was still streaming" in ln]
    assert len(lines) == 1, out[-3000:]
    assert f"the server does not honour the output limit this dialect sends ({field})" in lines[0], lines[0]
    assert "may be busy" not in out


class _Validating(BaseHTTPRequestHandler):
    """A server that validates what it is sent, as llama-cpp-python's does its X-Request-Id (a
    UUID, else 400 with an empty body); ``refuse_all``: every request gets that 400."""

    refuse_all = False
    ids: list[str] = []  # noqa: RUF012 - one list per server class, made in the fixture

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        rid = self.headers.get("X-Request-Id") or ""
        self.ids.append(rid)
        try:
            uuid.UUID(rid)
            valid = not self.refuse_all
        except ValueError:
            valid = False
        if not valid:
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
                 "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
        last = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}
        body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in (chunk, last)) + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def validating() -> Iterator[Callable[[bool], tuple[str, list[str]]]]:
    servers: list[ThreadingHTTPServer] = []

    def start(refuse_all: bool) -> tuple[str, list[str]]:
        ids: list[str] = []
        server = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Validating,), {"refuse_all": refuse_all,
                                                                                   "ids": ids}))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", ids

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


@pytest.mark.parametrize("client", ["raw", "sdk"])
def test_every_request_id_is_a_uuid_and_a_bare_400_is_not_guessed_at(validating, client: str) -> None:
    """Issue 53 item 12: SDK mode's preflight sent ``X-Request-Id: preflight`` and a server that
    validates it answered 400 with an empty body; the run stopped blaming --llm-model."""
    url, ids = validating(False)
    common = ["-u", "1", "-r", "1", "-t", "2s", "--llm-model", "m", "--llm-max-tokens", "4",
              "--llm-prometheus-port", "0", "--llm-client", client]
    proc = run_locust(LOCUSTFILES[client], "--host", url, *common, env={"OPENAI_API_KEY": "sk-any"}, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-2000:]
    assert len(ids) >= 2 and all(_is_uuid(i) for i in ids), ids  # the preflight's and the run's
    url, ids = validating(True)
    proc = run_locust(LOCUSTFILES[client], "--host", url, *common, env={"OPENAI_API_KEY": "sk-any"}, timeout=60)
    out = proc.stdout + proc.stderr
    lines = [ln for ln in out.splitlines() if ln.startswith("locust-llm:")]
    assert proc.returncode == 1 and len(lines) == 1, out[-2000:]
    assert "answered 400 with an empty body: the server refused something in the request" in lines[0], lines
    assert "--llm-model" not in lines[0]


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def test_max_tokens_beside_output_tokens_is_explained() -> None:
    """Issue 53 item 7: --llm-output-tokens silently won over --llm-max-tokens."""
    proc = run_locust("vllm.py", "-u", "1", "-t", "1s", "--llm-max-tokens", "32", "--llm-output-tokens", "64",
                      "--llm-preflight", "off", "--llm-prometheus-port", "0", timeout=60)
    assert ("locust-llm: note: --llm-output-tokens 64 sets each request's max tokens, so --llm-max-tokens 32 "
            "applies to none of them; give one of the two") in proc.stdout, proc.stdout[-2000:]
