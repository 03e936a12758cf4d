"""Issue 53: what a user reads on the first command is what ran.

- An empty ``--host`` (``--host "$SERVER"`` with the variable unset, ``LOCUST_HOST=``) is refused
  in one line; before, it started the embedded simulator and measured that as "no --host given".
- A run without ``--llm-report`` does not say its interrupted requests are "kept in requests.jsonl".
- Every request id sent is a UUID (the preflight's too), and a 400 with an empty body is said as
  such, not blamed on the model or the sampling options.

Each run is one scenario of the module's pool (tests/e2e/locust_pool.py), a few at a time; the
test servers are the module's, one per run whose requests a test reads.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.e2e.locust_pool import Pool, Run, Scenario, params, pool_in
from tests.helpers import LOCUSTFILES

pytestmark = pytest.mark.slow


CLIENTS = ["raw", "sdk"]
KEY = {"OPENAI_API_KEY": "sk-any"}


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


def _serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, tuple[str, list[str]]]]:
    """The module's test servers by name: (URL, the request ids it was sent)."""
    started: dict[str, tuple[ThreadingHTTPServer, list[str]]] = {}
    try:
        started["endless"] = (_serve(_Endless), [])
        for client in CLIENTS:
            for refuse_all in (False, True):
                ids: list[str] = []
                handler = type("H", (_Validating,), {"refuse_all": refuse_all, "ids": ids})
                started[f"validating-{client}-{refuse_all}"] = (_serve(handler), ids)
        yield {k: (f"http://127.0.0.1:{s.server_address[1]}", ids) for k, (s, ids) in started.items()}
    finally:
        for server, _ in started.values():
            server.shutdown()
            server.server_close()


def _needs(item: Any) -> list[str]:
    p = params(item)
    return {
        "test_an_empty_host_is_refused_not_replaced_by_the_simulator": lambda: [f"empty-{p['how']}"],
        "test_without_a_report_no_line_names_requests_jsonl": lambda: ["no-report"],
        "test_a_preflight_that_never_ends_says_the_output_limit_was_not_honoured": lambda: [f"endless-{p['client']}"],
        "test_every_request_id_is_a_uuid_and_a_bare_400_is_not_guessed_at": lambda: [
            f"validating-{p['client']}-False", f"validating-{p['client']}-True"],
        "test_max_tokens_beside_output_tokens_is_explained": lambda: ["max-tokens"],
    }[item.originalname]()


def _scenarios(servers: dict[str, tuple[str, list[str]]]) -> dict[str, Scenario]:
    out: dict[str, Scenario] = {}
    for how in ("--host", "LOCUST_HOST"):
        args, env = (("--host", ""), None) if how == "--host" else ((), {"LOCUST_HOST": ""})
        out[f"empty-{how}"] = Scenario("vllm.py", (*args, "-u", "1", "-t", "30s", "--llm-prometheus-port", "0"), env=env,
                                       report=False, timeout=60)
    # the simulator's default 512-token answers outlast a 2 s run: every request is interrupted
    out["no-report"] = Scenario("vllm.py", ("-u", "2", "-r", "2", "-t", "2s", "--llm-prometheus-port", "0"),
                                report=False, timeout=60)
    for client in CLIENTS:
        out[f"endless-{client}"] = Scenario(
            LOCUSTFILES[client], ("--host", servers["endless"][0], "-u", "1", "-t", "1s", "--llm-model", "m",
                                  "--llm-timeout", "2", "--llm-prometheus-port", "0", "--llm-client", client),
            env=KEY, report=False, timeout=90)
        for refuse_all in (False, True):
            name = f"validating-{client}-{refuse_all}"
            # the SDK's user starts 1-3 s later on a busy machine: 1 s more for its request after the preflight
            seconds = "3s" if client == "sdk" and not refuse_all else "2s"
            out[name] = Scenario(LOCUSTFILES[client], ("--host", servers[name][0], "-u", "1", "-r", "1", "-t", seconds,
                                                       "--llm-model", "m", "--llm-max-tokens", "4",
                                                       "--llm-prometheus-port", "0", "--llm-client", client),
                                 env=KEY, report=False, timeout=60)
    out["max-tokens"] = Scenario("vllm.py", ("-u", "1", "-t", "1s", "--llm-max-tokens", "32", "--llm-output-tokens",
                                             "64", "--llm-preflight", "off", "--llm-prometheus-port", "0"),
                                 report=False, timeout=60)
    return out


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, servers: dict[str, tuple[str, list[str]]],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    yield from pool_in(request, tmp_path_factory.mktemp("first-command"), _scenarios(servers), _needs, parallel=3)


