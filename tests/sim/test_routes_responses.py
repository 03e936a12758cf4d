"""The simulator's ``/v1/responses``, judged by the openai SDK: its Responses streaming parses
every stream, each event validates against the SDK's own type for it (sequence numbers, item
ids, indices, the whole response with usage), and the text and counts are the ground truth's.
Chaining by ``previous_response_id`` gives the same prompt as sending the whole history."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from llm_users.sim.launcher import SimProcess, start_simulator
from llm_users.sim.text import expected_text
from tests.helpers import get_json
from tests.sim.simhttp import trace

SEED = 21
REASONING = 3
PROMPT = "Tell me a story about a lighthouse keeper"


def _event_types() -> dict[str, Any]:
    union = ResponseStreamEvent
    if typing.get_origin(union) is typing.Annotated:
        union = typing.get_args(union)[0]
    return {typing.get_args(c.model_fields["type"].annotation)[0]: c for c in typing.get_args(union)}


EVENT_TYPES = _event_types()


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with start_simulator(["--seed", str(SEED), "--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "10",
                          "--reasoning-tokens", str(REASONING), "--trace-prompts"]) as s:
        yield s
        errors = s.stderr_text()
    assert "Traceback" not in errors, errors


def _client(sim: SimProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0, timeout=10)


def _stream(sim: SimProcess, rid: str, **kw: Any) -> list[Any]:
    events = list(_client(sim).responses.create(model="gpt-5-mini", stream=True, extra_headers={"X-Request-Id": rid},
                                                **kw))
    for ev in events:  # strict: every field the SDK's type for this event requires, with its type
        EVENT_TYPES[ev.type].model_validate(ev.to_dict())
    return events


@pytest.mark.parametrize(("max_output_tokens", "end"), [(10, "response.incomplete"), (64, "response.completed")])
def test_sdk_parses_the_stream_with_reasoning(sim, max_output_tokens: int, end: str) -> None:
    rid = f"resp-{max_output_tokens}"
    events = _stream(sim, rid, input=[{"type": "message", "role": "user", "content": PROMPT}],
                     max_output_tokens=max_output_tokens, temperature=0, top_p=1)
    rec = trace(sim.url, rid)
    assert rec["completed"] and rec["output_tokens"] == 10
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-1] == end and types.count(end) == 1
    assert [e.sequence_number for e in events] == list(range(len(events)))
    reasoning = [e for e in events if e.type == "response.reasoning_text.delta"]
    text = [e for e in events if e.type == "response.output_text.delta"]
    assert len(reasoning) == REASONING and len(text) == 10 - REASONING  # one token per delta
    expected = expected_text(SEED, PROMPT, 10)
    assert "".join(e.delta for e in reasoning) + "".join(e.delta for e in text) == expected
    assert {(e.item_id, e.output_index) for e in reasoning} == {(reasoning[0].item_id, 0)}
    assert {(e.item_id, e.output_index, e.content_index) for e in text} == {(text[0].item_id, 1, 0)}
    final = events[-1].response
    assert final.status == ("incomplete" if end == "response.incomplete" else "completed")
    if final.status == "incomplete":
        assert final.incomplete_details.reason == "max_output_tokens"
    assert final.output_text == "".join(e.delta for e in text)
    u = final.usage
    assert (u.input_tokens, u.output_tokens, u.output_tokens_details.reasoning_tokens) == (
        rec["input_tokens"], 10, REASONING)
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert events[0].response.id == final.id and final.model == "gpt-5-mini"


def test_chained_request_is_the_whole_history(sim) -> None:
    """previous_response_id + the new message == the full history as input: same prompt, same
    input tokens, same answer; an unknown id is OpenAI's 400."""
    first = _stream(sim, "chain-1", input=PROMPT, max_output_tokens=64)[-1].response
    chained = _stream(sim, "chain-2", input="And then?", previous_response_id=first.id, max_output_tokens=64)
    full = _stream(sim, "chain-3", max_output_tokens=64, input=[
        {"type": "message", "role": "user", "content": PROMPT},
        {"type": "message", "role": "assistant", "content": first.output_text},
        {"type": "message", "role": "user", "content": "And then?"}])
    a, b = trace(sim.url, "chain-2"), trace(sim.url, "chain-3")
    assert a["prompt"] == b["prompt"] == "\n".join([PROMPT, first.output_text, "And then?"])
    assert a["input_tokens"] == b["input_tokens"] and a["messages"] == b["messages"] == 3
    assert chained[-1].response.output_text == full[-1].response.output_text
    assert chained[-1].response.previous_response_id == first.id
    assert get_json(sim.url + "/_sim/responses")["chained"] >= 1
    with pytest.raises(openai.BadRequestError) as e:
        _client(sim).responses.create(model="m", input="x", previous_response_id="resp_unknown", stream=True)
    assert e.value.body["code"] == "previous_response_not_found"


