"""sim/tools.py: the simulator's JSON answers validate and stream the words; tool_choice picks
the tool."""

from __future__ import annotations

import json

import jsonschema
import pytest

from llm_users.sim.base import Job
from llm_users.sim.text import vocabulary_bytes
from llm_users.sim.tools import openai_shape, shape_for

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
