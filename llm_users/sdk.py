"""SDK client mode (``--llm-client sdk``): the same request through the backend's official SDK.

This measures what an application built on the SDK experiences: each chunk is stamped with
``time.perf_counter_ns()`` as the SDK yields it, so SDK parsing and object building are inside
the numbers. Sync clients run under gevent (Locust monkey-patches sockets); ``max_retries=0``
so every attempt is one request. The SDKs are the optional extra ``locust-llm[sdk]``.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path
from typing import Any

from .errors import ConfigError, ConnectError, HTTPStatusError, LLMRequestError, TimeoutError_
from .metrics import RequestRecord
from .prompts import Messages

perf_counter_ns = time.perf_counter_ns



def import_sdk(name: str) -> Any:
    """Import an SDK package even when a locustfile of the same name shadows it.

    Locust imports ``locustfiles/openai.py`` as the module ``openai`` with its folder first on
    sys.path, so a plain ``import openai`` would find the locustfile. The real package must own
    ``sys.modules[name]`` (its own modules import from it); Locust keeps its reference to the
    locustfile module, so nothing is lost by replacing the entry.
    """
    top = name.split(".")[0]
    mod = sys.modules.get(top)
    if mod is not None and _is_shadow(mod):
        del sys.modules[top]
        mod = None
    if mod is None:
        shadow_dirs = [p for p in sys.path if (Path(p or ".") / f"{top}.py").is_file()]
        saved = list(sys.path)
        sys.path[:] = [p for p in sys.path if p not in shadow_dirs]
        try:
            return importlib.import_module(name)
        finally:
            sys.path[:] = saved
    return importlib.import_module(name)


def _is_shadow(mod: Any) -> bool:
    f = getattr(mod, "__file__", None) or ""
    return f.endswith(".py") and not f.endswith("__init__.py")


def check_sdk_available(user_cls: Any) -> None:
    """Raise ConfigError with what to install when the SDK for ``user_cls`` is missing."""
    from .protocols.backend import all_backends

    module = user_cls.descriptor.sdk_module
    if module is None:
        have = sorted(b.name for b in all_backends().values() if b.sdk_module)
        raise ConfigError(f"--llm-client sdk is not available for {user_cls.backend} (it is for {', '.join(have)})")
    try:
        import_sdk(module)
    except ImportError:
        raise ConfigError(f"--llm-client sdk needs the {user_cls.descriptor.sdk_package} package: "
                          "pip install 'locust-llm[sdk]'") from None


class _Stamp:
    """Fills a record from (text, usage) pieces as the SDK yields them."""

    def __init__(self, rec: RequestRecord) -> None:
        self.rec = rec
        self.last = 0

    def start(self) -> None:
        self.rec.start_time = time.time()
        self.rec.t0_ns = perf_counter_ns()

    def headers(self) -> None:
        self.rec.ttfb_ns = perf_counter_ns() - self.rec.t0_ns

    def text(self, text: str | None, reasoning: bool = False) -> None:
        if not text:
            return
        now = perf_counter_ns()
        self.rec.token_chunk(now, self.last, 0 if reasoning else len(text))
        self.last = now
        if self.rec.reply is not None and not reasoning:
            self.rec.reply.append(text)

    def usage(self, input_tokens: int | None, output_tokens: int | None) -> None:
        self.rec.usage(input_tokens, output_tokens)

    def end(self) -> None:
        rec = self.rec
        rec.e2e_ns = perf_counter_ns() - rec.t0_ns
        rec.http_status = rec.http_status or 200
        rec.settle_tokens()


def sdk_stream(user: Any, messages: Messages, rec: RequestRecord) -> RequestRecord:
    """Run one request through the user's SDK client, mapping SDK errors to our tree."""
    if user._sdk is None:
        user._sdk = _make_client(user)
    stamp = _Stamp(rec)
    try:
        _STREAMERS[user.backend](user, user._sdk, messages, stamp)
    except LLMRequestError:
        raise
    except Exception as e:  # SDK exceptions: map to categories, never crash the user
        raise _map_error(e) from e
    stamp.end()
    return rec


def _make_client(user: Any) -> Any:
    host = user.host.rstrip("/")
    key = user.api_key or "EMPTY"
    t = user.settings.timeouts
    backend = user.backend
    if backend in ("openai", "vllm"):
        import httpx

        openai = import_sdk("openai")
        base = host if host.endswith("/v1") else host + "/v1"
        timeout = httpx.Timeout(t.total, connect=t.connect, read=t.read)
        return openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=timeout)
    if backend == "claude":
        anthropic = import_sdk("anthropic")
        return anthropic.Anthropic(base_url=host, api_key=key, max_retries=0, timeout=t.total)
    if backend == "gemini":
        genai = import_sdk("google.genai")
        types = import_sdk("google.genai.types")

        opts = types.HttpOptions(base_url=host, api_version=user.api_version,
                                 timeout=int((t.total or 600) * 1000))
        return genai.Client(api_key=key, http_options=opts)
    if backend == "ollama":
        ollama = import_sdk("ollama")
        return ollama.Client(host=host, timeout=t.total)
    raise ConfigError(f"no SDK mode for {backend}")


