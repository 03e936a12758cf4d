"""Tools and structured output (issue 30 item 2): the option files, each dialect's request shape
(checked by the official SDKs' request types), the routes that refuse, the answer check, and the
parsers reading tool-call deltas as token-bearing output (whole, cut at every byte, byte-wise)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from anthropic.types import ToolChoiceToolParam, ToolParam
from google.genai import types as genai_types
from ollama._types import Tool as OllamaTool
from openai.types.chat import ChatCompletionFunctionToolParam
from openai.types.shared_params import ResponseFormatJSONObject, ResponseFormatJSONSchema
from pydantic import TypeAdapter

from llm_users.errors import ConfigError
from llm_users.protocols import anthropic, gemini, ollama, openai, tgi
from llm_users.protocols.backend import builtin_backends
from llm_users.protocols.base import Content
from llm_users.protocols.sampling import Sampling
from llm_users.protocols.tools import ToolSpec, check_route, parse_tool_options, structured_valid

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time"}}]
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(WEATHER))
    return {"tools": str(tools), "schema": str(schema)}


def _spec(files: dict[str, str], fmt: str | None = None, tools: bool = True) -> ToolSpec:
    spec = parse_tool_options(files["tools"] if tools else None, fmt)
    assert spec is not None
    return spec


# the options ----------------------------------------------------------------------------------

def test_options_read_once_into_one_spec(files, tmp_path) -> None:
    assert parse_tool_options(None, "") is None
    spec = _spec(files, f"schema:{files['schema']}")
    assert [f["name"] for f in spec.functions] == ["get_weather", "get_time"]
    assert spec.functions[0] == {"name": "get_weather", "description": "Weather of a city", "parameters": WEATHER}
    assert (spec.response_format, spec.schema, spec.schema_name) == ("schema", WEATHER, "answer")
    assert _spec(files, "json").response_format == "json"
    # OpenAI's json_schema wrapper and bare function objects are taken too
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"name": "weather", "schema": WEATHER}))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"name": "lookup", "parameters": WEATHER}))
    spec = parse_tool_options(str(bare), f"schema:{wrapped}")
    assert spec is not None and spec.schema_name == "weather" and spec.functions[0]["name"] == "lookup"


@pytest.mark.parametrize(("content", "tools_or_format", "message"), [
    (None, "tools", "--llm-tools: cannot read"),
    ("{not json", "tools", "is not JSON"),
    ("[]", "tools", "must hold a non-empty JSON list of tools"),
    ('[{"type": "function", "function": {"name": "has space"}}]', "tools", "name must be 1-64 letters"),
    ('[{"name": "a", "parameters": {"type": "string"}}]', "tools", "parameters must be a JSON Schema object"),
    ('[{"name": "a"}, {"name": "a"}]', "tools", "names a tool twice"),
    ('{"type": "nonsense"}', "schema", "is not a valid JSON Schema"),
    ("[1]", "schema", "must hold a JSON Schema object"),
])
def test_bad_files_are_one_clear_line(tmp_path, content, tools_or_format, message) -> None:
    path = tmp_path / "f.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as e:
        if tools_or_format == "tools":
            parse_tool_options(str(path), None)
        else:
            parse_tool_options(None, f"schema:{path}")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_bad_format_value() -> None:
    with pytest.raises(ConfigError, match="--llm-response-format must be json or schema:FILE, got 'yaml'"):
        parse_tool_options(None, "yaml")


# each dialect's request -----------------------------------------------------------------------

def _body(req) -> dict:
    return orjson.loads(req.body)


def test_openai_chat_carries_tools_and_response_format(files) -> None:
    spec = _spec(files, f"schema:{files['schema']}")
    for dialect in ("openai", "vllm", "compat"):
        b = _body(openai.build_request(model="m", messages=MESSAGES, sampling=Sampling(), dialect=dialect, tools=spec))
        assert [t["function"]["name"] for t in b["tools"]] == ["get_weather", "get_time"]
        for tool in b["tools"]:
            TypeAdapter(ChatCompletionFunctionToolParam).validate_python(tool)
        assert b["response_format"] == {"type": "json_schema", "json_schema": {"name": "answer", "schema": WEATHER}}
        TypeAdapter(ResponseFormatJSONSchema).validate_python(b["response_format"])
    b = _body(openai.build_request(model="m", messages=MESSAGES, sampling=Sampling(), tools=_spec(files, "json")))
    assert b["response_format"] == {"type": "json_object"}
    TypeAdapter(ResponseFormatJSONObject).validate_python(b["response_format"])
    plain = _body(openai.build_request(model="m", messages=MESSAGES, sampling=Sampling()))
    assert "tools" not in plain and "response_format" not in plain


def test_anthropic_tools_and_the_forced_json_tool(files) -> None:
    b = _body(anthropic.build_request(model="m", messages=MESSAGES, sampling=Sampling(), tools=_spec(files)))
    assert b["tools"] == [{"name": "get_weather", "description": "Weather of a city", "input_schema": WEATHER},
                          {"name": "get_time", "input_schema": {"type": "object"}}]
    for tool in b["tools"]:
        TypeAdapter(ToolParam).validate_python(tool)
    assert "tool_choice" not in b
    b = _body(anthropic.build_request(model="m", messages=MESSAGES, sampling=Sampling(),
                                      tools=_spec(files, f"schema:{files['schema']}", tools=False)))
    assert b["tools"] == [{"name": "json_answer", "description": "Give the answer as this tool's input.",
                           "input_schema": WEATHER}]
    assert b["tool_choice"] == {"type": "tool", "name": "json_answer"}
    TypeAdapter(ToolChoiceToolParam).validate_python(b["tool_choice"])


def test_gemini_function_declarations_and_json_config(files) -> None:
    spec = _spec(files, f"schema:{files['schema']}")
    b = _body(gemini.build_request(model="m", messages=MESSAGES, sampling=Sampling(), tools=spec))
    assert b["tools"] == [{"functionDeclarations": [
        {"name": "get_weather", "description": "Weather of a city", "parametersJsonSchema": WEATHER},
        {"name": "get_time"}]}]
    config = b["generationConfig"]
    assert config["responseMimeType"] == "application/json" and config["responseJsonSchema"] == WEATHER
    # the SDK's own types take them (SDK mode hands them to it as they are)
    parsed = genai_types.GenerateContentConfig.model_validate({**config, "tools": b["tools"]})
    assert parsed.tools[0].function_declarations[0].parameters_json_schema == WEATHER
    assert parsed.response_json_schema == WEATHER


def test_ollama_tools_and_format(files) -> None:
    b = _body(ollama.build_request(model="m", messages=MESSAGES, sampling=Sampling(),
                                   tools=_spec(files, f"schema:{files['schema']}")))
    assert [OllamaTool.model_validate(t).function.name for t in b["tools"]] == ["get_weather", "get_time"]
    assert b["format"] == WEATHER
    b = _body(ollama.build_request(model="m", messages=MESSAGES, sampling=Sampling(),
                                   tools=_spec(files, "json", tools=False)))
    assert b["format"] == "json" and "tools" not in b


def test_responses_shapes(files) -> None:
    from llm_users.protocols import responses

    b = _body(responses.build_request(model="m", messages=MESSAGES, sampling=Sampling(),
                                      tools=_spec(files, f"schema:{files['schema']}")))
    assert b["tools"] == [{"type": "function", **t["function"]} for t in TOOLS]  # flat, as the Responses API takes them
    fmt = b["text"]["format"]
    assert (fmt["type"], fmt["schema"]) == ("json_schema", WEATHER) and fmt["name"]
    b = _body(responses.build_request(model="m", messages=MESSAGES, sampling=Sampling(),
                                      tools=_spec(files, "json", tools=False)))
    assert b["text"] == {"format": {"type": "json_object"}} and "tools" not in b


def test_tgi_grammar(files) -> None:
    b = _body(tgi.build_request(model="m", messages=MESSAGES, sampling=Sampling(),
                                tools=_spec(files, f"schema:{files['schema']}", tools=False)))
    assert b["parameters"]["grammar"] == {"type": "json", "value": WEATHER}
    b = _body(tgi.build_request(model="m", messages=MESSAGES, sampling=Sampling(),
                                tools=_spec(files, "json", tools=False)))
    assert b["parameters"]["grammar"] == {"type": "json", "value": {"type": "object"}}


@pytest.mark.parametrize(("backend", "endpoint", "tools", "fmt", "message"), [
    ("vllm", "completions", True, None, "use --llm-endpoint chat"),
    ("openai", "completions", False, "json", "use --llm-endpoint chat"),
    ("tgi", "generate_stream", True, None, "its Messages API does: --llm-endpoint chat"),
    ("ollama", "generate", True, None, "Ollama's /api/generate takes no tools"),
    ("claude", "messages", True, "json", "forced tool call"),
])
def test_routes_that_cannot_send_them_refuse(files, backend, endpoint, tools, fmt, message) -> None:
    route = builtin_backends()[backend].route(endpoint)
    with pytest.raises(ConfigError, match=message):
        check_route(_spec(files, fmt, tools=tools), route.protocol, route.path, backend)


def test_routes_that_can_send_them(files) -> None:
    both = _spec(files, "json")
    for backend, endpoint in (("vllm", "chat"), ("openai", "chat"), ("tgi", "chat"), ("ollama", "chat"),
                              ("ollama", "openai"), ("gemini", "generate"), ("vllm", "responses"),
                              ("openai", "responses")):
        route = builtin_backends()[backend].route(endpoint)
        check_route(both, route.protocol, route.path, backend)
    for backend, endpoint in (("tgi", "generate_stream"), ("ollama", "generate"), ("claude", "messages")):
        route = builtin_backends()[backend].route(endpoint)
        check_route(_spec(files, "json", tools=False), route.protocol, route.path, backend)


def test_structured_valid(files) -> None:
    schema = _spec(files, f"schema:{files['schema']}", tools=False)
    assert structured_valid('{"city": "Paris"}', schema)
    assert not structured_valid('{"town": "Paris"}', schema)  # required city missing
    assert not structured_valid('{"city": "Par', schema)  # cut short
    assert structured_valid("[1, 2]", _spec(files, "json", tools=False))
    assert not structured_valid("Paris", _spec(files, "json", tools=False))


# the parsers ----------------------------------------------------------------------------------

def _tool_text(events) -> tuple[str, str, int]:
    tool = "".join(e.text for e in events if isinstance(e, Content) and e.tool)
    text = "".join(e.text for e in events if isinstance(e, Content) and not e.tool)
    return tool, text, sum(isinstance(e, Content) for e in events)


def test_openai_tool_call_deltas_are_output_chunks(harness) -> None:
    data = harness.read("openai", "chat_tool_call.txt")
    s = harness.check(openai.OpenAIStreamParser, data)  # the same events cut at every byte
    events, _ = harness.parse(openai.OpenAIStreamParser, data)
    assert _tool_text(events) == ('{"city":"Paris"}', "", 5)
    assert s.finishes == ["tool_calls"] and s.complete and s.usage.output_tokens == 5


def test_anthropic_input_json_deltas_are_output_chunks(harness) -> None:
    data = harness.read("anthropic", "tool_use.txt")
    s = harness.check(anthropic.AnthropicStreamParser, data)
    events, _ = harness.parse(anthropic.AnthropicStreamParser, data)
    # the empty first partial_json carries no token: not a chunk
    assert _tool_text(events) == ('{"location": "San Francisco, CA"}', "Checking the weather.", 3)
    assert s.tool == '{"location": "San Francisco, CA"}' and s.text == "Checking the weather."
    assert s.finishes == ["tool_use"] and s.complete and s.usage.output_tokens == 89


def test_gemini_function_call_part_is_one_output_chunk(harness) -> None:
    data = harness.read("gemini", "function_call.txt")
    s = harness.check(gemini.GeminiStreamParser, data)
    events, _ = harness.parse(gemini.GeminiStreamParser, data)
    tool, text, chunks = _tool_text(events)
    assert json.loads(tool) == {"location": "Paris", "unit": "celsius"} and text == "" and chunks == 1
    assert s.finishes == ["STOP"] and s.complete and s.usage.output_tokens == 18


def test_ollama_tool_calls_are_one_output_chunk(harness) -> None:
    data = harness.read("ollama", "chat_tool_call.ndjson")
    s = harness.check(ollama.OllamaStreamParser, data)
    events, _ = harness.parse(ollama.OllamaStreamParser, data)
    tool, text, chunks = _tool_text(events)
    assert json.loads(tool) == {"city": "Paris"} and text == "" and chunks == 1
    assert s.finishes == ["stop"] and s.complete and s.usage.output_tokens == 18


def test_sdk_payloads_take_the_same_path() -> None:
    """SDK mode: the dumped chunk objects go through ``payload`` and give the same events."""
    p = openai.OpenAIStreamParser()
    obj = {"id": "x", "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": '{"a":'}}]}, "finish_reason": None}]}
    assert [e for e in p.payload(obj) if isinstance(e, Content)] == [Content('{"a":', tool=True)]
    a = anthropic.AnthropicStreamParser()
    ev = a.payload({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": "{}"}}, b"content_block_delta")
    assert ev == [Content("{}", tool=True)]
