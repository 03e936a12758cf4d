"""Issue 54 item 2 and SDK mode's size bounds (llm_users/client/sdk_body.py), on real httpx and
httpx2 clients (the SDKs' two packages) through their response hook, as SDK mode installs it: a
compressed body is inflated in bounded pieces and capped, a line or a whole body past its bound is
cut while it is read, a head past its bound fails at once."""

from __future__ import annotations

import gzip
import importlib
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from llm_users.client.sdk_body import LINE_ENDS, PIECE, SSE_ENDS, bound
from llm_users.errors import ProtocolError, ResponseTooLarge
from llm_users.protocols.limits import KiB, Limits, MiB

LIM = Limits(event_bytes=256 * KiB, body_bytes=4 * MiB, header_bytes=8 * KiB)
PACKAGES = ["httpx", "httpx2"]


def _client(package: str, answer: Any, ends: tuple[bytes, ...] = SSE_ENDS, lim: Limits = LIM) -> Any:
    """A client of ``package`` whose transport answers with ``answer``, with SDK mode's response hook."""
    httpx = importlib.import_module(package)

    def hook(response: Any) -> None:
        bound(response, lim, ends)

    return httpx.Client(transport=httpx.MockTransport(answer), event_hooks={"response": [hook]})


def _read(package: str, answer: Any, ends: tuple[bytes, ...] = SSE_ENDS, lim: Limits = LIM) -> tuple[list[bytes], Any]:
    """Every piece the SDK would read (``iter_bytes``), and the response (``ends``: what the
    event bound counts, an SSE stream's by default; none: a whole-body answer)."""
    with _client(package, answer, ends, lim) as c, c.stream("POST", "http://llm/v1/chat/completions") as r:
        return list(r.iter_bytes()), r


def _endless(piece: bytes, cap: int = 1 << 30) -> Iterator[bytes]:
    sent = 0
    while sent < cap:  # the cap only keeps a broken bound from filling the machine
        yield piece
        sent += len(piece)


