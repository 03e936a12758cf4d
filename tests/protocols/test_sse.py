"""The incremental SSE decoder: line endings, the optional space, comments, events, splits."""

from __future__ import annotations

import random

import pytest

from llm_users.protocols.sse import SSEDecoder


def decode(data: bytes) -> list[tuple[bytes | None, bytes]]:
    d = SSEDecoder()
    return d.feed(data) + d.close()


def decode_all_splits(data: bytes) -> list[tuple[bytes | None, bytes]]:
    """Decode whole, at every cut and byte by byte; all must agree."""
    whole = decode(data)
    for i in range(len(data) + 1):
        d = SSEDecoder()
        assert d.feed(data[:i]) + d.feed(data[i:]) + d.close() == whole, f"cut at {i}"
    d = SSEDecoder()
    got = []
    for i in range(len(data)):
        got += d.feed(data[i : i + 1])
    assert got + d.close() == whole
    return whole


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("sep", [b"data: ", b"data:"])
def test_line_endings_and_optional_space(eol: bytes, sep: bytes) -> None:
    data = sep + b'{"a":1}' + eol + eol + sep + b"[DONE]" + eol + eol
    assert decode_all_splits(data) == [(None, b'{"a":1}'), (None, b"[DONE]")]


def test_only_one_leading_space_is_removed() -> None:
    assert decode(b"data:  x\n\n") == [(None, b" x")]


def test_multiline_data_joins_with_newline() -> None:
    assert decode_all_splits(b"data: a\ndata: b\r\ndata:c\n\n") == [(None, b"a\nb\nc")]


def test_comments_and_keepalives_are_skipped() -> None:
    data = b": keep-alive\n\n:\n\ndata: x\n: ping inside a frame\n\n: trailing\n"
    assert decode_all_splits(data) == [(None, b"x")]


def test_event_names_apply_to_their_frame_only() -> None:
    data = b"event: ping\ndata: {}\n\ndata: plain\n\nevent: error\r\ndata: boom\r\n\r\n"
    assert decode_all_splits(data) == [(b"ping", b"{}"), (None, b"plain"), (b"error", b"boom")]


def test_frame_without_data_is_not_dispatched() -> None:
    assert decode_all_splits(b"event: lonely\n\nid: 7\nretry: 10\n\ndata: y\n\n") == [(None, b"y")]


def test_close_dispatches_a_frame_missing_its_blank_line() -> None:
    assert decode(b"data: last\n") == [(None, b"last")]
    assert decode(b"data: last\r") == [(None, b"last")]
    assert decode(b"data: last\r\n") == [(None, b"last")]


def test_close_drops_a_partial_last_line() -> None:
    assert decode(b'data: {"a":1}\n\ndata: {"b":') == [(None, b'{"a":1}')]


def test_cr_at_the_end_of_a_piece_ends_the_line_and_swallows_a_following_lf() -> None:
    # A CR is a line end on its own (WHATWG): the frame goes out at once, not one piece later;
    # a LF that starts the next piece is the second half of a CRLF, not a blank line.
    d = SSEDecoder()
    assert d.feed(b"data: x\r") == []
    assert d.feed(b"\n") == []
    assert d.feed(b"\r") == [(None, b"x")]
    assert d.feed(b"\n") == []
    assert d.feed(b"data: y\r\n\r") == [(None, b"y")]
    assert d.feed(b"\ndata: z\n\n") == [(None, b"z")]
    assert d.close() == []


def test_mixed_endings_in_one_stream() -> None:
    data = b"data: 1\r\n\ndata: 2\n\r\ndata: 3\r\rdata: 4\n\n"
    assert decode_all_splits(data) == [(None, b"1"), (None, b"2"), (None, b"3"), (None, b"4")]


def test_field_without_colon_and_unknown_fields() -> None:
    # "data" alone is a data field with an empty value; unknown fields are ignored.
    assert decode(b"data\ndata: x\nfoo: bar\n\n") == [(None, b"\nx")]


def test_utf8_split_inside_a_character() -> None:
    data = 'data: {"t":"héllo ✓"}\n\n'.encode()
    assert decode_all_splits(data) == [(None, '{"t":"héllo ✓"}'.encode())]


def test_pieces_of_whole_frames_decode_as_byte_by_byte() -> None:
    """Pieces that end on a frame boundary take a faster path; it must give exactly what the
    line-by-line path gives, whatever the frames hold (events, comments, several data lines,
    extra blank lines, data without the space, empty data)."""
    rng = random.Random(7)
    lines = [b"data: {\"a\":1}", b"data:{\"b\":2}", b"data: ", b"data", b"event: ping", b": keep-alive",
             b"id: 4", b"data: [DONE]", b"retry: 10"]
    for _ in range(300):
        frames = [b"\n".join(rng.choices(lines, k=rng.randint(1, 3))) + b"\n" * rng.randint(2, 3)
                  for _ in range(rng.randint(1, 8))]
        stream = b"".join(frames)
        slow = SSEDecoder()
        want = [f for i in range(len(stream)) for f in slow.feed(stream[i : i + 1])] + slow.close()
        fast = SSEDecoder()
        cuts = sorted(rng.sample(range(1, len(frames)), rng.randint(0, len(frames) - 1))) if len(frames) > 1 else []
        pieces = [b"".join(frames[a:b]) for a, b in zip([0, *cuts], [*cuts, len(frames)], strict=True)]
        assert [f for p in pieces for f in fast.feed(p)] + fast.close() == want, pieces


