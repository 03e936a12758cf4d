"""Issue 30 item 2, the pure parts: a tool-call delta is a token-bearing chunk that marks the
record, the counts and their merge through the wire form, the console line, and the simulator's
JSON answers built from a schema."""

from __future__ import annotations

import json

import jsonschema
import msgpack
import pytest

from llm_users.client.request_state import RequestState
from llm_users.metrics import RequestRecord, Stats, StatsByName
from llm_users.outputs.console import tools_line
from llm_users.protocols.base import Content
from llm_users.protocols.openai import OpenAIStreamParser
from llm_users.sim.base import Job
from llm_users.sim.text import vocabulary_bytes
from llm_users.sim.tools import openai_shape, shape_for


def rec(i: int, **kw) -> RequestRecord:
    base = dict(request_id=f"r{i}", name="/v1/chat/completions", backend="vllm", model="m", start_time=100.0 + i,
                ttfb_ns=1_000_000, ttft_ns=50_000_000, e2e_ns=150_000_000, itl_ns=[10_000_000] * 10,
                output_tokens=11, input_tokens=7, tokens_source="usage")
    base.update(kw)
    return RequestRecord(**base)


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


def test_counts_merge_exactly_through_the_wire() -> None:
    records = [rec(0, tool_call=True), rec(1, structured_valid=True), rec(2, structured_valid=False),
               rec(3, tool_call=True, structured_valid=True), rec(4, warmup=True, tool_call=True),
               rec(5, status="error", error_category="http_500", tool_call=True)]
    whole = StatsByName()
    for r in records:
        whole.add(r)
    merged = Stats()
    for r in records:  # one worker per record, shipped as Locust ships it
        part = Stats()
        part.add(r)
        merged.merge_wire(msgpack.unpackb(msgpack.packb(part.to_wire())))
    for ov in (whole.summary()["overall"], merged.summary()):
        assert (ov["tool_calls"], ov["structured_valid"], ov["structured_invalid"]) == (2, 2, 1)
    assert merged.summary() == whole.total.summary()
    assert Stats().summary()["tool_calls"] == 0


def test_console_line() -> None:
    assert tools_line({"tool_calls": 0, "structured_valid": 0, "structured_invalid": 0}) is None
    assert tools_line({"tool_calls": 3, "successes": 4}) == "answers: 3 of 4 answers were tool calls"
    assert tools_line({"structured_valid": 3, "structured_invalid": 1}) == \
        "answers: structured output: 3 valid, 1 invalid (75.0% valid)"


SCHEMAS = [
    {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 3},
                                      "unit": {"enum": ["c", "f"]}, "ok": {"type": "boolean"},
                                      "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                                      "at": {"type": "object", "properties": {"lat": {"type": "number"}}}},
     "required": ["city", "days", "unit"], "additionalProperties": False},
    {"type": "OBJECT", "properties": {"score": {"type": "NUMBER"}}},  # Gemini's responseSchema spelling
    {"type": "object"},
    {"type": "array", "items": {"type": "integer"}},  # no place for text: an object with the words
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_simulators_json_answer_validates_and_streams_the_words(schema: dict) -> None:
    words = list(vocabulary_bytes()[:5])
    for stream in (True, False):
        job = Job(protocol="openai", route="r", model="m", prompt="p", input_tokens=1, max_tokens=5, n=5,
                  words=list(words), stream=stream)
        shape = shape_for(schema)
        shape.apply(job)
        text = job.text().decode()
        value = json.loads(text)
        assert value == shape.arguments
        assert " ".join(w.decode().strip() for w in words) in text  # the answer's words, in order
        if schema["type"] != "array":  # (Gemini's upper-case types in JSON Schema's spelling)
            jsonschema.validate(value, json.loads(json.dumps(schema).replace('"OBJECT"', '"object"')
                                                  .replace('"NUMBER"', '"number"')))
        if stream:  # each word goes into a JSON string as it is: escaped once
            assert job.escaped and json.loads(b'"%b"' % b"".join(job.words)) == text
        assert len(job.words) == 5  # one piece per token


def test_tool_choice_picks_the_tool() -> None:
    tools = [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "b"}}]
    assert openai_shape({"tools": tools}).tool == "a"
    assert openai_shape({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "b"}}}).tool == "b"
    assert openai_shape({"tools": tools, "tool_choice": "none"}) is None
    assert openai_shape({"response_format": {"type": "json_object"}}).tool is None
    assert openai_shape({"response_format": {"type": "text"}}) is None


def test_a_tool_call_after_reasoning_is_the_first_output() -> None:
    """TTFO (issue 30 item 3) counts a tool call's first arguments piece as the answer's start."""
    r = RequestRecord(request_id="c", name="n", backend="vllm", model="m", t0_ns=0)
    state = RequestState(r, OpenAIStreamParser())
    state.handle([Content("let me think", reasoning=True)], 100)
    state.handle([Content('{"a":', tool=True)], 250)
    state.handle([Content("1}", tool=True)], 300)
    assert (r.ttft_ns, r.ttfo_ns, r.ttst_ns, r.chunks, r.tool_call) == (100, 250, 250, 3, True)
    assert r.output_chars == len('{"a":1}')  # the arguments are output text; reasoning is not
