"""The ``--llm-*`` command-line options (also environment variables and web-UI fields).

Every option defaults to "not given" so a User class's own attributes stay the defaults;
:func:`settings_for` merges the two into the :class:`Settings` one user runs with.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from .errors import ConfigError
from .protocols.sampling import Sampling
from .stream import Timeouts

_BOOL = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def add_arguments(parser: Any) -> None:
    """Register the options on Locust's parser (``init_command_line_parser``)."""
    g = parser.add_argument_group("locust-llm", "LLM load-test settings (each also LOCUST_LLM_* in the env)")

    def opt(name: str, help: str, **kw: Any) -> None:
        env = "LOCUST_" + name.lstrip("-").upper().replace("-", "_")
        g.add_argument(name, env_var=env, default=kw.pop("default", None), help=help, **kw)

    opt("--llm-model", "model name to request (default: the User class's; vLLM asks the server)")
    opt("--llm-max-tokens", "maximum output tokens per request (default 512)", type=int)
    opt("--llm-temperature", "sampling temperature (default 0)", type=float)
    opt("--llm-top-p", "nucleus sampling top_p (default 1)", type=float)
    opt("--llm-ignore-eos", "true/false: keep generating past EOS where the backend can (default true)")
    opt("--llm-endpoint", "chat | completions (OpenAI-style), chat | generate (Ollama)")
    opt("--llm-prompts", "prompts file (JSON, see docs/prompts.md; default prompts/short.json)")
    opt("--llm-api-key-env", "NAME of the environment variable that holds the API key (never the key)")
    opt("--llm-client", "raw (default: our streaming client) | sdk (the backend's official SDK)")
    opt("--llm-connect-timeout", "connect time limit, seconds (default 10)", type=float)
    opt("--llm-first-byte-timeout", "time limit to the first response byte, seconds (default 120)", type=float)
    opt("--llm-read-timeout", "longest gap between reads mid-stream, seconds (default 60)", type=float)
    opt("--llm-timeout", "whole-request time limit, seconds (default 600)", type=float)
    opt("--llm-insecure", "true/false: skip TLS certificate verification (default false)")
    opt("--llm-report", "directory for summary.json, summary.csv and requests.jsonl")
    opt("--llm-warmup", "exclude from statistics: N = each user's first N requests (default 1), or a time like 30s")
    opt("--llm-cooldown", "exclude requests that start in the last part of the run, e.g. 10s (needs -t)")
    opt("--llm-slo", "SLOs for goodput, any of ttft=500ms,tpot=50ms,e2e=30s")
    opt("--llm-sim-args", "extra llm-sim arguments for the auto-started simulator (no --host given)")
    opt("--llm-prometheus-port", "Prometheus /metrics port of the master or local runner (default 9646; 0 = off)",
        type=int)
    opt("--llm-prometheus-host", "address the Prometheus exporter listens on (default 0.0.0.0)")
    opt("--llm-prometheus-linger", "seconds the exporter keeps serving after the test stops (default 0)", type=float)
    opt("--llm-gpu-sidecar", "GPU sidecar URLs to pull during the run, comma-separated (host:port or URL)")
    opt("--llm-server-metrics", "the LLM server's own /metrics URL to pull during the run (vLLM, TGI)")
    opt("--llm-scrape-interval", "seconds between pulls of the sidecars and server metrics (default 2)", type=float)


def parse_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    try:
        return _BOOL[str(value).strip().lower()]
    except KeyError:
        raise ConfigError(f"{name} must be true or false, got {value!r}") from None


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

    def api_key(self) -> str | None:
        """The key from the first named variable that is set (names are comma-separated)."""
        for name in (self.api_key_env or "").split(","):
            value = os.environ.get(name.strip()) if name.strip() else None
            if value:
                return value
        return None

    def api_key_names(self) -> str:
        names = [n.strip() for n in (self.api_key_env or "").split(",") if n.strip()]
        return names[0] + "".join(f" (or {n})" for n in names[1:]) if names else "(none named)"


def settings_for(user_cls: Any, options: Any) -> Settings:
    """Class attributes overridden by whatever options were given."""

    def get(name: str, default: Any) -> Any:
        v = getattr(options, name, None) if options is not None else None
        return default if v is None or v == "" else v

    try:
        sampling = Sampling(
            max_tokens=int(get("llm_max_tokens", user_cls.max_tokens)),
            temperature=float(get("llm_temperature", user_cls.temperature)),
            top_p=float(get("llm_top_p", user_cls.top_p)),
            ignore_eos=parse_bool(get("llm_ignore_eos", user_cls.ignore_eos), "--llm-ignore-eos"),
            seed=user_cls.seed,
        )
    except ValueError as e:
        raise ConfigError(str(e)) from None
    client = str(get("llm_client", user_cls.client))
    if client not in ("raw", "sdk"):
        raise ConfigError(f"--llm-client must be raw or sdk, got {client!r}")
    defaults = Timeouts()
    timeouts = Timeouts(
        connect=float(get("llm_connect_timeout", defaults.connect)),
        first_byte=float(get("llm_first_byte_timeout", defaults.first_byte)),
        read=float(get("llm_read_timeout", defaults.read)),
        total=float(get("llm_timeout", defaults.total)),
    )
    return Settings(
        model=get("llm_model", user_cls.model),
        endpoint=str(get("llm_endpoint", user_cls.endpoint)),
        sampling=sampling,
        prompts=get("llm_prompts", user_cls.prompts),
        api_key_env=get("llm_api_key_env", user_cls.api_key_env),
        client=client,
        timeouts=timeouts,
        verify_tls=not parse_bool(get("llm_insecure", False), "--llm-insecure"),
    )


def with_sampling(settings: Settings, **changes: Any) -> Settings:
    return replace(settings, sampling=replace(settings.sampling, **changes))