def test_non_streaming_body_and_faults(sim) -> None:
    r = httpx.post(sim.url + "/v1/responses", json={"model": "m", "input": PROMPT, "max_output_tokens": 4})
    resp = Response.model_validate(r.json())
    assert resp.status == "incomplete" and resp.usage.output_tokens == 4
    assert resp.output_text == expected_text(SEED, PROMPT, 4)[len(expected_text(SEED, PROMPT, REASONING)):]
    # a mid-stream error is response.failed with the error: the SDK yields it, the stream ends there
    events = list(_client(sim).responses.create(model="m", input=PROMPT, stream=True,
                                                extra_headers={"X-Sim-Fault": "midstream_error;after=2"}))
    assert events[-1].type == "response.failed" and events[-1].response.error.code == "server_error"
    EVENT_TYPES["response.failed"].model_validate(events[-1].to_dict())
    bad = httpx.post(sim.url + "/v1/responses", json={"model": "m", "input": []})
    assert bad.status_code == 400 and "input" in bad.json()["error"]["message"]


def test_a_function_tool_is_called_in_openais_event_shapes(sim) -> None:
    """--llm-tools on the Responses API: a function_call item whose arguments stream as
    response.function_call_arguments.delta, each event valid against the SDK's type; the
    arguments JSON of the tool's schema, the answer's words in its string."""
    import json

    tool = {"type": "function", "name": "get_weather", "description": "Weather of a city", "strict": False,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                           "required": ["city", "days"]}}
    events = _stream(sim, "resp-tool", input=PROMPT, max_output_tokens=64, tools=[tool])
    kinds = [e.type for e in events]
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(deltas) == 10 - REASONING and "response.output_text.delta" not in kinds
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert "".join(d.delta for d in deltas) == done.arguments
    args = json.loads(done.arguments)
    assert args["days"] == 1 and args["city"].split() == expected_text(SEED, PROMPT, 10).split()[REASONING:]
    final = events[-1].response
    (call,) = [o for o in final.output if o.type == "function_call"]
    assert call.name == "get_weather" and call.arguments == done.arguments and call.call_id


@pytest.mark.parametrize("mode", ["summary", "hidden"])
def test_sdk_parses_summarised_and_hidden_reasoning(mode: str) -> None:
    """``--reasoning-stream`` (issue 53 item 4): 8 reasoning tokens counted; a summary streams the
    last 2 as ``response.reasoning_summary_text.delta`` (the item's ``summary``), hidden none (the
    item ends with ``summary: []`` as the answer starts). Every event validates strictly, the
    sequence numbers count up, usage still says 8."""
    with start_simulator(["--seed", str(SEED), "--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "12",
                          "--reasoning-tokens", "8", "--reasoning-stream", mode]) as s:
        events = _stream(s, f"resp-{mode}", input=PROMPT, max_output_tokens=64)
    types = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert not any(t.startswith("response.reasoning_text") for t in types)
    summary = [e for e in events if e.type == "response.reasoning_summary_text.delta"]
    text = [e for e in events if e.type == "response.output_text.delta"]
    expected = expected_text(SEED, PROMPT, 12)
    assert len(summary) == (2 if mode == "summary" else 0) and len(text) == 4
    item = next(e.item for e in events if e.type == "response.output_item.done" and e.item.type == "reasoning")
    if mode == "summary":
        assert {(e.output_index, e.summary_index) for e in summary} == {(0, 0)}
        assert types.index("response.reasoning_summary_part.added") < types.index(summary[0].type)
        said = "".join(e.delta for e in summary)
        assert [p.text for p in item.summary] == [said]
        assert expected.startswith(said, len(expected_text(SEED, PROMPT, 6)))  # the reasoning's last 2 tokens
    else:
        assert item.summary == [] and not item.content
    assert types.index("response.output_item.done") < types.index("response.output_text.delta")
    final = events[-1].response
    assert final.output_text == "".join(e.delta for e in text)
    assert (final.usage.output_tokens, final.usage.output_tokens_details.reasoning_tokens) == (12, 8)