def _openai(user: Any, client: Any, messages: Messages, stamp: _Stamp) -> None:
    s = user.settings.sampling
    kw: dict[str, Any] = {"model": user.model_name, "temperature": s.temperature, "top_p": s.top_p,
                          "stream": True, "stream_options": {"include_usage": True}}
    if s.seed is not None:
        kw["seed"] = s.seed
    extra = {"ignore_eos": True} if user.backend == "vllm" and s.ignore_eos else None
    stamp.start()
    if user.settings.endpoint == "completions":
        from .protocols.openai import messages_to_prompt

        stream = client.completions.create(prompt=messages_to_prompt(messages), max_tokens=s.max_tokens,
                                           extra_body=extra, **kw)
        stamp.headers()
        for chunk in stream:
            for choice in chunk.choices:
                stamp.text(choice.text)
                if choice.finish_reason:
                    stamp.rec.finish_reason = choice.finish_reason
            if chunk.usage:
                stamp.usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        return
    if user.backend == "openai":
        kw["max_completion_tokens"] = s.max_tokens
    else:
        kw["max_tokens"] = s.max_tokens
    stream = client.chat.completions.create(messages=messages, extra_body=extra, **kw)
    stamp.headers()
    for chunk in stream:
        for choice in chunk.choices:
            stamp.text(choice.delta.content)
            if choice.finish_reason:
                stamp.rec.finish_reason = choice.finish_reason
        if chunk.usage:
            stamp.usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)


def _claude(user: Any, client: Any, messages: Messages, stamp: _Stamp) -> None:
    s = user.settings.sampling
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    kw: dict[str, Any] = {"model": user.model_name, "max_tokens": s.max_tokens, "stream": True,
                          "messages": [m for m in messages if m["role"] != "system"]}
    if system:
        kw["system"] = system
    stamp.start()
    stream = client.messages.create(**kw)
    stamp.headers()
    input_tokens = None
    for ev in stream:
        kind = ev.type
        if kind == "content_block_delta":
            d = ev.delta
            if d.type == "text_delta":
                stamp.text(d.text)
            elif d.type == "thinking_delta":
                stamp.text(d.thinking, reasoning=True)
        elif kind == "message_start":
            input_tokens = ev.message.usage.input_tokens
            stamp.usage(input_tokens, None)
        elif kind == "message_delta":
            stamp.usage(input_tokens, ev.usage.output_tokens)
            if ev.delta.stop_reason:
                stamp.rec.finish_reason = ev.delta.stop_reason


def _gemini(user: Any, client: Any, messages: Messages, stamp: _Stamp) -> None:
    types = import_sdk("google.genai.types")

    s = user.settings.sampling
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    contents = [types.Content(role="model" if m["role"] == "assistant" else "user",
                              parts=[types.Part(text=m["content"])])
                for m in messages if m["role"] != "system"]
    config = types.GenerateContentConfig(max_output_tokens=s.max_tokens, temperature=s.temperature,
                                         top_p=s.top_p, seed=s.seed, system_instruction=system or None)
    stamp.start()
    stream = client.models.generate_content_stream(model=user.model_name, contents=contents, config=config)
    for chunk in stream:
        if stamp.rec.ttfb_ns is None:
            stamp.headers()
        for cand in chunk.candidates or []:
            for part in (cand.content.parts if cand.content and cand.content.parts else []):
                stamp.text(part.text, reasoning=bool(part.thought))
            if cand.finish_reason:
                stamp.rec.finish_reason = str(cand.finish_reason.value if hasattr(cand.finish_reason, "value")
                                              else cand.finish_reason)
        um = chunk.usage_metadata
        if um is not None and um.candidates_token_count is not None:
            stamp.usage(um.prompt_token_count, um.candidates_token_count)


def _ollama(user: Any, client: Any, messages: Messages, stamp: _Stamp) -> None:
    s = user.settings.sampling
    options = {"num_predict": s.max_tokens, "temperature": s.temperature, "top_p": s.top_p}
    if s.seed is not None:
        options["seed"] = s.seed
    stamp.start()
    stream = client.chat(model=user.model_name, messages=messages, stream=True, options=options)
    for chunk in stream:
        if stamp.rec.ttfb_ns is None:
            stamp.headers()
        stamp.text(chunk.message.thinking, reasoning=True)
        stamp.text(chunk.message.content)
        if chunk.done:
            stamp.usage(chunk.prompt_eval_count, chunk.eval_count)
            stamp.rec.finish_reason = chunk.done_reason


_STREAMERS = {"openai": _openai, "vllm": _openai, "claude": _claude, "gemini": _gemini, "ollama": _ollama}


def _map_error(e: Exception) -> LLMRequestError:
    """SDK exception -> our error tree, by duck typing (no SDK import needed here)."""
    name = type(e).__name__
    status = getattr(e, "status_code", None) or getattr(e, "code", None)
    if isinstance(status, int) and 400 <= status < 600:
        return HTTPStatusError(f"HTTP {status}: {_msg(e)}", status=status)
    if "Timeout" in name:
        return TimeoutError_(f"{name}: {_msg(e)}", category="read_timeout")
    if "Connection" in name or "Connect" in name:
        return ConnectError(f"{name}: {_msg(e)}")
    return LLMRequestError(f"{name}: {_msg(e)}", category="sdk_error")


def _msg(e: Exception) -> str:
    return (getattr(e, "message", None) or str(e) or type(e).__name__).splitlines()[0][:300]
