"""The streaming client against a real simulator over loopback: timing, keep-alive, and every
failure mode becoming a categorized error (never a crash)."""

from __future__ import annotations

import socket
from itertools import accumulate

import pytest

from llm_users.client.stream import StreamClient, new_request_id
from llm_users.errors import LLMRequestError
from llm_users.metrics import RequestRecord
from llm_users.protocols import openai as oa
from llm_users.protocols.sampling import Sampling
from llm_users.settings import Timeouts
from tests.helpers import get_json

MESSAGES = [{"role": "user", "content": "Tell me about streams."}]


@pytest.fixture(scope="module")
def sim():
    from llm_users.sim.launcher import start_simulator

    with start_simulator(["--ttft-ms", "60", "--itl-ms", "5", "--output-tokens", "20", "--seed", "7",
                          "--stall-ms", "1500"]) as s:
        yield s


def send(client: StreamClient, fault: str | None = None, **kw) -> RequestRecord:
    req = oa.build_request(model="m", messages=MESSAGES, sampling=Sampling(max_tokens=64), dialect="vllm", **kw)
    rec = RequestRecord(new_request_id(), req.name, "vllm", "m")
    req.headers["X-Request-Id"] = rec.request_id
    if fault:
        req.headers["X-Sim-Fault"] = fault
    client.stream(req, oa.OpenAIStreamParser(), rec)
    return rec


@pytest.mark.serial  # the first stamp before the simulator's last write (a 95 ms window): run alone
def test_success_timing_and_usage(sim) -> None:
    """Each chunk stamped as it arrives, judged against the simulator's own trace on the one
    monotonic clock both stamp with (not against the machine's speed): the request went out
    before the simulator saw it, no chunk is stamped before the simulator wrote it, TTFT is at
    least the simulator's 60 ms, and the first token was stamped before the simulator had even
    written the last (a client that read the whole stream first would stamp it after). How close
    the stamps come to the writes is tests/e2e/test_fidelity.py's, run alone."""
    c = StreamClient(sim.url)
    rec = send(c)
    assert rec.output_tokens == 20 and rec.tokens_source == "usage"
    assert rec.chunks == 20 and len(rec.itl_ns) == 19
    trace = get_json(f"{sim.url}/_sim/trace?request_id={rec.request_id}")
    wrote = [t for t, _ in trace["chunks"]]  # the simulator's stamp just before each chunk's bytes went out
    stamped = list(accumulate(rec.itl_ns, initial=rec.t0_ns + rec.ttft_ns))  # ours, as each arrived
    assert len(wrote) == len(stamped) == 20
    assert rec.t0_ns <= trace["arrival_ns"]
    assert all(ours >= theirs for ours, theirs in zip(stamped, wrote, strict=True)), (stamped, wrote)
    assert rec.ttft_ns >= 60e6 - 1e6  # the simulator's first chunk is due 60 ms after it saw the request
    assert stamped[0] < wrote[-1], (stamped[0] - wrote[0], wrote[-1] - wrote[0])
    assert rec.ttfb_ns <= rec.ttft_ns <= rec.e2e_ns
    assert rec.finish_reason == "stop"  # 20 < max_tokens: the sim ends with a stop


def test_keep_alive_reuses_the_connection(sim) -> None:
    c = StreamClient(sim.url)
    first = send(c)
    second = send(c)
    assert first.connect_ns is not None
    assert second.connect_ns is None  # no new connection


@pytest.mark.parametrize(
    ("fault", "category", "text"),
    [
        ("truncate", "stream_truncated", "terminator"),
        ("malformed", "malformed_stream", "not JSON"),
        ("midstream_error", "server_error", ""),
        ("http_429", "http_429", "HTTP 429"),
        ("http_500", "http_500", "HTTP 500"),
        ("reset", "connection_reset", ""),
    ],
)
def test_faults_become_categorized_errors(sim, fault: str, category: str, text: str) -> None:
    c = StreamClient(sim.url)
    with pytest.raises(LLMRequestError) as info:
        send(c, fault=fault)
    err = info.value
    assert err.category == category, str(err)
    assert text in str(err)
    if category.startswith("http_"):
        assert err.status == int(category[5:])
    # the client is still usable afterwards
    assert send(c).output_tokens == 20


def test_retry_after_is_kept(sim) -> None:
    with pytest.raises(LLMRequestError) as info:
        send(StreamClient(sim.url), fault="http_429")
    assert info.value.retry_after is not None  # type: ignore[attr-defined]


