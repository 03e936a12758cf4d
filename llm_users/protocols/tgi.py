"""Hugging Face Text Generation Inference, native API: ``POST /generate_stream`` (or ``POST /``
with ``"stream": true``, as TGI's own Python clients do).

TGI validates temperature > 0 and 0 < top_p < 1, so the project's fixed sampling (temperature 0,
top_p 1) is expressed as greedy decoding: ``do_sample: false`` with both left out. A user who
sets temperature > 0 or top_p < 1 gets them sent with ``do_sample: true``. TGI has no ignore_eos
or min_tokens. ``details: true`` makes the final frame carry the server's token counts.

Stream: SSE frames ``data:{...}`` (no space), one token each; special tokens (EOS) are not output
text. The final frame has a non-null ``generated_text`` and ``details {finish_reason,
generated_tokens, input_length, seed}``. No ``[DONE]``. Errors arrive on HTTP 200 as
``{"error": "...", "error_type": "..."}`` payloads.
"""

from __future__ import annotations

from typing import Any, Literal

from llm_users.protocols.backend import Backend, BackendDocs, RequestSpec, Route, Tokenizer
from llm_users.protocols.base import (
    Content,
    Event,
    Finish,
    HTTPRequest,
    ServerError,
    Usage,
    bearer,
    error_message,
    json_post,
)
from llm_users.protocols.images import Image, markdown_images, with_images
from llm_users.protocols.openai import compat_route, messages_to_prompt
from llm_users.protocols.sampling import Sampling
from llm_users.protocols.server_side import TGI as TGI_SIDE
from llm_users.protocols.sse import SSEJSONParser
from llm_users.protocols.tools import ToolSpec, tgi_grammar

Path = Literal["/generate_stream", "/"]


def build_request(
    *,
    model: str,
    messages: list[dict[str, Any]],
    sampling: Sampling,
    api_key: str | None = None,
    path: Path = "/generate_stream",
    extra_headers: dict[str, str] | None = None,
    tools: ToolSpec | None = None,
    images: tuple[Image, ...] = (),
) -> HTTPRequest:
    """A streaming TGI generate request. ``model`` is unused on the wire (TGI serves one model)
    but kept for a uniform signature. ``tools``: a JSON answer as ``parameters.grammar`` (TGI's
    native API has no tools: :func:`~llm_users.protocols.tools.check_route` refuses them).
    ``images``: markdown ``![](data:...)`` links after the last user message's text, as TGI's
    vision models take them in ``inputs``."""
    del model
    if path not in ("/generate_stream", "/"):
        raise ValueError(f"unknown TGI path {path!r}: use '/generate_stream' or '/'")
    params: dict[str, Any] = {"max_new_tokens": sampling.max_tokens}
    sample = sampling.temperature > 0 or sampling.top_p < 1
    params["do_sample"] = sample
    if sampling.temperature > 0:
        params["temperature"] = sampling.temperature
    if sampling.top_p < 1:
        params["top_p"] = sampling.top_p
    params["details"] = True
    params["return_full_text"] = False
    if sampling.seed is not None:
        params["seed"] = sampling.seed
    if sampling.stop:
        params["stop"] = list(sampling.stop)
    grammar = tgi_grammar(tools)
    if grammar is not None:
        params["grammar"] = grammar
    body: dict[str, Any] = {"inputs": messages_to_prompt(with_images(messages, images, markdown_images)),
                            "parameters": params}
    if path == "/":
        body["stream"] = True
    return json_post(path, body, accept="text/event-stream", auth=bearer(api_key),
                     extra_headers=extra_headers)


class TGIStreamParser(SSEJSONParser):
    """Parses a TGI ``/generate_stream`` SSE stream.

    Complete once the final frame (non-null ``generated_text`` or ``details``) arrives.
    """

    __slots__ = ()
    protocol = "TGI"

    def _chunk(self, obj: dict[str, Any], name: bytes | None, events: list[Event]) -> None:
        err = obj.get("error")
        if err is not None:
            kind = obj.get("error_type")
            events.append(ServerError(error_message(err), kind=str(kind) if kind else None))
            return
        token = obj.get("token")
        if token:
            text = token.get("text")
            if text and not token.get("special"):
                events.append(Content(text))
        details = obj.get("details")
        if details:
            events.append(
                Usage(
                    input_tokens=details.get("input_length"),
                    output_tokens=details.get("generated_tokens"),
                )
            )
            reason = details.get("finish_reason")
            if reason:
                events.append(Finish(str(reason)))
        if details or obj.get("generated_text") is not None:
            self.complete = True


def _route(endpoint: str, path: Path) -> Route:
    def build(spec: RequestSpec) -> HTTPRequest:
        return build_request(model=spec.model, messages=spec.messages, sampling=spec.sampling,
                             api_key=spec.api_key, path=path, tools=spec.tools, images=spec.images)

    return Route(endpoint, path, build, TGIStreamParser, protocol="tgi", chunk_has_a_token=True, server_side=TGI_SIDE)


TGI = Backend(
    name="tgi",
    routes=(_route("generate_stream", "/generate_stream"), _route("root", "/"), compat_route("chat")),
    auth_header="Authorization",
    api_key_env=None,
    default_model="tgi",
    tokenizers=(Tokenizer("tgi", "/tokenize", lambda model, text: {"inputs": text}),),
    probes=("/info",),
    sim_routes="llm_users.sim.routes_tgi",
    docs=BackendDocs(
        locustfile="tgi.py", user="TGIUser", auth_env="none",
        sampling="greedy: `do_sample: false`, temperature/top_p left out (TGI rejects 0 and 1), "
                 "`max_new_tokens`, `details: true`",
        tokens="`details.generated_tokens` / `input_length`", cannot="no ignore_eos",
    ),
)
