"""Issue 54: the runaway bound, judged by the request state both modes share
(llm_users/client/request_state.py): a stream far past the max tokens asked is cut as
``runaway_stream``; below the bound an over-long answer stays a success."""

from __future__ import annotations

import pytest

from llm_users.client.request_state import RequestState
from llm_users.errors import Cancelled, RunawayStream
from llm_users.metrics import RequestRecord
from llm_users.protocols import limits
from llm_users.protocols.base import Content, Finish, Usage
from llm_users.protocols.openai import OpenAIStreamParser


def _state(max_tokens: int | None, cancel_chunks: int = 0) -> RequestState:
    rec = RequestRecord("id", "/v1/chat/completions", "vllm", "m")
    rec.target_output_tokens = max_tokens
    state = RequestState(rec, OpenAIStreamParser(), cancel_chunks=cancel_chunks)
    state.start()
    return state


def _stream(state: RequestState, chunks: int) -> None:
    for i in range(chunks):
        state.handle([Content("x")], state.record.t0_ns + i + 1)


def test_a_stream_past_the_bound_is_cut_as_runaway_at_the_chunk_past_it() -> None:
    state = _state(8)  # the larger of 4096 and 8 x 8
    with pytest.raises(RunawayStream) as info:
        _stream(state, 100_000)  # tokens forever: the old state took them all (2,345 in one real run)
    assert state.record.chunks == 4097 == len(state.record.itl_ns) + 1
    assert "4097 token chunks with max tokens 8: past the runaway bound of 4096" in info.value.message


def test_below_the_bound_an_over_long_answer_is_a_success() -> None:
    state = _state(8)
    _stream(state, 4096)
    state.handle([Usage(3, 4096), Finish("length")], state.record.t0_ns + 5000)
    state.parser.complete, state.parser.frames = True, 4097  # its end signal came
    state.finish(state.record.t0_ns + 6000)
    assert state.record.output_tokens == 4096  # the sampling check flags it (users.py), as before


def test_the_bound_grows_with_the_max_tokens_asked() -> None:
    state = _state(1000)  # 8 x 1000
    _stream(state, 8000)
    with pytest.raises(RunawayStream):
        _stream(state, 1)


def test_a_fixed_bound_from_the_option() -> None:
    before = limits.CURRENT
    limits.configure(limits.Limits(chunks=10))
    try:
        state = _state(8)
        _stream(state, 10)
        with pytest.raises(RunawayStream, match=r"\(--llm-max-chunks\)"):
            _stream(state, 1)
    finally:
        limits.configure(before)


def test_a_cancel_before_the_bound_is_still_a_cancel() -> None:
    state = _state(8, cancel_chunks=5)
    with pytest.raises(Cancelled):
        _stream(state, 100)
    assert state.record.chunks == 5
    beyond = _state(8, cancel_chunks=10_000)  # asked past the bound: the bound cuts first
    with pytest.raises(RunawayStream):
        _stream(beyond, 10_000)
