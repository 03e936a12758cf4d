"""The simulator's tool calls and JSON answers.

A request that carries tools (and a tool choice that allows a call) is answered with a call of
the first tool (or the one ``tool_choice`` names); a request that asks for a JSON answer (a
response format) is answered with JSON. Either way the answer is a JSON value built from the
schema (the tool's parameters, the response schema): every property filled with a value of its
type (the first enum/const value, numbers at their minimum or 1, ``true``, ``[]``), and the
answer's words streamed inside its first string property (``answer`` when the schema names
none), so the JSON arrives over the answer's n tokens at the usual ITL pace: the first token
carries the opening (``{"city":" kalo``), the last the closing (`` bai"}``). A simple schema is
met (types, required, enum); patterns and length limits are not looked at.

Each dialect reads its own request fields (:func:`openai_shape`, :func:`responses_shape`, :func:`anthropic_shape`,
:func:`gemini_shape`, :func:`ollama_shape`, :func:`tgi_shape`) into a :class:`Shape`;
:meth:`Shape.apply` rewrites the job's words. Gemini and Ollama send a call whole (their
``args``/``arguments`` are an object, not text): their routes send it in one chunk
(:attr:`Shape.arguments`). Deterministic: no randomness.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from llm_users.sim.base import Job

SLOT = "\u2063slot\u2063"  # where the words go; never produced by the vocabulary


@dataclass(slots=True)
class Shape:
    """How a job's answer is shaped: a tool call (``tool`` = its name) or JSON text."""

    tool: str | None
    prefix: str
    suffix: str
    arguments: Any = None  # the whole value, after apply (Gemini's args, Ollama's arguments)

    def apply(self, job: Job, *, escape: bool = True, first: int = 0, last: int | None = None) -> None:
        """Put the opening on word ``first`` (after thinking words) and the closing on word
        ``last`` (default the final one); ``escape``: the words go into a JSON string as they are
        (streaming)."""
        words = job.words
        if not words:
            return
        raw = [w.decode() for w in words]
        end = len(raw) - 1 if last is None else max(first, last)
        first = min(first, end)
        raw[first] = self.prefix + raw[first]
        raw[end] = raw[end] + self.suffix
        try:
            self.arguments = orjson.loads("".join(raw[first: end + 1]))
        except orjson.JSONDecodeError:  # a schema value that is not JSON-able as filled
            self.arguments = {}
        if escape and job.stream:
            job.words = [orjson.dumps(w)[1:-1] for w in raw]
            job.escaped = True
        else:
            job.words = [w.encode() for w in raw]


def shape_for(schema: Any, tool: str | None = None) -> Shape:
    """The answer's opening and closing around the slot the words fill."""
    slot = [False]
    value = _fill(schema if isinstance(schema, dict) else {}, slot, top=True)
    text = orjson.dumps(value).decode()
    quoted = orjson.dumps(SLOT).decode()[1:-1]
    prefix, found, suffix = text.partition(quoted)
    if not found:  # a schema with no place for text (a top-level array): an object with the words
        prefix, suffix = '{"answer":"', '"}'
    return Shape(tool, prefix, suffix)


def _type(schema: dict[str, Any]) -> str | None:
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), None)
    if isinstance(t, str):
        return t.lower()  # Gemini's responseSchema writes OBJECT, STRING...
    if "properties" in schema:
        return "object"
    return None


def _fill(schema: dict[str, Any], slot: list[bool], *, top: bool = False) -> Any:
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options and isinstance(options[0], dict):
            return _fill(options[0], slot, top=top)
    kind = _type(schema)
    if kind == "object" or (top and kind is None):
        out: dict[str, Any] = {}
        props = schema.get("properties")
        for name, sub in (props.items() if isinstance(props, dict) else ()):
            out[name] = _fill(sub if isinstance(sub, dict) else {}, slot)
        if top and not slot[0]:
            out["answer"] = SLOT
            slot[0] = True
        return out
    if kind in ("string", None):
        if not slot[0]:
            slot[0] = True
            return SLOT
        return "x"
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        n = max(1, low + 1 if "exclusiveMinimum" in schema else low) if isinstance(low, int | float) else 1
        return int(n) if kind == "integer" else float(n)
    if kind == "boolean":
        return True
    if kind == "array":
        items = schema.get("items")
        count = schema.get("minItems") or 0
        return [_fill(items if isinstance(items, dict) else {}, slot) for _ in range(int(count))]
    return None