@pytest.mark.parametrize(("piece", "payload"), [
    (b'data: {"a":1}\n\n', b'{"a":1}'),  # vLLM, OpenAI
    (b'data:{"a":1}\n\n', b'{"a":1}'),  # TGI: no space
    (b'data: {"a":1}\r\n\r\n', b'{"a":1}'),  # Gemini: CRLF
    (b"data: [DONE]\n\n", b"[DONE]"),
    (b"data:\n\n", b""),
])
def test_a_lone_data_frame_is_taken_whole(piece: bytes, payload: bytes) -> None:
    assert SSEDecoder().lone_data(piece) == payload
    assert decode(piece) == [(None, payload)]


@pytest.mark.parametrize("piece", [
    b"event: x\ndata: 1\n\n", b"data: 1\ndata: 2\n\n", b"data: 1\n\ndata: 2\n\n", b"data: 1\n\n\n",
    b"data: 1\n", b"data: a\rb\n\n", b"data: 1\r\r", b"data: 1\r\n\n", b": ping\n\n", b"data: 1\n\r\n",
])
def test_anything_else_is_left_to_feed(piece: bytes) -> None:
    assert SSEDecoder().lone_data(piece) is None


def test_the_lone_frame_path_decodes_as_byte_by_byte() -> None:
    """The parsers try ``lone_data`` before ``feed`` on every piece: together they must give what
    feeding byte by byte gives, for any line ending, any split and anything left pending."""
    rng = random.Random(11)
    lines = [b'data: {"a":1}', b'data:{"b":2}', b"data: ", b"data:", b"event: ping", b": keep-alive",
             b"data: [DONE]", b"data: x\ry"]
    for _ in range(400):
        eol = rng.choice([b"\n", b"\r\n", b"\r"])
        frames = [eol.join(rng.choices(lines, k=rng.choice([1, 1, 1, 2]))) + eol * rng.randint(2, 3)
                  for _ in range(rng.randint(1, 8))]
        stream = b"".join(frames)
        slow = SSEDecoder()
        want = [f for i in range(len(stream)) for f in slow.feed(stream[i : i + 1])] + slow.close()
        if rng.random() < 0.5:  # cut at frame boundaries: lone frames are common
            cuts = sorted(rng.sample(range(1, len(frames)), rng.randint(0, len(frames) - 1))) if len(frames) > 1 else []
            pieces = [b"".join(frames[a:b]) for a, b in zip([0, *cuts], [*cuts, len(frames)], strict=True)]
        else:  # anywhere
            cuts = sorted(set(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(0, 6)))))
            pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        fast = SSEDecoder()
        got: list = []
        for p in pieces:
            lone = fast.lone_data(p)
            got += [(None, lone)] if lone is not None else fast.feed(p)
        assert got + fast.close() == want, pieces


# issue 54: an event that never ends is cut at the bound, as it grows ------------------------------
def test_a_line_that_never_ends_is_cut_at_the_bound_holding_no_more() -> None:
    from llm_users.errors import ResponseTooLarge

    d = SSEDecoder(max_bytes=64 * 1024)
    piece = b"x" * 16384
    d.feed(b'data: {"choices":[{"delta":{"content":"')
    fed = 0
    with pytest.raises(ResponseTooLarge, match=r"an SSE event over 64 KiB without its end \(--llm-max-event-bytes"):
        for _ in range(100):  # the old decoder took every piece (2.7 GB in 20 s against a real server)
            d.feed(piece)
            fed += 1
    assert fed == 3  # cut in the piece that passed the bound
    assert not d._buf and not d._data  # and what it held let go (a failure's traceback keeps the decoder a while)


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
def test_a_frame_whose_data_lines_end_but_never_the_frame_is_cut(eol: bytes) -> None:
    from llm_users.errors import ResponseTooLarge

    d = SSEDecoder(max_bytes=8192)
    line = b"data: " + b"y" * 90 + eol  # each line ends; no blank line ever ends the frame
    with pytest.raises(ResponseTooLarge):
        for _ in range(200):
            d.feed(line * 4)


def test_events_up_to_the_bound_pass_in_any_pieces() -> None:
    frame = b"event: big\ndata: " + b"z" * 9000 + b"\ndata: tail\n\n"
    for size in (1, 7, 4096, len(frame)):
        d = SSEDecoder(max_bytes=9200)
        got = [f for i in range(0, len(frame), size) for f in d.feed(frame[i:i + size])] + d.close()
        assert got == [(b"big", b"z" * 9000 + b"\ntail")], size


@pytest.mark.parametrize("size", [1, 7, 333, 4096])
def test_an_open_frame_is_counted_across_pieces_and_frames(size: int) -> None:
    """Three frames of 100 data lines (5,000 bytes of data each), in pieces of any size: under a
    bound of 6,000 every frame passes (the count starts again with each frame); under 4,000 the
    first is cut."""
    from llm_users.errors import ResponseTooLarge

    frame = b"".join(b"data: %s\n" % (b"%02d" % i * 25) for i in range(100)) + b"\n"
    stream = frame * 3
    d = SSEDecoder(max_bytes=6000)
    got = [f for i in range(0, len(stream), size) for f in d.feed(stream[i:i + size])]
    assert len(got) == 3 and all(len(payload) == 5000 + 99 for _, payload in got)
    d = SSEDecoder(max_bytes=4000)
    with pytest.raises(ResponseTooLarge):
        for i in range(0, len(stream), size):
            d.feed(stream[i:i + size])
