"""The ``--llm-*`` command-line options (also environment variables and web-UI fields), parsed once.

Every option defaults to "not given" so a User class's own attributes stay the defaults;
:func:`settings_for` merges the two into the :class:`Settings` one user runs with.
:meth:`RunConfig.from_options` reads every option once, at start, into one frozen
configuration that the plugin passes to whoever needs it (the run, the exporters, the users
through ``environment.llm_config``). Durations follow one rule: :mod:`llm_users.durations`.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from llm_users.client.stream import Timeouts
from llm_users.durations import parse_duration_s
from llm_users.errors import ConfigError
from llm_users.protocols.sampling import Sampling
from llm_users.slo import parse_slos

MAX_TEMPERATURE = 2.0  # OpenAI, Gemini and vLLM accept 0..2 (Anthropic 0..1)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BOOL = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def add_arguments(parser: Any) -> None:
    """Register the options on Locust's parser (``init_command_line_parser``)."""
    g = parser.add_argument_group("locust-llm", "LLM load-test settings (each also LOCUST_LLM_* in the env)")

    def opt(name: str, help: str, web: bool = False, **kw: Any) -> None:
        env = "LOCUST_" + name.lstrip("-").upper().replace("-", "_")
        action = g.add_argument(name, env_var=env, default=kw.pop("default", None), help=help, **kw)
        # Locust's start form shows an option when its action says so (its own add_argument sets
        # these; an argument group's does not). Web fields are the ones read when users start.
        action.include_in_web_ui = web
        action.is_secret = action.is_required = action.is_multiple = False

    opt("--llm-model", "model name to request (default: the User class's; vLLM asks the server)", web=True)
    opt("--llm-max-tokens", "maximum output tokens per request (default 512)", web=True)
    opt("--llm-temperature", "sampling temperature (default 0)", web=True)
    opt("--llm-top-p", "nucleus sampling top_p (default 1)", web=True)
    opt("--llm-ignore-eos", "true/false: keep generating past EOS where the backend can (default true)", web=True)
    opt("--llm-endpoint", "chat | completions (OpenAI-style), chat | generate (Ollama)", web=True)
    opt("--llm-prompts", "the same as --llm-dataset (kept for existing command lines)", web=True)
    opt("--llm-api-key-env", "NAME of the environment variable that holds the API key (never the key)", web=True)
    opt("--llm-client", "raw (default: our streaming client) | sdk (the backend's official SDK)", web=True)
    opt("--llm-connect-timeout", "connect time limit, seconds (default 10)", web=True)
    opt("--llm-first-byte-timeout", "time limit to the first response byte, seconds (default 120)", web=True)
    opt("--llm-read-timeout", "longest gap between reads mid-stream, seconds (default 60)", web=True)
    opt("--llm-timeout", "whole-request time limit, seconds (default 600)", web=True)
    opt("--llm-insecure", "true/false: skip TLS certificate verification (default false)", web=True)
    opt("--llm-spawn-spread", "on/off: each new user waits a random part of its spawn interval (<= 1 s) before "
        "its first request, so a batch of -r users does not stream in phase (default on)", web=True)
    opt("--llm-think-jitter", "extra random pause before each later request, up to this long, e.g. 200ms "
        "(default 0: off); keeps fixed-length closed loops from re-aligning", web=True)
    opt("--llm-backoff", "on/off: a user that keeps failing to connect, or gets the same 4xx answer again and "
        "again, waits before its next request (0.5 s doubling to 8 s; default on)")
    opt("--llm-report", "directory for summary.json, summary.csv and requests.jsonl")
    opt("--llm-warmup", "exclude from statistics: N = each user's first N requests (default 1), or a time like 30s")
    opt("--llm-cooldown", "exclude requests that start in the last part of the run, e.g. 10s (needs -t)")
    opt("--llm-slo", "SLOs for goodput, any of ttft=500ms,tpot=50ms,e2e=30s")
    opt("--llm-sim-args", "extra llm-sim arguments for the auto-started simulator (no --host given)")
    opt("--llm-prometheus-port", "Prometheus /metrics port of the master or local runner (default 9646; 0 = off)")
    opt("--llm-prometheus-host", "address the Prometheus exporter listens on (default 0.0.0.0)")
    opt("--llm-prometheus-linger", "seconds the exporter keeps serving after the test stops (default 0)")
    opt("--llm-gpu-sidecar", "GPU sidecar URLs to pull during the run, comma-separated (host:port or URL)")
    opt("--llm-server-metrics", "the LLM server's own /metrics URL to pull during the run (vLLM, TGI)")
    opt("--llm-scrape-interval", "seconds between pulls of the sidecars and server metrics (default 2)")
    from llm_users.workload.build import add_arguments as add_workload_arguments

    add_workload_arguments(opt)
    from llm_users.outputs.cost import add_arguments as add_cost_arguments

    add_cost_arguments(opt)
    from llm_users.outputs.export import add_arguments as add_export_arguments

    add_export_arguments(opt)


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
    spawn_spread: bool = True  # first request at a random offset within the spawn interval
    think_jitter_s: float = 0.0  # each later request waits up to this much more (uniform)

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
    timeouts = Timeouts(
        connect=num("llm_connect_timeout", defaults.connect),
        first_byte=num("llm_first_byte_timeout", defaults.first_byte),
        read=num("llm_read_timeout", defaults.read),
        total=num("llm_timeout", defaults.total),
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
    if descriptor is not None:
        descriptor.route(endpoint)  # ConfigError naming the endpoints there are
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
    )