def test_stall_past_the_read_timeout(sim) -> None:
    c = StreamClient(sim.url, timeouts=Timeouts(read=0.5))
    with pytest.raises(LLMRequestError) as info:
        send(c, fault="stall;after=3")
    assert info.value.category == "read_timeout"


def test_first_byte_timeout() -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)  # accepts, never answers
    port = srv.getsockname()[1]
    try:
        c = StreamClient(f"http://127.0.0.1:{port}", timeouts=Timeouts(first_byte=0.3))
        with pytest.raises(LLMRequestError) as info:
            send(c)
        assert info.value.category == "first_byte_timeout"
    finally:
        srv.close()


def test_connection_refused() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(LLMRequestError) as info:
        send(StreamClient(f"http://127.0.0.1:{port}"))
    assert info.value.category == "connect_error"
    assert "refused" in str(info.value).lower()


def test_total_timeout(sim) -> None:
    c = StreamClient(sim.url, timeouts=Timeouts(total=0.1))
    with pytest.raises(LLMRequestError) as info:
        send(c)
    assert info.value.category == "total_timeout"


def test_bad_host_url() -> None:
    with pytest.raises(ValueError, match="http"):
        StreamClient("ftp://example")


def test_https_verifies_certificates_by_default() -> None:
    import ssl

    c = StreamClient("https://127.0.0.1:1")
    assert c._ssl_context.verify_mode == ssl.CERT_REQUIRED and c._ssl_context.check_hostname
    insecure = StreamClient("https://127.0.0.1:1", verify_tls=False)
    assert insecure._ssl_context.verify_mode == ssl.CERT_NONE


def test_read_limit_is_per_gap_not_a_budget(sim_factory) -> None:
    # libev timers resume their remaining time when restarted: the limit must start afresh
    sim = sim_factory("--ttft-ms", "50", "--itl-ms", "50", "--output-tokens", "30")
    c = StreamClient(sim.url, timeouts=Timeouts(read=2.0, first_byte=1.0))
    for i in range(4):  # each request reads for ~1.5 s in 50 ms gaps: 6 s in all, limit 2 s
        req = oa.build_request(model="m", messages=MESSAGES, sampling=Sampling(max_tokens=30), dialect="vllm")
        rec = c.stream(req, oa.OpenAIStreamParser(), RequestRecord(str(i), "n", "b", "m"))
        assert rec.chunks == 30, i


def test_first_byte_limit_is_per_request() -> None:
    import threading
    import time

    body = b'data: {"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            for _ in range(4):
                buf = b""
                while b"\r\n\r\n" not in buf:
                    buf += conn.recv(65536)
                head_part, _, rest = buf.partition(b"\r\n\r\n")
                length = int([ln.split(b":")[1] for ln in head_part.split(b"\r\n")
                              if ln.lower().startswith(b"content-length")][0])
                while len(rest) < length:
                    rest += conn.recv(65536)
                time.sleep(0.3)  # headers held back 0.3 s, under the 0.5 s limit each time
                conn.sendall(head + body)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        c = StreamClient(f"http://127.0.0.1:{srv.getsockname()[1]}", timeouts=Timeouts(first_byte=0.5))
        for i in range(4):
            assert send(c).chunks == 1, i
    finally:
        srv.close()


@pytest.mark.serial  # stamped within 15 ms of its write: a loaded machine's scheduling alone passes that
def test_chunk_after_a_4_mib_frame_is_stamped_when_it_arrives() -> None:
    """Framing is linear: a 4 MiB SSE line is scanned once, so the chunk right behind it is
    stamped within a few ms of its write (the old join-and-resplit took 70-110 ms here)."""
    import time

    import gevent
    import gevent.socket

    big = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * (4 << 20) + b'"}}]}\n\n'
    small = b'data: {"choices":[{"index":0,"delta":{"content":"y"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    listener = gevent.socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    written: list[int] = []

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        body = b"%x\r\n%b\r\n" % (len(big), big)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
        written.append(time.perf_counter_ns())
        conn.sendall(b"%x\r\n%b\r\n0\r\n\r\n" % (len(small), small))
        gevent.sleep(0.5)
        conn.close()

    server = gevent.spawn(serve)
    try:
        c = StreamClient(f"http://127.0.0.1:{listener.getsockname()[1]}")
        rec = send(c)
    finally:
        server.kill()
        listener.close()
    assert rec.chunks == 2 and rec.finish_reason == "stop"
    stamped = rec.t0_ns + rec.ttft_ns + rec.itl_ns[0]
    assert 0 <= stamped - written[0] < 15e6, (stamped - written[0]) / 1e6


