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


def rec(**kw: object) -> RequestRecord:
    fields: dict = {"request_id": "r", "name": "/v1/chat/completions", "backend": "vllm", "model": "m", **kw}
    return RequestRecord(**fields)


def test_request_state_passes_the_reasoning_flag() -> None:
    r = rec()
    st = RequestState(r, OpenAIStreamParser())
    r.t0_ns = 0
    st.handle([Content("think", reasoning=True)], 10)
    st.handle([Content("think", reasoning=True), Content("Hi")], 20)  # one delta with both: two chunks
    st.handle([Usage(3, 4, 2)], 30)
    assert (r.ttft_ns, r.ttst_ns, r.ttfo_ns, r.reasoning_chunks, r.output_chars) == (10, 20, 20, 2, 2)


def test_a_tool_delta_is_a_chunk_and_marks_the_record() -> None:
    r = RequestRecord(request_id="a", name="n", backend="vllm", model="m", t0_ns=1_000, reply=[])
    state = RequestState(r, OpenAIStreamParser())
    state.handle([Content('{"city":', tool=True)], 5_000)
    assert r.ttft_ns == 4_000 and r.tool_call  # TTFT from the first argument piece
    state.handle([Content('"Paris"}', tool=True)], 9_000)
    assert (r.ttft_ns, r.itl_ns, r.chunks, r.tool_call) == (4_000, [4_000], 2, True)
    assert "".join(r.reply) == '{"city":"Paris"}'  # kept to judge a forced-tool JSON answer
    text = RequestRecord(request_id="b", name="n", backend="vllm", model="m", t0_ns=0)
    RequestState(text, OpenAIStreamParser()).handle([Content("hi")], 10)
    assert text.tool_call is False and text.structured_valid is None
    assert {"tool_call", "structured_valid"} <= set(text.to_dict())


def test_a_tool_call_after_reasoning_is_the_first_output() -> None:
    """TTFO (issue 30 item 3) counts a tool call's first arguments piece as the answer's start."""
    r = RequestRecord(request_id="c", name="n", backend="vllm", model="m", t0_ns=0)
    state = RequestState(r, OpenAIStreamParser())
    state.handle([Content("let me think", reasoning=True)], 100)
    state.handle([Content('{"a":', tool=True)], 250)
    state.handle([Content("1}", tool=True)], 300)
    assert (r.ttft_ns, r.ttfo_ns, r.ttst_ns, r.chunks, r.tool_call) == (100, 250, 250, 3, True)
    assert r.output_chars == len('{"a":1}')  # the arguments are output text; reasoning is not
