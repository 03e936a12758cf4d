"""Tools and structured output: ``--llm-tools FILE`` and ``--llm-response-format json|schema:FILE``.

:func:`parse_tool_options` reads and checks the files once, at start (one ``locust-llm:`` line
for a bad one), into a frozen :class:`ToolSpec` that every request of the run carries
(``RequestSpec.tools``). The tools file holds function tools in OpenAI's shape, a JSON list
of ``{"type": "function", "function": {"name", "description", "parameters"}}`` (a bare
``{"name", "parameters"}`` object or ``{"tools": [...]}`` is taken too); the schema file a
JSON Schema (or OpenAI's ``{"name", "schema"}`` wrapper).

Each dialect's builder asks for its own shape here:

- OpenAI-style chat (OpenAI, vLLM, TGI Messages API, Ollama /v1): ``tools`` as given;
  ``response_format`` ``{"type": "json_object"}`` or ``{"type": "json_schema", "json_schema":
  {"name", "schema"}}`` (:func:`openai_fields`).
- Anthropic Messages: ``tools`` with ``input_schema``. The Messages API has no response format
  field; its documented way to a JSON answer is a forced tool call: a tool ``json_answer`` whose
  ``input_schema`` is the schema, with ``tool_choice {"type": "tool", "name": "json_answer"}``;
  the answer is that call's arguments (so it cannot be combined with ``--llm-tools``).
- Gemini: ``tools [{"functionDeclarations": [{"name", "description", "parametersJsonSchema"}]}]``
  and ``generationConfig.responseMimeType: application/json`` (+ ``responseJsonSchema``, the
  field that takes JSON Schema as it is; ``responseSchema`` takes only Google's OpenAPI subset).
- Ollama /api/chat: ``tools`` in OpenAI's shape, ``format`` ``"json"`` or the schema.
- TGI /generate_stream: no tools (its Messages API has them: ``--llm-endpoint chat``);
  ``parameters.grammar {"type": "json", "value": schema}``.

:func:`check_route` refuses a combination a route cannot send. :func:`structured_valid` judges
an answer: the text parses as JSON and, with a schema, validates (the ``jsonschema`` package,
imported only when a schema is given: the optional extra ``locust-llm[tools]``). Pure: no I/O
beyond reading the two files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

from llm_users.errors import ConfigError

FORCED_TOOL = "json_answer"  # Anthropic: the forced tool whose arguments are the JSON answer
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """The tools and the answer format every request of the run carries."""

    functions: tuple[dict[str, Any], ...] = ()  # {"name", "description"?, "parameters"?}
    response_format: str | None = None  # None | "json" | "schema"
    schema: dict[str, Any] | None = None  # with "schema"
    schema_name: str = "answer"

    @property
    def schema_or_object(self) -> dict[str, Any]:
        return self.schema if self.schema is not None else _ANY_OBJECT


# the options ----------------------------------------------------------------------------------

def parse_tool_options(tools: Any, response_format: Any) -> ToolSpec | None:
    """``--llm-tools`` and ``--llm-response-format`` as given (None/empty: not given), read and
    checked; None when neither was given. Raises ConfigError with one line."""
    tools = str(tools).strip() if tools is not None else ""
    fmt = str(response_format).strip() if response_format is not None else ""
    if not tools and not fmt:
        return None
    return _parse(tools, fmt)


@lru_cache(maxsize=16)  # read per User class and at each test start: the same files, read once
def _parse(tools: str, fmt: str) -> ToolSpec:
    functions = load_tools(tools) if tools else ()
    kind: str | None = None
    schema = None
    name = "answer"
    if fmt:
        if fmt == "json":
            kind = "json"
        elif fmt.startswith("schema:") and fmt[7:].strip():
            kind = "schema"
            name, schema = load_schema(fmt[7:].strip())
        else:
            raise ConfigError(f"--llm-response-format must be json or schema:FILE, got {fmt!r}")
    return ToolSpec(functions=functions, response_format=kind, schema=schema, schema_name=name)


def _read_json(path: str, option: str) -> Any:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ConfigError(f"{option}: cannot read {path!r} ({e.strerror or e})") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ConfigError(f"{option}: {path!r} is not JSON ({e})") from None


def load_tools(path: str) -> tuple[dict[str, Any], ...]:
    """The function definitions of a tools file, each ``{"name", "description"?, "parameters"?}``."""
    data = _read_json(path, "--llm-tools")
    if isinstance(data, dict):
        data = data["tools"] if isinstance(data.get("tools"), list) else [data]
    if not isinstance(data, list) or not data:
        raise ConfigError(f"--llm-tools: {path!r} must hold a non-empty JSON list of tools "
                          '([{"type": "function", "function": {"name": ..., "parameters": {...}}}])')
    out = []
    for i, tool in enumerate(data):
        fn = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else tool
        where = f"--llm-tools: {path!r}, tool {i + 1}"
        if not isinstance(fn, dict):
            raise ConfigError(f"{where}: a tool is an object "
                              '{"type": "function", "function": {"name": ..., "parameters": {...}}}')
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"{where}: name must be 1-64 letters, digits, _ or -, got {name!r}")
        params = fn.get("parameters")
        if params is not None and (not isinstance(params, dict) or params.get("type", "object") != "object"):
            raise ConfigError(f"{where} ({name}): parameters must be a JSON Schema object "
                              '({"type": "object", "properties": {...}})')
        desc = fn.get("description")
        if desc is not None and not isinstance(desc, str):
            raise ConfigError(f"{where} ({name}): description must be a string")
        out.append({k: v for k, v in (("name", name), ("description", desc), ("parameters", params))
                    if v is not None})
    names = [f["name"] for f in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"--llm-tools: {path!r} names a tool twice ({', '.join(names)})")
    return tuple(out)


def load_schema(path: str) -> tuple[str, dict[str, Any]]:
    """(name, JSON Schema) of a schema file; the schema is checked against its meta-schema."""
    data = _read_json(path, "--llm-response-format")
    name = "answer"
    if isinstance(data, dict) and isinstance(data.get("schema"), dict) and "type" not in data:
        name = str(data.get("name") or name)  # OpenAI's json_schema wrapper
        data = data["schema"]
    if not isinstance(data, dict):
        raise ConfigError(f"--llm-response-format: {path!r} must hold a JSON Schema object")
    if not _NAME.match(name):
        raise ConfigError(f"--llm-response-format: {path!r}: name must be 1-64 letters, digits, _ or -")
    validators = _jsonschema_validators()
    try:
        validators.validator_for(data).check_schema(data)
    except Exception as e:  # jsonschema's SchemaError
        raise ConfigError(f"--llm-response-format: {path!r} is not a valid JSON Schema "
                          f"({getattr(e, 'message', e)})") from None
    return name, data


def _jsonschema_validators() -> Any:
    try:
        import jsonschema.validators
    except ImportError:
        raise ConfigError("--llm-response-format schema:FILE needs the jsonschema package: "
                          "pip install 'locust-llm[tools]'") from None
    return jsonschema.validators


def check_route(spec: ToolSpec | None, protocol: str, path: str, backend: str) -> None:
    """Refuse, with one line, what the route cannot send."""
    if spec is None:
        return
    what = " and ".join(o for o, given in (("--llm-tools", spec.functions), ("--llm-response-format",
                                                                               spec.response_format)) if given)
    if protocol == "openai" and not path.endswith("chat/completions"):
        raise ConfigError(f"{what}: {path} has no tools or response format; use --llm-endpoint chat")
    if protocol == "ollama" and spec.functions and path.endswith("/generate"):
        raise ConfigError("--llm-tools: Ollama's /api/generate takes no tools; use --llm-endpoint chat")
    if protocol == "tgi" and spec.functions:
        raise ConfigError("--llm-tools: TGI's native generate API takes no tools; its Messages API does: "
                          "--llm-endpoint chat")
    if protocol == "anthropic" and spec.functions and spec.response_format:
        raise ConfigError("--llm-tools with --llm-response-format: Anthropic's Messages API has no response "
                          "format; its JSON answer is a forced tool call, which leaves no choice of tools: "
                          "give one of the two")
    if protocol not in ("openai", "openai-responses", "anthropic", "gemini", "ollama", "tgi"):
        raise ConfigError(f"{what} is not implemented for {backend}'s {path} ({protocol} protocol)")


# each dialect's shape -------------------------------------------------------------------------

def openai_fields(spec: ToolSpec | None) -> dict[str, Any]:
    """``tools`` and ``response_format`` of an OpenAI-style chat request (also Ollama /v1, TGI)."""
    out: dict[str, Any] = {}
    if spec is None:
        return out
    if spec.functions:
        out["tools"] = [{"type": "function", "function": f} for f in spec.functions]
    if spec.response_format == "json":
        out["response_format"] = {"type": "json_object"}
    elif spec.response_format == "schema":
        out["response_format"] = {"type": "json_schema",
                                  "json_schema": {"name": spec.schema_name, "schema": spec.schema}}
    return out


def responses_fields(spec: ToolSpec | None) -> dict[str, Any]:
    """``tools`` (flat function tools: ``name``, ``parameters`` beside ``type``) and ``text.format``
    of an OpenAI Responses request."""
    out: dict[str, Any] = {}
    if spec is None:
        return out
    if spec.functions:
        out["tools"] = [{"type": "function", **f} for f in spec.functions]
    if spec.response_format == "json":
        out["text"] = {"format": {"type": "json_object"}}
    elif spec.response_format == "schema":
        out["text"] = {"format": {"type": "json_schema", "name": spec.schema_name, "schema": spec.schema}}
    return out


def anthropic_fields(spec: ToolSpec | None) -> dict[str, Any]:
    """``tools`` (``input_schema``) and, for a JSON answer, the forced ``json_answer`` tool."""
    if spec is None:
        return {}
    if spec.response_format:
        tool = {"name": FORCED_TOOL, "description": "Give the answer as this tool's input.",
                "input_schema": spec.schema_or_object}
        return {"tools": [tool], "tool_choice": {"type": "tool", "name": FORCED_TOOL}}
    if spec.functions:
        return {"tools": [{"name": f["name"], **({"description": f["description"]} if "description" in f else {}),
                           "input_schema": f.get("parameters") or _ANY_OBJECT} for f in spec.functions]}
    return {}


def gemini_fields(spec: ToolSpec | None) -> tuple[list[dict[str, Any]] | None, dict[str, Any]]:
    """(the request's ``tools``, the ``generationConfig`` fields of the answer format)."""
    if spec is None:
        return None, {}
    tools = None
    if spec.functions:
        decls = []
        for f in spec.functions:
            d: dict[str, Any] = {"name": f["name"]}
            if "description" in f:
                d["description"] = f["description"]
            if "parameters" in f:
                d["parametersJsonSchema"] = f["parameters"]
            decls.append(d)
        tools = [{"functionDeclarations": decls}]
    config: dict[str, Any] = {}
    if spec.response_format:
        config["responseMimeType"] = "application/json"
        if spec.schema is not None:
            config["responseJsonSchema"] = spec.schema
    return tools, config


def ollama_fields(spec: ToolSpec | None) -> dict[str, Any]:
    """``tools`` and ``format`` of an Ollama /api request."""
    if spec is None:
        return {}
    out: dict[str, Any] = {}
    if spec.functions:
        out["tools"] = [{"type": "function", "function": f} for f in spec.functions]
    if spec.response_format:
        out["format"] = spec.schema if spec.schema is not None else "json"
    return out


def tgi_grammar(spec: ToolSpec | None) -> dict[str, Any] | None:
    """TGI's ``parameters.grammar`` for a JSON answer (its docs: ``{"type": "json", "value": schema}``)."""
    if spec is None or not spec.response_format:
        return None
    return {"type": "json", "value": spec.schema_or_object}


# judging an answer ----------------------------------------------------------------------------

def structured_valid(text: str, spec: ToolSpec) -> bool:
    """The answer parses as JSON and, with a schema, validates against it."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    if spec.schema is None:
        return True
    return _validator(orjson.dumps(spec.schema, option=orjson.OPT_SORT_KEYS)).is_valid(value)


@lru_cache(maxsize=8)
def _validator(schema_json: bytes) -> Any:
    schema = orjson.loads(schema_json)
    return _jsonschema_validators().validator_for(schema)(schema)