# each dialect's request fields ----------------------------------------------------------------

def _openai_tool(tools: Any, choice: Any) -> tuple[str, Any] | None:
    """(name, parameters) of the tool to call under OpenAI's ``tools``/``tool_choice`` (also Ollama)."""
    if not isinstance(tools, list) or not tools or choice == "none":
        return None
    funcs = [t.get("function") if isinstance(t, dict) and "function" in t else t for t in tools]
    funcs = [f for f in funcs if isinstance(f, dict) and isinstance(f.get("name"), str)]
    wanted = ((choice.get("function") or {}).get("name") or choice.get("name")) if isinstance(choice, dict) else None
    for f in funcs:
        if wanted is None or f["name"] == wanted:
            return f["name"], f.get("parameters")
    return None


def openai_shape(body: dict[str, Any]) -> Shape | None:
    called = _openai_tool(body.get("tools"), body.get("tool_choice"))
    if called is not None:
        return shape_for(called[1], called[0])
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
        return shape_for((fmt.get("json_schema") or {}).get("schema"))
    return None


def responses_shape(body: dict[str, Any]) -> Shape | None:
    """OpenAI's Responses API: flat function tools (``{"type": "function", "name", "parameters"}``),
    ``tool_choice``, and ``text.format`` (``json_object`` / ``json_schema`` with ``schema``)."""
    called = _openai_tool(body.get("tools"), body.get("tool_choice"))
    if called is not None:
        return shape_for(called[1], called[0])
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
        return shape_for(fmt.get("schema"))
    return None


def anthropic_shape(body: dict[str, Any]) -> Shape | None:
    tools = body.get("tools")
    choice = body.get("tool_choice") or {}
    if not isinstance(tools, list) or not tools or (isinstance(choice, dict) and choice.get("type") == "none"):
        return None
    wanted = choice.get("name") if isinstance(choice, dict) and choice.get("type") == "tool" else None
    for t in tools:
        if isinstance(t, dict) and isinstance(t.get("name"), str) and (wanted is None or t["name"] == wanted):
            return shape_for(t.get("input_schema"), t["name"])
    return None


def _get(d: dict[str, Any], camel: str, snake: str) -> Any:
    v = d.get(camel)
    return d.get(snake) if v is None else v


def gemini_shape(body: dict[str, Any], config: dict[str, Any]) -> Shape | None:
    mode = ((_get(body, "toolConfig", "tool_config") or {}).get("functionCallingConfig") or {})
    allowed = _get(mode, "allowedFunctionNames", "allowed_function_names") or None
    if str(mode.get("mode", "AUTO")).upper() != "NONE":
        for tool in body.get("tools") or ():
            for d in (_get(tool, "functionDeclarations", "function_declarations") or ()) if isinstance(tool, dict) else ():
                if isinstance(d, dict) and isinstance(d.get("name"), str) and (not allowed or d["name"] in allowed):
                    params = _get(d, "parametersJsonSchema", "parameters_json_schema") or d.get("parameters")
                    return shape_for(params, d["name"])
    if _get(config, "responseMimeType", "response_mime_type") == "application/json":
        return shape_for(_get(config, "responseJsonSchema", "response_json_schema")
                         or _get(config, "responseSchema", "response_schema"))
    return None


def ollama_shape(body: dict[str, Any]) -> Shape | None:
    called = _openai_tool(body.get("tools"), None)
    if called is not None:
        return shape_for(called[1], called[0])
    fmt = body.get("format")
    if fmt == "json" or isinstance(fmt, dict):
        return shape_for(fmt if isinstance(fmt, dict) else None)
    return None


def tgi_shape(params: dict[str, Any]) -> Shape | None:
    grammar = params.get("grammar")
    if not isinstance(grammar, dict) or grammar.get("type") != "json":
        return None
    value = grammar.get("value")
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            value = None
    return shape_for(value)
