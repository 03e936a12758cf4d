"""Issue 27: the keep-alive habit each server is seen to have, learned by the raw client and
SDK mode alike, so no request is written into a connection the server is closing."""

from __future__ import annotations

import argparse
import itertools

import pytest
from locust.env import Environment

from llm_users.client import keepalive
from llm_users.users import ClaudeUser, VLLMUser
from tests.helpers import closing_sse_server

MESSAGES = [{"role": "user", "content": "Say something."}]


def _user(client: str, host: str, base: type = VLLMUser):
    cls = type(f"KeepAlive{client}", (base,), {"abstract": False, "host": host, "warmup_requests": 0})
    opts = argparse.Namespace(llm_client=client, llm_model="m", llm_max_tokens=8)
    return cls(Environment(user_classes=[cls], host=host, parsed_options=opts))


def test_learn_keeps_the_first_finding_and_says_a_close_once(caplog) -> None:
    server = ("http", "127.0.0.1", 1, True)
    assert keepalive.closes_after_response(server) is None
    with caplog.at_level("WARNING"):
        keepalive.learn(server, closes=True, label="http://127.0.0.1:1")
        keepalive.learn(server, closes=True, label="http://127.0.0.1:1")
        keepalive.learn(server, closes=False, label="http://127.0.0.1:1")
    assert keepalive.closes_after_response(server) is True
    said = [r.getMessage() for r in caplog.records if "closes its connection" in r.getMessage()]
    assert len(said) == 1 and "each streamed response" in said[0]
    assert keepalive.closes_after_response(("http", "127.0.0.1", 1, False)) is None  # JSON answers apart


# The openai SDK closes its connection after each stream itself (it stops reading at [DONE]),
# so it never reuses one; the anthropic SDK reads to the end and reuses: that is the race.
CLIENTS = [("raw", VLLMUser, closing_sse_server.OPENAI, True), ("sdk", VLLMUser, closing_sse_server.OPENAI, None),
           ("raw", ClaudeUser, closing_sse_server.ANTHROPIC, True),
           ("sdk", ClaudeUser, closing_sse_server.ANTHROPIC, True)]


@pytest.mark.parametrize(("client", "base", "frames", "learned"), CLIENTS)
def test_a_server_closing_after_each_stream_costs_no_request(client: str, base: type, frames: tuple,
                                                             learned: bool | None, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with closing_sse_server(frames=frames) as server:
        user = _user(client, server.url, base)
        records = [user.send(MESSAGES) for _ in range(5)]
    assert [r.status for r in records] == ["ok"] * 5, [r.error_message for r in records]
    assert server.requests == 5  # each sent once, none lost
    assert keepalive.closes_after_response(("http", "127.0.0.1", server.port, True)) is learned


@pytest.mark.parametrize(("client", "base"), [("raw", VLLMUser), ("sdk", ClaudeUser)])
def test_a_server_that_keeps_connections_is_learned_and_reused(client: str, base: type, sim_factory,
                                                               monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    sim = sim_factory("--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "4")
    user = _user(client, sim.url, base)
    records = [user.send(MESSAGES) for _ in range(3)]
    assert all(r.ok for r in records)
    port = int(sim.url.rsplit(":", 1)[1])
    assert keepalive.closes_after_response(("http", "127.0.0.1", port, True)) is False
    assert records[0].connect_ns is not None  # SDK mode too: httpcore's trace of the connect
    assert records[1].connect_ns is None and records[2].connect_ns is None  # the connection was reused


def test_an_sdk_that_closes_its_own_connection_waits_for_no_close(sim_factory) -> None:
    """The openai SDK closes its connection at [DONE] (stops reading there), so each request opens
    one: its connect time is in connect_ns, as raw mode's, and no close grace (20 ms) goes before
    the next request, as if the server might still close it (CI r65: 23 ms before each request,
    in which the partition test's cut fell with no stream in flight)."""
    sim = sim_factory("--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "4")
    user = _user("sdk", sim.url, VLLMUser)
    records = [user.send(MESSAGES) for _ in range(5)]
    assert all(r.ok for r in records), [r.error_message for r in records]
    assert all(r.connect_ns is not None and 0 < r.connect_ns < 1e9 for r in records), [r.connect_ns for r in records]
    between = [b.t0_ns - (a.t0_ns + a.e2e_ns) for a, b in itertools.pairwise(records)]
    assert min(between) < keepalive.CLOSE_GRACE_NS * 0.75, between  # the grace would make each >= 20 ms
    port = int(sim.url.rsplit(":", 1)[1])
    assert keepalive.closes_after_response(("http", "127.0.0.1", port, True)) is None  # nothing to learn from
