"""Whole bodies in raw mode (llm_users/client/bodies.py): the small JSON calls' body within the
body bound, an error body's message, a compressed body named (issue 54)."""

from __future__ import annotations

import pytest

from llm_users.client.bodies import BodyCollector, compression, refuse_encoding, status_error
from llm_users.errors import ProtocolError, ResponseTooLarge
from llm_users.protocols import limits


def test_a_small_call_s_body_is_cut_past_the_body_bound() -> None:
    before = limits.CURRENT
    limits.configure(limits.Limits(body_bytes=4096))
    try:
        body = BodyCollector()
        body.feed(b"{" * 4000)
        with pytest.raises(ResponseTooLarge, match="--llm-max-body-bytes"):
            body.feed(b"{" * 200)
    finally:
        limits.configure(before)


@pytest.mark.parametrize("value", [b"gzip", b" GZip ", b"br", b"deflate", b"zstd"])
def test_a_compressed_2xx_body_fails_naming_its_encoding(value: bytes) -> None:
    name = value.decode().strip().lower()
    with pytest.raises(ProtocolError) as info:
        refuse_encoding(200, value)
    assert info.value.category == "malformed_stream"
    assert f"HTTP 200 with a {name}-compressed body (Content-Encoding: {name})" in info.value.message
    assert "asked for identity" in info.value.message


def test_identity_is_no_compression() -> None:
    refuse_encoding(200, b"identity")
    refuse_encoding(200, b"")
    assert compression(None) is None and compression("Identity") is None and compression(b"br") == "br"


def test_an_error_status_says_its_body_was_compressed_instead_of_quoting_it() -> None:
    err = status_error(503, b"\x1f\x8b\x08\x00garbage", {b"content-encoding": b"gzip", b"retry-after": b"3"})
    assert err.category == "http_503" and err.retry_after == "3"
    assert err.message == "HTTP 503: a gzip-compressed body, not inflated"
    plain = status_error(429, b'{"error": {"message": "slow down"}}', {})
    assert plain.message == "HTTP 429: slow down"
