"""What one user runs with: its :class:`Settings` (model, endpoint, sampling, client, the four
time limits, TLS, spawn spread, tools and answer format), resolved from its User class's attributes and the ``--llm-*``
options. Part of the configuration: :mod:`llm_users.options` parses the options once and keeps
one Settings per User class; the stream client takes its :class:`Timeouts` from here.

No gevent, no sockets, no Locust: the configuration loads without the network stack.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llm_users.client.cancel import CancelPlan, parse_cancel
from llm_users.durations import parse_duration_s, parse_seconds
from llm_users.errors import ConfigError
from llm_users.key_scope import KeyScope, scope_of, warn_withheld
from llm_users.protocols.limits import whole_count
from llm_users.protocols.sampling import Sampling
from llm_users.protocols.tools import ToolSpec, check_route, parse_tool_options

MAX_TEMPERATURE = 2.0  # OpenAI, Gemini and vLLM accept 0..2 (Anthropic 0..1)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BOOL = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def parse_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    try:
        return _BOOL[str(value).strip().lower()]
    except KeyError:
        raise ConfigError(f"{name} must be true or false, got {value!r}") from None


def is_llm_user(cls: Any) -> bool:
    """A User class the ``--llm-*`` settings apply to: an ``LLMUser`` (every one names its
    ``backend``). Known by that attribute, so the configuration need not import the User
    classes (which import the configuration)."""
    return isinstance(cls, type) and isinstance(getattr(cls, "backend", None), str)


@dataclass(slots=True, frozen=True)
class Timeouts:
    """Time limits in seconds; None means no limit."""

    connect: float | None = 10.0
    first_byte: float | None = 120.0
    read: float | None = 60.0  # the longest gap between two reads once bytes flow
    total: float | None = 600.0


@dataclass(slots=True, frozen=True)
class Settings:
    """What one user runs with."""

    model: str | None
    endpoint: str
    sampling: Sampling
    prompts: str | None
    api_key_env: str | None
    client: str
    timeouts: Timeouts
    verify_tls: bool
    spawn_spread: bool = True  # first request at a random offset within the spawn interval
    think_jitter_s: float = 0.0  # each later request waits up to this much more (uniform)
    cancel: CancelPlan | None = None  # --llm-cancel-after / --llm-cancel-rate (client/cancel.py)
    tools: ToolSpec | None = None  # --llm-tools / --llm-response-format, sent with every request
    batch_size: int = 1  # embeddings/rerank routes: inputs per request (--llm-batch-size)
    #: the hosts the key may go to (llm_users/key_scope.py); None: no scope fixed (no plugin start)
    key_scope: KeyScope | None = None

    def api_key(self) -> str | None:
        """The key from the first named variable that is set (names are comma-separated), for
        the checks at start; a request takes :meth:`api_key_for` its host."""
        for name in (self.api_key_env or "").split(","):
            value = os.environ.get(name.strip()) if name.strip() else None
            if value:
                return value
        return None

    def api_key_for(self, host: str | None) -> str | None:
        """The key for a request to ``host``: None unless the key may go there (a host given at
        start or allowed with ``--llm-api-key-hosts``)."""
        if self.key_scope is not None and not self.key_scope.allows(host):
            if self.api_key() is not None:  # said once per host (the Logs tab in the web UI)
                warn_withheld(host, self.api_key_names(), self.key_scope)
            return None
        return self.api_key()

    def key_withheld(self, host: str | None) -> bool:
        """A key is loaded but may not go to ``host``."""
        return self.key_scope is not None and not self.key_scope.allows(host) and self.api_key() is not None

    def api_key_names(self) -> str:
        names = [n.strip() for n in (self.api_key_env or "").split(",") if n.strip()]
        return names[0] + "".join(f" (or {n})" for n in names[1:]) if names else "(none named)"


def settings_for(user_cls: Any, options: Any) -> Settings:
    """Class attributes overridden by whatever options were given."""

    def get(name: str, default: Any) -> Any:
        v = getattr(options, name, None) if options is not None else None
        return default if v is None or v == "" else v

    def num(name: str, default: Any, kind: type = float) -> Any:
        value = get(name, default)
        try:
            return kind(value)
        except (TypeError, ValueError):
            raise ConfigError(f"--{name.replace('_', '-')} must be {'a whole number' if kind is int else 'a number'}, "
                              f"got {value!r}") from None

    try:
        sampling = Sampling(
            max_tokens=num("llm_max_tokens", user_cls.max_tokens, int),
            temperature=num("llm_temperature", user_cls.temperature),
            top_p=num("llm_top_p", user_cls.top_p),
            ignore_eos=parse_bool(get("llm_ignore_eos", user_cls.ignore_eos), "--llm-ignore-eos"),
            seed=user_cls.seed,
        )
    except ValueError as e:  # Sampling's own range checks: "max_tokens must be >= 1, got 0"
        field_name = str(e).split()[0]
        raise ConfigError(f"--llm-{field_name.replace('_', '-')}: {e}") from None
    client = str(get("llm_client", user_cls.client))
    if client not in ("raw", "sdk"):
        raise ConfigError(f"--llm-client must be raw or sdk, got {client!r}")
    defaults = Timeouts()

    def seconds(name: str, default: float | None) -> float:
        value = get(name, default)
        return value if isinstance(value, int | float) else parse_seconds(value, f"--{name.replace('_', '-')}")

    timeouts = Timeouts(
        connect=seconds("llm_connect_timeout", defaults.connect),
        first_byte=seconds("llm_first_byte_timeout", defaults.first_byte),
        read=seconds("llm_read_timeout", defaults.read),
        total=seconds("llm_timeout", defaults.total),
    )
    if sampling.temperature > MAX_TEMPERATURE:
        raise ConfigError(f"--llm-temperature must be between 0 and {MAX_TEMPERATURE:g} (what the APIs accept), "
                          f"got {sampling.temperature:g}")
    for name, value in (("connect", timeouts.connect), ("first-byte", timeouts.first_byte),
                        ("read", timeouts.read), ("", timeouts.total)):
        if not (value > 0 and math.isfinite(value)):
            option = f"--llm-{name}-timeout" if name else "--llm-timeout"
            raise ConfigError(f"{option} must be a number of seconds above 0, got {value:g}")
    endpoint = str(get("llm_endpoint", user_cls.endpoint))
    descriptor = getattr(user_cls, "descriptor", None)
    tools = parse_tool_options(get("llm_tools", None), get("llm_response_format", None))
    batch = whole_count(get("llm_batch_size", getattr(user_cls, "batch_size", 1)), "--llm-batch-size",
                        "inputs per request")
    if descriptor is not None:
        route = descriptor.route(endpoint)  # ConfigError naming the endpoints there are
        check_route(tools, route.protocol, route.path, descriptor.name)
        least = route.min_output_tokens
        if sampling.max_tokens < least:
            raise ConfigError(f"--llm-max-tokens must be at least {least} for {descriptor.name}'s {endpoint} endpoint "
                              f"(the server refuses less), got {sampling.max_tokens}")
        if batch > 1 and route.kind == "chat":
            raise ConfigError(f"--llm-batch-size applies to embeddings and rerank routes, not {descriptor.name}'s "
                              f"{endpoint!r} (a chat stream)")
        if route.max_inputs is not None and batch > route.max_inputs:
            raise ConfigError(f"--llm-batch-size: {descriptor.name}'s {endpoint!r} takes at most {route.max_inputs} "
                              f"input(s) per request, got {batch}")
    key_env = get("llm_api_key_env", user_cls.api_key_env)
    for name in str(key_env or "").split(","):
        if name.strip() and not _ENV_NAME.match(name.strip()):
            raise ConfigError(f"--llm-api-key-env takes the NAME of an environment variable (letters, digits, _), "
                              f"not {'a key' if len(name.strip()) > 20 else repr(name.strip())}")
    return Settings(
        model=get("llm_model", user_cls.model),
        endpoint=endpoint,
        sampling=sampling,
        prompts=get("llm_prompts", user_cls.prompts),
        api_key_env=key_env,
        client=client,
        timeouts=timeouts,
        verify_tls=not parse_bool(get("llm_insecure", False), "--llm-insecure"),
        spawn_spread=parse_bool(get("llm_spawn_spread", True), "--llm-spawn-spread"),
        think_jitter_s=_jitter(get("llm_think_jitter", None)),
        cancel=parse_cancel(get("llm_cancel_after", None), get("llm_cancel_rate", None)),
        tools=tools,
        batch_size=batch,
        key_scope=scope_of(options),
    )


def _jitter(text: Any) -> float:
    if text is None or str(text).strip() in ("", "0", "off"):
        return 0.0
    return parse_duration_s(str(text), "--llm-think-jitter")


def overridden(options: Mapping[str, Any] | None) -> list[str]:
    """Lines for options given together where one silently decides: the run goes on, said."""
    opts = options or {}
    max_tokens, output = opts.get("llm_max_tokens"), opts.get("llm_output_tokens")
    if max_tokens not in (None, "") and output not in (None, ""):
        return [f"--llm-output-tokens {output} sets each request's max tokens, so --llm-max-tokens {max_tokens} "
                "applies to none of them; give one of the two"]
    return []
