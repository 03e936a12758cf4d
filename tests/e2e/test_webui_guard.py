"""Issue 54 item 7: a visitor of the web UI can point the load anywhere, never the API key.

One real locust process with its web UI per case (raw mode locally; SDK mode as master and a
forked worker, where the worker sends): the key's host is a simulator that answers 401
without the key; a recording server on loopback plays the stranger's host. Before this, a
``POST /swarm`` naming that host (and any environment variable as the key's) delivered
``Authorization: Bearer <value>`` to it.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.helpers import free_port, start_locust

pytestmark = pytest.mark.slow

KEY = "sk-canary-guard-5e1f0c9a7d3b"
OTHER_SECRET = "aws-canary-guard-8c2d4e6f"


class Recorder(BaseHTTPRequestHandler):
    """The stranger's host: keeps every request's method, path and headers, answers 503."""

    seen: list[dict[str, str]] = []  # noqa: RUF012 - one per server, set in the fixture

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append({":method": self.command, ":path": self.path, **dict(self.headers.items())})
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()

    do_GET = do_POST  # noqa: N815

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def stranger() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []
    handler = type("Handler", (Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def post(url: str, fields: dict[str, str] | None = None, *, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = body if body is not None else urllib.parse.urlencode(fields or {}).encode()
    req = urllib.request.Request(url, data=data, headers=headers or {}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def wait_for(check: Any, what: str, log: Any, limit: float = 30) -> Any:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"{what} within {limit} s; log:\n{log.read_text()[-3000:]}")


def llm_rows(base: str) -> dict[str, Any]:
    stats = get(base + "/stats/requests")
    rows = {e["key"]: e["data"] for e in stats.get("extendedStats", [])}.get("llm", [])
    return rows[-1] if rows else {}


CASES = {"raw-local": ("vllm.py", []), "sdk-master-and-worker": ("openai.py", ["--llm-client", "sdk", "--processes", "1"])}


@pytest.mark.parametrize("case", list(CASES))
def test_a_host_typed_in_the_form_gets_no_key_and_no_option_reads_a_secret(case, sim_factory, stranger,
                                                                           tmp_path) -> None:
    locustfile, extra = CASES[case]
    sim = sim_factory("--require-api-key", KEY, "--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "4")
    stranger_url, seen = stranger
    port = free_port()
    log = tmp_path / "log"
    proc = start_locust(["--host", sim.url, "--web-host", "127.0.0.1", "--web-port", str(port), "-u", "1", "-r", "1",
                         "--llm-prometheus-port", "0", "--llm-api-key-env", "CANARY_GUARD_KEY", "--llm-max-tokens",
                         "4", "--llm-warmup", "0", *extra], log, locustfile=locustfile, loglevel="WARNING",
                        env={"CANARY_GUARD_KEY": KEY, "AWS_SECRET_ACCESS_KEY": OTHER_SECRET, "OPENAI_API_KEY": KEY})
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: get(base + "/llm/form.json"), "the web UI answered", log)
        start = {"user_count": "1", "spawn_rate": "1", "host": stranger_url}

        # the exploit of the issue, and every option that reads a secret or a file, refused with one line
        for field, value in [("llm_api_key_env", "AWS_SECRET_ACCESS_KEY"), ("llm_api_key_hosts", "*"),
                             ("llm_dataset", "/root/.aws/credentials"), ("llm_tools", "/etc/passwd"),
                             ("llm_insecure", "true"), ("llm_response_format", "schema:/etc/passwd"),
                             ("html_file", str(tmp_path / "x.html")), ("llm_report", str(tmp_path / "r"))]:
            status, answer = post(base + "/swarm", {**start, field: value})
            assert status == 200 and answer["success"] is False, (field, answer)
            assert f"--{field.replace('_', '-')}" in answer["message"] and "\n" not in answer["message"], answer
        # a page of another origin cannot start a run, nor edit a User class's key variable
        status, answer = post(base + "/swarm", start, headers={"Origin": "http://evil.example"})
        assert status == 403 and answer["success"] is False
        status, answer = post(base + "/user", body=json.dumps({"user_class_name": "VLLMUser",
                                                               "api_key_env": "AWS_SECRET_ACCESS_KEY"}).encode(),
                              headers={"Content-Type": "application/json"})
        assert status == 400 and "api_key_env" in answer["message"]
        status, answer = post(base + "/swarm", {**start, "host": ""})
        assert answer["success"] is False and answer["message"].startswith("give the server's URL as Host")
        status, answer = post(base + "/swarm", {**start, "user_count": "-5"})
        assert answer["success"] is False and answer["message"] == "the number of users must be 0 or more"
        assert seen == []  # nothing refused reached the stranger

        # the stranger's host typed in the form: the load goes there, the key does not, and the UI says so
        status, answer = post(base + "/swarm", start)
        assert status == 200 and answer["success"] is True, answer
        assert f"is not sent to {stranger_url}" in answer["message"], answer
        wait_for(lambda: sum(h[":method"] == "POST" for h in seen) >= 2, "two requests at the stranger's host", log)
        notes = get(base + "/llm/live.json")["notes"]
        assert any(f"is not sent to {stranger_url}" in n and "--llm-api-key-hosts" in n for n in notes), notes
        post(base + "/stop")
        for headers in seen:
            values = " ".join(headers.values())
            assert KEY not in values and OTHER_SECRET not in values, headers
            assert "x-api-key" not in {k.lower() for k in headers}
            if case.startswith("raw") or headers[":method"] == "GET":  # GET: the server's /metrics, scraped
                assert "authorization" not in {k.lower() for k in headers}, headers
            else:  # the openai SDK must send some key: ours is the placeholder
                assert {k.lower(): v for k, v in headers.items()}.get("authorization") == "Bearer EMPTY", headers

        # back to the host given at start: the key goes there (the simulator answers 401 without it)
        status, answer = post(base + "/swarm", {**start, "host": sim.url})
        assert answer["success"] is True and "is not sent" not in answer["message"], answer
        row = wait_for(lambda: (r := llm_rows(base)).get("requests", 0) >= 2 and r, "two requests at the start host",
                       log)
        assert row["failures"] == 0, (row, log.read_text()[-2000:])
        assert not [n for n in get(base + "/llm/live.json")["notes"] if "is not sent" in n]
    finally:
        proc.terminate()
        proc.wait(30)
    text = log.read_text()
    assert KEY not in text and OTHER_SECRET not in text
    assert f"is not sent to {stranger_url}" in text  # the Logs tab's line