def _gzip_bomb(pieces: int, piece: bytes = bytes(MiB)) -> Iterator[bytes]:
    """gzip of ``pieces`` x ``piece``, made as it is sent (a 2 GB bomb is about 2 MB)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    for _ in range(pieces):
        out = z.compress(piece)
        if out:
            yield out
    yield z.flush()


@pytest.mark.parametrize("package", PACKAGES)
def test_a_gzip_bomb_is_inflated_in_bounded_pieces_and_cut_at_the_line_bound(package: str) -> None:
    httpx = importlib.import_module(package)
    sent = []

    def answer(request: Any) -> Any:
        def body() -> Iterator[bytes]:
            for out in _gzip_bomb(2048):  # 2 GiB of zeros: no line end anywhere
                sent.append(len(out))
                yield out
        return httpx.Response(200, headers={"content-encoding": "gzip", "content-type": "text/event-stream"},
                              content=body())

    with pytest.raises(ResponseTooLarge, match=r"an SSE event of the body over 256 KiB without its end"):
        _read(package, answer)
    assert sum(sent) < 64 * KiB  # cut after inflating a few hundred KiB, not 2 GiB


@pytest.mark.parametrize("package", PACKAGES)
def test_what_a_compressed_stream_inflates_to_is_capped_at_the_body_bound(package: str) -> None:
    httpx = importlib.import_module(package)
    lines = b"data: {}\n\n" * 100_000  # line ends everywhere: only the body bound stops it

    def answer(request: Any) -> Any:
        return httpx.Response(200, headers={"content-encoding": "gzip"}, content=_gzip_bomb(10_000, lines))

    with pytest.raises(ResponseTooLarge, match=r"what the gzip-compressed body inflates to over 4 MiB"):
        _read(package, answer)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "deflate-raw", "br"])
@pytest.mark.parametrize("package", PACKAGES)
def test_a_compressed_answer_inflates_to_the_same_bytes(package: str, encoding: str) -> None:
    httpx = importlib.import_module(package)
    text = b"".join(b'data: {"choices":[{"delta":{"content":"%d"}}]}\n\n' % i for i in range(30_000))
    if encoding == "br":
        packed = importlib.import_module("brotli").compress(text, quality=5)
    elif encoding == "gzip":
        packed = gzip.compress(text)
    else:
        z = zlib.compressobj(6, zlib.DEFLATED, -15 if encoding == "deflate-raw" else 15)
        packed = z.compress(text) + z.flush()
    name = encoding.split("-")[0]

    def answer(request: Any) -> Any:
        return httpx.Response(200, headers={"content-encoding": name},
                              content=(packed[i:i + 1000] for i in range(0, len(packed), 1000)))

    pieces, response = _read(package, answer, lim=Limits())
    assert b"".join(pieces) == text and max(map(len, pieces)) <= PIECE
    assert "content-encoding" not in response.headers  # inflated here: httpx saw identity


@pytest.mark.parametrize("package", PACKAGES)
def test_an_encoding_sdk_mode_does_not_inflate_fails_naming_it(package: str) -> None:
    httpx = importlib.import_module(package)
    with pytest.raises(ProtocolError, match=r"a zstd-compressed body \(Content-Encoding: zstd\) though the request"):
        _read(package, lambda request: httpx.Response(200, headers={"content-encoding": "zstd"}, content=b"\x28"))


@pytest.mark.parametrize("package", PACKAGES)
def test_an_event_or_line_that_never_ends_is_cut_and_a_long_stream_is_not(package: str) -> None:
    httpx = importlib.import_module(package)
    with pytest.raises(ResponseTooLarge, match="an SSE event of the body over 256 KiB"):
        _read(package, lambda request: httpx.Response(200, content=_endless(b"x" * 10_000)))
    with pytest.raises(ResponseTooLarge, match="an SSE event of the body over 256 KiB"):  # lines end, never the event
        _read(package, lambda request: httpx.Response(200, content=_endless(b"data: " + b"x" * 100 + b"\n")))
    with pytest.raises(ResponseTooLarge, match="a line of the body over 256 KiB"):  # NDJSON
        _read(package, lambda request: httpx.Response(200, content=_endless(b"x" * 10_000)), LINE_ENDS)
    for ends, unit in ((SSE_ENDS, b'data: {"choices":[{"delta":{"content":"y"}}]}\r\n\r\n'),  # CRLF, as Gemini's
                       (SSE_ENDS, b'event: ping\ndata: {"type": "ping"}\n\n'), (LINE_ENDS, b'{"done":false}\n')):
        pieces, _ = _read(package, lambda request, unit=unit: httpx.Response(200, content=_endless(unit * 1000,
                                                                                                    16 * MiB)), ends)
        assert sum(map(len, pieces)) >= 16 * MiB  # past the body bound: a stream's length is not bounded


@pytest.mark.parametrize("package", PACKAGES)
def test_a_whole_body_answer_is_cut_at_the_body_bound(package: str) -> None:
    httpx = importlib.import_module(package)
    with pytest.raises(ResponseTooLarge, match=r"a whole-body answer over 4 MiB \(--llm-max-body-bytes"):
        _read(package, lambda request: httpx.Response(200, content=_endless(b"0.1," * 4096)), ())
    one = b'{"data":[{"embedding":[' + b"0.1," * 500_000 + b'0.1]}]}'  # 2 MB, no line end: fine whole
    pieces, _ = _read(package, lambda request: httpx.Response(200, content=iter([one])), ())
    assert b"".join(pieces) == one


@pytest.mark.parametrize("package", PACKAGES)
def test_a_head_past_the_header_bound_fails(package: str) -> None:
    httpx = importlib.import_module(package)
    with pytest.raises(ResponseTooLarge, match=r"a response head \(status line and headers\) over 8 KiB"):
        _read(package, lambda request: httpx.Response(200, headers={"x-filler": "a" * 9000}, content=b""))
    _read(package, lambda request: httpx.Response(200, headers={"x-filler": "a" * 7000}, content=b""))


# every SDK we drive, through SDK mode's own client (Locust as a library, as tests/e2e/test_fault_parity.py)
@pytest.fixture
def bomb_server() -> Iterator[Any]:
    """Answers every request with a gzip bomb (64 MiB of zeros in 64 KiB: despite Accept-Encoding:
    identity) and keeps each request's Accept-Encoding."""
    import gevent
    import gevent.socket

    listener = gevent.socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    seen: dict[str, Any] = {"accept_encoding": []}
    bomb = b"".join(_gzip_bomb(64))

    def answer(conn: Any) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(65536)
        line = next((h for h in head.split(b"\r\n") if h.lower().startswith(b"accept-encoding:")), b"")
        seen["accept_encoding"].append(line.split(b":", 1)[-1].strip().decode())
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n"
                         b"Content-Length: %d\r\n\r\n%b" % (len(bomb), bomb))
            conn.recv(1)  # until the client leaves
        except OSError:
            pass
        conn.close()

    answering: list[Any] = []

    def serve() -> None:
        while True:
            conn, _ = listener.accept()
            answering.append(gevent.spawn(answer, conn))

    g = gevent.spawn(serve)
    seen["url"] = f"http://127.0.0.1:{listener.getsockname()[1]}"
    yield seen
    gevent.killall([g, *answering])
    listener.close()


@pytest.mark.parametrize("backend", ["vllm", "claude", "gemini", "ollama"])
def test_every_sdk_asks_for_identity_and_a_bomb_is_cut_while_inflating(backend: str, bomb_server, monkeypatch) -> None:
    import argparse

    from locust.env import Environment

    from llm_users import users

    monkeypatch.setenv("LLM_TEST_KEY", "sk-test")
    base = {"vllm": users.VLLMUser, "claude": users.ClaudeUser, "gemini": users.GeminiUser,
            "ollama": users.OllamaUser}[backend]
    cls = type(f"Bomb{backend}", (base,), {"abstract": False, "host": bomb_server["url"], "warmup_requests": 0})
    opts = argparse.Namespace(llm_client="sdk", llm_api_key_env="LLM_TEST_KEY", llm_model="m")
    user = cls(Environment(user_classes=[cls], host=bomb_server["url"], parsed_options=opts))
    rec = user.send([{"role": "user", "content": "hi"}])
    user.on_stop()
    assert bomb_server["accept_encoding"] == ["identity"]
    assert (rec.status, rec.error_category) == ("error", "response_too_large"), rec.error_message
    assert "of the body over 8 MiB without its end" in rec.error_message  # cut at 8 of its 64 MiB
