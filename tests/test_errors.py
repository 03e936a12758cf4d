"""errors.py: the failure tree: each class's stable category, ``str()`` as ``category: message``, an
HTTP status as ``http_<status>``, a stream error's own code, and a cancel stamped once."""

from __future__ import annotations

import pytest

from llm_users import errors
from llm_users.errors import (
    Cancelled,
    ConfigError,
    HTTPStatusError,
    LLMRequestError,
    ServerOverloaded,
    ServerStreamError,
)

#: class -> (category, its parent in the tree)
TREE = {
    errors.TransportError: ("connection_error", LLMRequestError),
    errors.ConnectError: ("connect_error", errors.TransportError),
    errors.TLSError: ("tls_error", errors.ConnectError),
    errors.ConnectionResetError_: ("connection_reset", errors.TransportError),
    errors.TimeoutError_: ("timeout", errors.TransportError),
    errors.ConnectTimeout: ("connect_timeout", errors.TimeoutError_),
    errors.FirstByteTimeout: ("first_byte_timeout", errors.TimeoutError_),
    errors.ReadTimeout: ("read_timeout", errors.TimeoutError_),
    errors.TotalTimeout: ("total_timeout", errors.TimeoutError_),
    errors.ProtocolError: ("malformed_stream", LLMRequestError),
    errors.StreamTruncated: ("stream_truncated", errors.ProtocolError),
    errors.EmptyResponse: ("empty_response", errors.ProtocolError),
    errors.WrongResultCount: ("wrong_result_count", errors.ProtocolError),
    errors.ResponseTooLarge: ("response_too_large", errors.ProtocolError),
    errors.RunawayStream: ("runaway_stream", errors.ProtocolError),
    ServerStreamError: ("server_error", LLMRequestError),
    ServerOverloaded: ("server_overloaded", ServerStreamError),
    errors.SDKError: ("sdk_error", LLMRequestError),
    Cancelled: ("cancelled", LLMRequestError),
}


@pytest.mark.parametrize("cls", list(TREE), ids=lambda c: c.__name__)
def test_each_class_has_its_category_and_its_place_in_the_tree(cls: type) -> None:
    category, parent = TREE[cls]
    err = cls("went wrong")
    assert err.category == category and cls.__bases__ == (parent,)
    assert str(err) == f"{category}: went wrong" and err.message == "went wrong" and err.status is None


def test_str_is_category_and_message_and_a_category_may_be_given() -> None:
    err = LLMRequestError("payload b'abc'", status=502, category="malformed_stream")
    assert str(err) == "malformed_stream: payload b'abc'" and err.status == 502
    assert LLMRequestError("x").category == "error"  # the class's own stays for the others
    assert errors.ProtocolError("x", category="stream_truncated").category == "stream_truncated"
    assert errors.ProtocolError("y").category == "malformed_stream"


def test_an_http_status_is_its_category() -> None:
    err = HTTPStatusError("HTTP 503: busy", status=503, retry_after="3")
    assert (err.category, err.status, err.retry_after, str(err)) == ("http_503", 503, "3", "http_503: HTTP 503: busy")
    assert HTTPStatusError("HTTP 404", status=404).retry_after is None
    assert isinstance(err, LLMRequestError)


def test_a_stream_error_keeps_the_payloads_code_and_no_http_status() -> None:
    err = ServerOverloaded("busy", code=503)
    assert (err.category, err.code, err.status) == ("server_overloaded", 503, None)
    assert ServerStreamError("boom", code="E42", category="server_overloaded").category == "server_overloaded"
    assert ServerStreamError("boom").code is None


def test_a_cancel_is_stamped_once_by_the_first_handler() -> None:
    c = Cancelled("the client cancelled the request after 3 token chunks")
    assert c.at_ns is None
    assert c.stamp() is c
    first = c.at_ns
    assert isinstance(first, int)
    assert c.stamp().at_ns == first  # a later handler keeps the first instant
    assert Cancelled("another").at_ns is None  # the instant is the instance's, not the class's


def test_a_config_error_is_no_request_failure() -> None:
    assert not issubclass(ConfigError, LLMRequestError) and issubclass(ConfigError, Exception)
    assert str(ConfigError("--llm-rate must be a number")) == "--llm-rate must be a number"