def test_a_backlog_of_chunks_is_parsed_a_buffer_at_a_time_with_the_hub_visited_between() -> None:
    """A stream that fell behind finds many chunks waiting in its socket; it parses them at most
    one buffer (16 KB) per visit to the hub, so other streams' stamps wait about a millisecond,
    not the whole backlog (a 64 KB read of ~300 chunks held the hub 6-11 ms, issue 14)."""
    import gevent
    import gevent.socket

    from llm_users.client import stream as stream_mod

    chunk = b'data: {"choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}\n\n'
    backlog = chunk * 4000 + b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\ndata: [DONE]\n\n'
    listener = gevent.socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    ticks: list[int] = []
    streaming = [True]

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
                     % len(backlog) + backlog)
        gevent.sleep(1)
        conn.close()

    def tick() -> None:  # runs once per turn of the hub while the stream is parsed
        while streaming[0]:
            ticks.append(1)
            gevent.sleep(0)

    per_turn: dict[int, int] = {}  # turn of the hub -> chunks parsed in it

    class Counting(oa.OpenAIStreamParser):
        def feed(self, data: bytes) -> list:
            events = super().feed(data)
            per_turn[len(ticks)] = per_turn.get(len(ticks), 0) + len(events)
            return events

    server = gevent.spawn(serve)
    try:
        c = StreamClient(f"http://127.0.0.1:{listener.getsockname()[1]}")
        ticker = gevent.spawn(tick)
        gevent.sleep(0)
        req = oa.build_request(model="m", messages=MESSAGES, sampling=Sampling(max_tokens=64), dialect="vllm")
        rec = c.stream(req, Counting(), RequestRecord(new_request_id(), req.name, "vllm", "m"))
        streaming[0] = False
        ticker.join()
    finally:
        server.kill()
        listener.close()
    assert rec.chunks == 4000 and rec.finish_reason == "length"
    assert stream_mod._BUF_SIZE == 16384
    most = 16384 // len(chunk) + 2  # a 16 KB read (and the chunk it completes)
    assert sum(per_turn.values()) >= 4000
    assert max(per_turn.values()) <= most, (max(per_turn.values()), most)
    assert len(per_turn) >= len(backlog) // stream_mod._BUF_SIZE  # the hub was visited between reads


def test_a_connection_the_server_closed_while_idle_is_replaced_before_sending() -> None:
    """Issue 9 item 1: the stale check happens before sending, so the request goes out once, on
    a new connection, and the record says it reconnected (summary.json counts it)."""
    import gevent
    import gevent.socket

    body = b'data: {"choices":[{"index":0,"delta":{"content":"y"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
    listener = gevent.socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    requests: list[int] = []

    def serve() -> None:
        for n in range(2):
            conn, _ = listener.accept()
            conn.recv(65536)
            requests.append(n)
            conn.sendall(answer)
            gevent.sleep(0.05)
            conn.close()  # idle keep-alive connection closed by the server

    server = gevent.spawn(serve)
    try:
        c = StreamClient(f"http://127.0.0.1:{listener.getsockname()[1]}")
        first = send(c)
        gevent.sleep(0.2)  # the server has closed the idle connection
        second = send(c)
    finally:
        server.kill()
        listener.close()
    assert first.ok and second.ok
    assert not first.reconnected and second.reconnected and second.connect_ns is not None
    assert requests == [0, 1] and c.reconnects == 1  # one request per connection: nothing resent