def _tail(run: Run) -> str:
    return f"stdout tail:\n{run.proc.stdout[-2000:]}\nstderr tail:\n{run.proc.stderr[-3000:]}"


@pytest.mark.parametrize("how", ["--host", "LOCUST_HOST"])
def test_an_empty_host_is_refused_not_replaced_by_the_simulator(runs, how: str) -> None:
    run = runs.run(f"empty-{how}")
    out = run.proc.stdout + run.proc.stderr
    lines = [ln for ln in out.splitlines() if ln.startswith("locust-llm:")]
    assert run.proc.returncode == 1, _tail(run)
    assert lines == ["locust-llm: --host is empty (given without a value, or LOCUST_HOST set to nothing): give the "
                     "server's URL, e.g. --host http://localhost:8000, or leave --host out to run against the "
                     "embedded simulator"], _tail(run)
    assert "started the embedded simulator" not in out and "Traceback" not in out


def test_without_a_report_no_line_names_requests_jsonl(runs) -> None:
    run = runs.run("no-report")
    out = run.proc.stdout + run.proc.stderr
    assert "interrupted: 2 requests were in flight when the run stopped" in out, _tail(run)
    assert "requests.jsonl" not in out


@pytest.mark.parametrize("client", CLIENTS)
def test_a_preflight_that_never_ends_says_the_output_limit_was_not_honoured(runs, client: str) -> None:
    """Issue 53 item 12: a server that ignores the dialect's output limit held the start for three
    tries of 60 s, then said "the server may be busy". Each try is bounded (here by --llm-timeout)
    and the line names the field the server ignored."""
    run = runs.run(f"endless-{client}")
    out = run.proc.stdout + run.proc.stderr
    field = "max_tokens" if client == "raw" else "max_completion_tokens"
    lines = [ln for ln in out.splitlines() if "asked for 1 output token and was still streaming" in ln]
    assert len(lines) == 1, _tail(run)
    assert f"the server does not honour the output limit this dialect sends ({field})" in lines[0], lines[0]
    assert "may be busy" not in out


@pytest.mark.parametrize("client", CLIENTS)
def test_every_request_id_is_a_uuid_and_a_bare_400_is_not_guessed_at(runs, servers, client: str) -> None:
    """Issue 53 item 12: SDK mode's preflight sent ``X-Request-Id: preflight`` and a server that
    validates it answered 400 with an empty body; the run stopped blaming --llm-model."""
    run = runs.run(f"validating-{client}-False")
    ids = servers[f"validating-{client}-False"][1]
    assert run.proc.returncode == 0, _tail(run)
    assert len(ids) >= 2 and all(_is_uuid(i) for i in ids), ids  # the preflight's and the run's
    run = runs.run(f"validating-{client}-True")
    out = run.proc.stdout + run.proc.stderr
    lines = [ln for ln in out.splitlines() if ln.startswith("locust-llm:")]
    assert run.proc.returncode == 1 and len(lines) == 1, _tail(run)
    assert "answered 400 with an empty body: the server refused something in the request" in lines[0], lines
    assert "--llm-model" not in lines[0]


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def test_max_tokens_beside_output_tokens_is_explained(runs) -> None:
    """Issue 53 item 7: --llm-output-tokens silently won over --llm-max-tokens."""
    run = runs.run("max-tokens")
    assert ("locust-llm: note: --llm-output-tokens 64 sets each request's max tokens, so --llm-max-tokens 32 "
            "applies to none of them; give one of the two") in run.proc.stdout, _tail(run)
