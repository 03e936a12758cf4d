"""Issue 54: the response bounds' options, defaults and the runaway rule (llm_users/protocols/limits.py)."""

from __future__ import annotations

import pytest

from llm_users.errors import ConfigError
from llm_users.protocols import limits
from llm_users.protocols.limits import KiB, Limits, MiB, parse_limits, parse_size


@pytest.mark.parametrize(("text", "size"), [
    ("65536", 65536), ("64KiB", 64 * KiB), ("64k", 64 * KiB), ("8MiB", 8 * MiB), ("8 mib", 8 * MiB),
    ("300KB", 300_000), ("1.5MiB", 3 * MiB // 2), ("2GiB", 2 << 30), ("1GB", 10**9),
])
def test_each_size_form(text: str, size: int) -> None:
    assert parse_size(text, "--llm-max-event-bytes") == size


@pytest.mark.parametrize("text", ["", "lots", "8 parsecs", "-1MiB", "1000", "0"])
def test_a_size_below_1_kib_or_unreadable_is_refused_naming_the_option(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^--llm-max-body-bytes must be a size of at least 1KiB"):
        parse_size(text, "--llm-max-body-bytes")


def test_the_defaults_are_far_above_real_servers() -> None:
    d = parse_limits(None)
    assert d == Limits() == parse_limits({"llm_max_event_bytes": None, "llm_max_chunks": ""})
    # the simulator's big_frame fault (one 4 MiB SSE event) must pass; the largest embeddings
    # batch (2048 x 4096 floats, ~22 bytes each) must fit whole
    assert d.event_bytes > 4 * MiB + 64 * KiB
    assert d.body_bytes > 2048 * 4096 * 22
    assert d.header_bytes == 64 * KiB


def test_options_set_each_bound() -> None:
    got = parse_limits({"llm_max_event_bytes": "1MiB", "llm_max_body_bytes": "4MiB", "llm_max_header_bytes": "8KiB",
                        "llm_max_chunks": "100"})
    assert got == Limits(event_bytes=MiB, body_bytes=4 * MiB, header_bytes=8 * KiB, chunks=100)


@pytest.mark.parametrize("value", ["0", "-3", "many", "1.5"])
def test_max_chunks_must_be_a_whole_number(value: str) -> None:
    with pytest.raises(ConfigError, match="--llm-max-chunks must be a whole number"):
        parse_limits({"llm_max_chunks": value})


def test_the_runaway_bound_is_a_multiple_of_the_max_tokens_with_a_floor() -> None:
    d = Limits()
    assert d.max_chunks(8) == 4096 and d.max_chunks(None) == 4096  # short asks: the floor
    assert d.max_chunks(512) == 4096 and d.max_chunks(4096) == 8 * 4096
    assert Limits(chunks=50).max_chunks(4096) == 50  # --llm-max-chunks: fixed


def test_messages_name_the_bound_and_the_option() -> None:
    assert str(limits.event_too_large("an SSE event", 8 * MiB)).startswith(
        "response_too_large: an SSE event over 8 MiB without its end (--llm-max-event-bytes")
    assert "over 256 MiB (--llm-max-body-bytes" in str(limits.body_too_large(256 * MiB))
    assert "over 64 KiB (--llm-max-header-bytes)" in str(limits.head_too_large(64 * KiB))
    e = limits.runaway(4097, 8, 4096, fixed=False)
    assert e.category == "runaway_stream" and "4097 token chunks with max tokens 8" in e.message
    assert "--llm-max-chunks" in e.message and limits.size_text(1000) == "1000 bytes"


def test_configure_sets_the_process_bounds() -> None:
    before = limits.CURRENT
    try:
        limits.configure(Limits(event_bytes=2 * KiB))
        from llm_users.protocols.sse import SSEDecoder

        assert SSEDecoder().max_bytes == 2 * KiB  # a parser made now reads them
    finally:
        limits.configure(before)


def test_the_options_are_declared_with_the_configuration() -> None:
    from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments

    from llm_users import options

    parser = get_empty_argument_parser()
    setup_parser_arguments(parser)
    options.add_arguments(parser)
    parsed = parser.parse_args(["-f", "locustfile.py", "--llm-max-event-bytes", "1MiB", "--llm-max-chunks", "9"])
    assert parse_limits(vars(parsed)) == Limits(event_bytes=MiB, chunks=9)