def test_a_request_leaves_no_reference_cycle(sim) -> None:
    """Issue 14: the httptools parser and the exchange held each other, so every request's
    state (record, ITL list, parsers) waited for the garbage collector; a finished request is
    now freed by reference counting alone."""
    import gc

    from llm_users.client import stream

    c = StreamClient(sim.url)
    send(c)  # warm: the connection
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            send(c)
        alive = [o for o in gc.get_objects() if isinstance(o, stream._Exchange)]
        gc.set_debug(gc.DEBUG_SAVEALL)  # keep what the collector finds, to see whose it is
        gc.collect()
        ours = [o for o in gc.garbage if _owned_by_client(o)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert alive == [], f"{len(alive)} exchanges still alive after their requests"
    # Nothing of a request is left for the collector (other tests' leftovers in this process,
    # e.g. SDK clients, may make garbage meanwhile: only the client's own objects count).
    assert ours == [], sorted({type(o).__qualname__ for o in ours})


def _owned_by_client(obj: object) -> bool:
    """An object of the stream client, its parsers or records (or a bound method of one)."""
    target = getattr(obj, "__self__", obj)
    module = getattr(type(target), "__module__", "") or ""
    return module.startswith(("llm_users", "httptools"))


def test_a_server_that_closes_after_each_stream_never_costs_a_request() -> None:
    """Issue 27: llama.cpp's server closes the connection right after every streamed response
    although it says ``Keep-Alive``. A request sent in the moment before that close arrives
    reached nobody and failed as connection_reset (6 of 18 in a real run). The first reuse now
    waits for the close, the client learns the server's habit (one warning) and opens a
    connection per request: every request succeeds, each sent once."""
    from llm_users.client import keepalive
    from tests.helpers import closing_sse_server

    with closing_sse_server() as server:
        c = StreamClient(server.url)
        records = [send(c) for _ in range(4)]
    assert [r.status for r in records] == ["ok"] * 4, [r.error_message for r in records]
    assert server.requests == 4  # each sent once
    assert keepalive.closes_after_response(("http", "127.0.0.1", server.port, True)) is True
    assert all(r.connect_ns is not None for r in records)  # a connection per request


def _serve_once(response: bytes, endless: bytes = b"", cap: int = 0) -> tuple[str, list[int], object, object]:
    """A loopback server for one request: ``response``, then ``endless`` again and again until the
    client leaves or ``cap`` bytes are written (then it closes: a client without bounds meets the
    end instead of filling the machine). Returns the URL, the bytes it wrote, its greenlet and
    its listener."""
    import gevent
    import gevent.socket

    listener = gevent.socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    written = [0]

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        try:
            conn.sendall(response)
            while endless and written[0] < cap:
                conn.sendall(endless)
                written[0] += len(endless)
        except OSError:
            pass  # the client cut it
        conn.close()

    return f"http://127.0.0.1:{listener.getsockname()[1]}", written, gevent.spawn(serve), listener


def test_a_response_head_that_never_ends_is_cut_at_the_head_bound() -> None:
    """Issue 54: the header block had no bound (httptools keeps an unfinished header's value)."""
    url, written, server, listener = _serve_once(b"HTTP/1.1 200 OK\r\nX-Filler: ", b"a" * 16384, cap=8 << 20)
    try:
        with pytest.raises(LLMRequestError) as info:
            send(StreamClient(url))
    finally:
        server.kill()
        listener.close()
    assert info.value.category == "response_too_large", str(info.value)
    assert "a response head (status line and headers) over 64 KiB (--llm-max-header-bytes)" in str(info.value)
    assert written[0] < 8 << 20  # cut while reading: the server met a closed connection before its end


def test_a_gzip_body_though_identity_was_asked_fails_naming_it() -> None:
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n"
            b"Content-Length: 20\r\n\r\n" + b"\x1f\x8b\x08\x00" + bytes(16))
    url, _, server, listener = _serve_once(head)
    try:
        with pytest.raises(LLMRequestError) as info:
            send(StreamClient(url))
    finally:
        server.kill()
        listener.close()
    assert info.value.category == "malformed_stream" and info.value.status is None
    assert "with a gzip-compressed body (Content-Encoding: gzip) though the request asked for identity" in str(info.value)


def test_a_line_that_never_ends_is_cut_at_the_event_bound() -> None:
    """Issue 54: an SSE line that never ends grew the client without bound (2.7 GB in 20 s)."""
    start = b'data: {"choices":[{"delta":{"content":"'
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"%x\r\n%b\r\n" % (len(start), start))
    url, written, server, listener = _serve_once(head, b"4000\r\n" + b"x" * 16384 + b"\r\n", cap=48 << 20)
    try:
        with pytest.raises(LLMRequestError) as info:
            send(StreamClient(url))
    finally:
        server.kill()
        listener.close()
    assert info.value.category == "response_too_large" and "an SSE event over 8 MiB" in str(info.value)
    assert 8 << 20 <= written[0] < 48 << 20  # cut while reading, before the server's end