def _jitter(text: Any) -> float:
    if text is None or str(text).strip() in ("", "0", "off"):
        return 0.0
    return parse_duration_s(str(text), "--llm-think-jitter")


DEFAULT_PROMETHEUS_PORT = 9646
DEFAULT_SCRAPE_INTERVAL_S = 2.0


def parse_warmup(text: str | None) -> tuple[int | None, float]:
    """``'3'`` -> (3 requests per user, 0 s); ``'30s'`` -> (0, 30 s); not given -> (None, 0):
    the User class's ``warmup_requests`` (default 1) applies."""
    if text is None or str(text).strip() == "":
        return None, 0.0
    t = str(text).strip()
    if t.isdigit():
        return int(t), 0.0
    return 0, parse_duration_s(t, "--llm-warmup")


def _given(options: Any, name: str) -> Any:
    v = getattr(options, name, None) if options is not None else None
    return None if v is None or v == "" else v


def _number(options: Any, name: str, default: float, kind: type = float) -> Any:
    value = _given(options, name)
    if value is None:
        return default
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"--{name.replace('_', '-')} must be a number, got {value!r}") from None
    if number < 0:
        raise ConfigError(f"--{name.replace('_', '-')} must not be negative, got {value!r}")
    return number


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Every run-wide ``--llm-*`` option, parsed and checked once at start."""

    warmup_requests: int | None = None  # None: each User class's own warmup_requests
    warmup_s: float = 0.0
    cooldown_s: float = 0.0
    run_time_s: float | None = None
    slos: Mapping[str, float] = field(default_factory=dict)  # metric -> limit in ns
    report_dir: str | None = None
    sim_args: str = ""
    prometheus_port: int = 0  # 0 = no exporter
    prometheus_host: str = "0.0.0.0"
    prometheus_linger_s: float = 0.0
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S
    gpu_sidecars: tuple[str, ...] = ()
    server_metrics: str | None = None
    user_settings: Mapping[type, Settings] = field(default_factory=dict)
    backoff: bool = True

    @classmethod
    def from_options(cls, options: Any, user_classes: list[Any] | tuple[Any, ...] = ()) -> RunConfig:
        """Parse Locust's ``parsed_options`` (None when Locust is used as a library: then no
        port is opened unasked). Raises :class:`ConfigError` with one line naming the option."""
        warmup_requests, warmup_s = parse_warmup(_given(options, "llm_warmup"))
        cooldown = _given(options, "llm_cooldown")
        cooldown_s = parse_duration_s(cooldown, "--llm-cooldown") if cooldown is not None else 0.0
        run_time = _given(options, "run_time")
        if cooldown_s and not run_time:
            raise ConfigError("--llm-cooldown needs --run-time (-t), so the end of the run is known")
        sim_args = str(_given(options, "llm_sim_args") or "")
        try:
            shlex.split(sim_args)
        except ValueError as e:
            raise ConfigError(f"--llm-sim-args: cannot split {sim_args!r} ({e})") from None
        interval = _number(options, "llm_scrape_interval", DEFAULT_SCRAPE_INTERVAL_S)
        if interval <= 0:
            raise ConfigError("--llm-scrape-interval must be more than 0 seconds")
        sidecars = tuple(u.strip() for u in str(_given(options, "llm_gpu_sidecar") or "").split(",") if u.strip())
        settings = {c: settings_for(c, options) for c in user_classes if _is_llm_user(c)}
        return cls(
            warmup_requests=warmup_requests,
            warmup_s=warmup_s,
            cooldown_s=cooldown_s,
            run_time_s=float(run_time) if run_time else None,
            slos=MappingProxyType(parse_slos(_given(options, "llm_slo"))),
            report_dir=_given(options, "llm_report"),
            sim_args=sim_args,
            prometheus_port=_port(options),
            prometheus_host=str(_given(options, "llm_prometheus_host") or "0.0.0.0"),
            prometheus_linger_s=_number(options, "llm_prometheus_linger", 0.0),
            scrape_interval_s=interval,
            gpu_sidecars=sidecars,
            server_metrics=_server_metrics(options),
            user_settings=MappingProxyType(settings),
            backoff=_backoff(options),
        )

    def with_user_settings(self, options: Any, user_classes: list[Any] | tuple[Any, ...]) -> RunConfig:
        """The same run with the per-user settings read from ``options`` again (at each test
        start: the master's options on a worker, the web UI's start form)."""
        settings = {c: settings_for(c, options) for c in user_classes if _is_llm_user(c)}
        return replace(self, user_settings=MappingProxyType(settings), backoff=_backoff(options))

    @property
    def sim_argv(self) -> list[str]:
        return shlex.split(self.sim_args)

    def settings(self, user_cls: Any, options: Any = None) -> Settings:
        """The settings of one User class (resolved at start; a class added later, e.g. by a
        load shape, is resolved now)."""
        s = self.user_settings.get(user_cls)
        return s if s is not None else settings_for(user_cls, options)


def _backoff(options: Any) -> bool:
    value = _given(options, "llm_backoff")
    return True if value is None else parse_bool(value, "--llm-backoff")


def _server_metrics(options: Any) -> str | None:
    url = str(_given(options, "llm_server_metrics") or "").strip()
    return check_url(url, "--llm-server-metrics") if url else None


def _port(options: Any) -> int:
    port = _number(options, "llm_prometheus_port", DEFAULT_PROMETHEUS_PORT if options is not None else 0, int)
    if port > 65535:
        raise ConfigError(f"--llm-prometheus-port must be a TCP port, 1..65535 (0 = off), got {port}")
    return int(port)


def check_url(value: str, option: str) -> str:
    """An http(s) URL with a host name, or a ConfigError naming the option."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as e:
        raise ConfigError(f"{option} must be an http:// or https:// URL, got {value!r} ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{option} must be an http:// or https:// URL with a host name "
                          f"(e.g. http://localhost:8000), got {value!r}")
    return value


def _is_llm_user(cls: Any) -> bool:
    from llm_users.users import LLMUser

    return isinstance(cls, type) and issubclass(cls, LLMUser)


def run_config(environment: Any) -> RunConfig:
    """The run's configuration: the one the plugin built at start (``environment.llm_config``),
    or, for Locust used as a library without the plugin, one read from its options now."""
    config = getattr(environment, "llm_config", None)
    if config is None:
        config = RunConfig.from_options(getattr(environment, "parsed_options", None))
    return config
