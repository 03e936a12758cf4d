"""The configuration: the ``--llm-*`` options (also environment variables and web-UI fields),
parsed once, and the one module that reads Locust's ``parsed_options``.

:func:`config_for` reads them at start into one frozen :class:`RunConfig`: the run-wide
fields, one :class:`~llm_users.settings.Settings` per User class (class attributes
overridden by the options given), and the parts other modules parse for it: the workload
(:mod:`llm_users.workload.build`), the study (:func:`llm_users.load.study.parse_options`),
the prices (:mod:`llm_users.outputs.cost`) and the export (:mod:`llm_users.outputs.export`).
The plugin passes it to whoever needs it (the run, the exporters; the users find it as
``environment.llm_config``, :func:`run_config`). Locust writes the web UI's start form into
its options and, on a worker, the master's options with each spawn, so :func:`install`
reads the per-test parts again as each test starts, and the web form is checked by the same
parser (:meth:`RunConfig.with_form`, the command line's messages). Durations follow one
rule: :mod:`llm_users.durations`.
"""

from __future__ import annotations

import logging
import shlex
import sys
from argparse import Namespace
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from llm_users.durations import parse_duration_s, parse_seconds
from llm_users.errors import ConfigError
from llm_users.key_scope import add_host, fix_at_start
from llm_users.load.ramp import is_ramp, parse_warmup, warmup_per_user
from llm_users.settings import Settings, Timeouts, is_llm_user, parse_bool, settings_for
from llm_users.slo import parse_slos

if TYPE_CHECKING:
    from llm_users.load.study import StudyConfig
    from llm_users.outputs.cost import Prices
    from llm_users.workload.build import WorkloadOptions

__all__ = ["RunConfig", "Settings", "Timeouts", "add_arguments", "check_url", "config_for", "current_options",
           "install", "parse_bool", "parse_warmup", "run_config", "settings_for"]
log = logging.getLogger(__name__)


def add_arguments(parser: Any) -> None:
    """Register the options on Locust's parser (``init_command_line_parser``)."""
    g = parser.add_argument_group("locust-llm", "LLM load-test settings (each also LOCUST_LLM_* in the env)")

    def opt(name: str, help: str, web: bool = False, **kw: Any) -> None:
        env = "LOCUST_" + name.lstrip("-").upper().replace("-", "_")
        action = g.add_argument(name, env_var=env, default=kw.pop("default", None), help=help, **kw)
        # ``web``: read again as each test starts, so a start-form value takes effect. The form
        # lists the options in their own LLM group (llm_users/webui/form.py), not under Locust's
        # "Custom parameters": a group's actions carry no ``include_in_web_ui``, Locust's form skips them.
        action.llm_per_test = web

    opt("--llm-model", "model name to request (default: the User class's; vLLM asks the server)", web=True)
    opt("--llm-max-tokens", "maximum output tokens per request (default 512)", web=True)
    opt("--llm-temperature", "sampling temperature (default 0)", web=True)
    opt("--llm-top-p", "nucleus sampling top_p (default 1)", web=True)
    opt("--llm-ignore-eos", "true/false: keep generating past EOS where the backend can (default true)", web=True)
    opt("--llm-endpoint", "chat | completions | responses | embeddings | rerank (OpenAI-style, vLLM), chat | generate "
        "| embed (Ollama), embed (TEI, Gemini)", web=True)
    opt("--llm-batch-size", "embeddings and rerank Users: inputs (texts, documents) per request, each one "
        "item of the workload (default 1)", web=True)
    opt("--llm-prompts", "the same as --llm-dataset (kept for existing command lines)", web=True)
    opt("--llm-api-key-env", "NAME of the environment variable that holds the API key (never the key; not "
        "settable from the web UI)")
    opt("--llm-api-key-hosts", "hosts the API key may go to besides the one given at start (--host, a User "
        "class's host, the auto-started simulator), comma-separated URLs or HOST[:PORT]; * = any. A host typed "
        "in the web UI outside them gets requests without the key")
    opt("--llm-client", "raw (default: our streaming client) | sdk (the backend's official SDK)", web=True)
    opt("--llm-connect-timeout", "connect time limit, e.g. 10s (bare seconds too; default 10s)", web=True)
    opt("--llm-first-byte-timeout", "time limit to the first response byte, e.g. 2m (default 120s)", web=True)
    opt("--llm-read-timeout", "longest gap between reads mid-stream, e.g. 60s (default 60s)", web=True)
    opt("--llm-timeout", "whole-request time limit, e.g. 10m (bare seconds too; default 600s)", web=True)
    opt("--llm-insecure", "true/false: skip TLS certificate verification (default false)")
    opt("--llm-cancel-after", "abandon requests (close the stream) after N token chunks (20tokens, 20 tokens) or "
        "a duration from sending (1.5s, 800ms); recorded as status cancelled, never a failure (default off)")
    opt("--llm-cancel-rate", "share 0..1 of requests --llm-cancel-after applies to, chosen reproducibly by "
        "--llm-seed (default 1: every request)")
    opt("--llm-spawn-spread", "on/off: each new user waits a random part of its spawn interval (<= 1 s) before "
        "its first request, so a batch of -r users does not stream in phase (default on)", web=True)
    opt("--llm-think-jitter", "extra random pause before each later request, up to this long, e.g. 200ms "
        "(default 0: off); keeps fixed-length closed loops from re-aligning", web=True)
    opt("--llm-tools", "FILE: function tools (OpenAI's JSON shape) sent with every request, in each backend's "
        "own shape; tool-call deltas count as output chunks", web=True)
    opt("--llm-response-format", "json | schema:FILE: ask for a JSON answer (with a JSON Schema); each answer is "
        "checked (summary.json structured_valid/structured_invalid)", web=True)
    opt("--llm-backoff", "on/off: a user that keeps failing the same way (no connection, the same 4xx, an "
        "empty 200, the same in-stream error, a stream cut at the same point) waits before its next request (0.5 s doubling to 8 s; default on)")
    opt("--llm-preflight", "on/off: before the load, one tiny request per route (and the model probe) that must "
        "succeed; a dead host, 401/403, 404 or a wrong route stops the run at start, exit 1 (default on)")
    opt("--llm-fail-stop", "stop the run, exit 1, when every request has failed for this long, e.g. 30s; off = "
        "never (default 30s)")
    opt("--llm-report", "directory for summary.json, summary.csv and requests.jsonl")
    opt("--llm-allow-worker-loss", "true/false: a run that lost a worker (killed, its host gone) exits 0; by default "
        "it exits 1, its summary saying what the lost worker took with it (default false)")
    opt("--llm-html", "on/off: report.html in the --llm-report directory (default on; its charts cost a few "
        "seconds of CPU at the end of each run, the other files are written either way)")
    opt("--llm-warmup", "exclude from statistics: N = each user's first N requests (default 1; 0 under --llm-trace, "
        "whose rows are the workload), a time like 30s, "
        "or ramp: every request started before all -u users run (measure at the plateau only)")
    opt("--llm-cooldown", "exclude requests that start in the last part of the run, e.g. 10s (needs -t)")
    opt("--llm-slo", "SLOs for goodput, any of ttft=500ms,tpot=50ms,e2e=30s")
    opt("--llm-sim-args", "extra llm-sim arguments for the auto-started simulator (no --host given)")
    opt("--llm-prometheus-port", "Prometheus /metrics port of the master or local runner (default 9646; 0 = off)")
    opt("--llm-prometheus-host", "address the Prometheus exporter listens on (default 0.0.0.0)")
    opt("--llm-prometheus-linger", "how long the exporter keeps serving after the test stops, e.g. 30s (default 0)")
    opt("--llm-gpu-sidecar", "GPU sidecar URLs to pull during the run, comma-separated (host:port or URL)")
    opt("--llm-server-metrics", "the LLM server's own /metrics: URL, or off (default auto: found on --host for "
        "vLLM, SGLang, TGI, llama.cpp)")
    opt("--llm-scrape-interval", "time between pulls of the sidecars and server metrics, e.g. 2s (default 2s)")
    from llm_users.workload.build import add_arguments as add_workload_arguments

    add_workload_arguments(opt)
    from llm_users.outputs.cost import add_arguments as add_cost_arguments

    add_cost_arguments(opt)
    from llm_users.outputs.export import add_arguments as add_export_arguments

    add_export_arguments(opt)
    from llm_users.protocols.limits import add_arguments as add_limit_arguments

    add_limit_arguments(opt)  # --llm-max-event-bytes, -body-bytes, -header-bytes, --llm-max-chunks


DEFAULT_PROMETHEUS_PORT = 9646
DEFAULT_SCRAPE_INTERVAL_S = 2.0
DEFAULT_FAIL_STOP_S = 30.0


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


def _seconds(options: Any, name: str, default: float) -> float:
    """A time option given in seconds or with a unit (``30s``, ``500ms``), never negative."""
    value = _given(options, name)
    if value is None:
        return default
    seconds = value if isinstance(value, int | float) else parse_seconds(value, f"--{name.replace('_', '-')}")
    if seconds < 0:
        raise ConfigError(f"--{name.replace('_', '-')} must not be negative, got {value!r}")
    return float(seconds)


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Every ``--llm-*`` option, parsed and checked once at start; the per-test parts again as
    each test starts (:meth:`for_test`)."""

    warmup_requests: int | None = None  # None: each User class's own warmup_requests
    warmup_s: float = 0.0
    warmup_ramp: bool = False  # --llm-warmup ramp: requests started before the spawn completed (load/ramp.py)
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
    #: look for the server's /metrics on --host (``--llm-server-metrics`` not given; off: False)
    server_metrics_auto: bool = True
    user_settings: Mapping[type, Settings] = field(default_factory=dict)
    backoff: bool = True
    html: bool = True  # --llm-html: report.html among the report files
    #: the workload options (a User class's own ``prompts`` where no dataset is given: workload_for)
    workload: WorkloadOptions | None = None
    study: StudyConfig | None = None  # open loop, stages, sweep, trace replay (llm_users/load/registry.py)
    cost: Prices | None = None  # --llm-price
    export: tuple[str, str] | None = None  # --llm-export FORMAT FILE
    spawn_seed: str | None = None  # --llm-seed as given: each user's own generator (llm_users/load/spawn.py)
    preflight: bool = True  # --llm-preflight: one request per route before the load (health/preflight.py)
    fail_stop_s: float | None = DEFAULT_FAIL_STOP_S  # --llm-fail-stop: None = off (health/guard.py)
    allow_worker_loss: bool = False  # --llm-allow-worker-loss: a lost worker does not make the exit code 1
    headless: bool = False  # Locust's --headless: the LLM table prints after Locust's final one (outputs/console.py)
    #: the options these were parsed from, read-only (None: Locust used as a library, no options)
    options: Mapping[str, Any] | None = None

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
        interval = _seconds(options, "llm_scrape_interval", DEFAULT_SCRAPE_INTERVAL_S)
        if interval <= 0:
            raise ConfigError("--llm-scrape-interval must be more than 0 seconds")
        sidecars = tuple(u.strip() for u in str(_given(options, "llm_gpu_sidecar") or "").split(",") if u.strip())
        settings = _user_settings(options, user_classes)
        return cls(
            warmup_requests=warmup_requests,
            warmup_s=warmup_s,
            warmup_ramp=is_ramp(_given(options, "llm_warmup")),
            cooldown_s=cooldown_s,
            run_time_s=float(run_time) if run_time else None,
            slos=MappingProxyType(parse_slos(_given(options, "llm_slo"))),
            report_dir=_given(options, "llm_report"),
            sim_args=sim_args,
            prometheus_port=_port(options),
            prometheus_host=str(_given(options, "llm_prometheus_host") or "0.0.0.0"),
            prometheus_linger_s=_seconds(options, "llm_prometheus_linger", 0.0),
            scrape_interval_s=interval,
            gpu_sidecars=sidecars,
            server_metrics=_server_metrics(options),
            server_metrics_auto=str(_given(options, "llm_server_metrics") or "auto").strip().lower() == "auto",
            user_settings=settings,
            backoff=_backoff(options),
            html=_on_off(options, "llm_html", "--llm-html"),
            workload=_workload(options),
            study=_study(options),
            cost=_cost(options),
            export=_export(options),
            spawn_seed=_spawn_seed(options),
            preflight=_preflight(options),
            fail_stop_s=_fail_stop(options),
            allow_worker_loss=parse_bool(_given(options, "llm_allow_worker_loss") or False, "--llm-allow-worker-loss"),
            headless=bool(_given(options, "headless")),
            options=_snapshot(options),
        )

    def for_test(self, options: Any, user_classes: list[Any] | tuple[Any, ...]) -> RunConfig:
        """This run with its per-test parts read again from ``options`` (as a test starts: the
        web UI's start form, a worker's options from the master): the per-user settings and
        back-off, the workload, the spawn seed, the study's fields, the SLOs (adopted only before the
        first record: :meth:`LLMRun.adopt_slos`), the warm-up (a worker's is the master's: load/warmup.py)."""
        try:
            study = _study(options)
        except ConfigError as e:
            log.error("locust-llm: %s; the open-loop settings stay as they were", e)
            study = self.study
        try:
            slos = MappingProxyType(parse_slos(_given(options, "llm_slo")))
        except ConfigError as e:
            log.error("locust-llm: %s; the SLOs stay as they were", e)
            slos = self.slos
        warmup_requests, warmup_s = parse_warmup(warmup := _given(options, "llm_warmup"))
        return replace(self, user_settings=_user_settings(options, user_classes), backoff=_backoff(options),
                       warmup_requests=warmup_requests, warmup_s=warmup_s, warmup_ramp=is_ramp(warmup),
                       workload=_workload(options), spawn_seed=_spawn_seed(options), study=study, slos=slos,
                       preflight=_preflight(options), options=_snapshot(options))

    def with_form(self, fields: Mapping[str, Any], user_classes: list[Any] | tuple[Any, ...]) -> RunConfig:
        """The configuration the web UI's start form would give: its ``llm_*`` fields over this
        run's options, through the command line's parser (so a bad value has the same message)."""
        return RunConfig.from_options(Namespace(**{**(self.options or {}), **fields}), user_classes)

    def warmup_for(self, default: int) -> int:
        """Each user's warm-up requests: ``--llm-warmup N``, else none in a trace replay, else
        ``default`` (the User class's own: load/ramp.py ``warmup_per_user``)."""
        return warmup_per_user(self.warmup_requests, self.study, default)

    @property
    def sim_argv(self) -> list[str]:
        return shlex.split(self.sim_args)

    def settings(self, user_cls: Any) -> Settings:
        """The settings of one User class (resolved at start; a class added later, e.g. by a
        load shape, is resolved now, from the same options)."""
        s = self.user_settings.get(user_cls)
        return s if s is not None else settings_for(user_cls, self._namespace())

    def workload_for(self, user_cls: Any) -> WorkloadOptions:
        """The workload one User class sends (its own ``prompts`` where no dataset is given)."""
        from llm_users.workload.build import WorkloadOptions

        return (self.workload or WorkloadOptions()).for_class(user_cls)

    def _namespace(self) -> Namespace | None:
        return None if self.options is None else Namespace(**self.options)


def _user_settings(options: Any, user_classes: list[Any] | tuple[Any, ...]) -> Mapping[type, Settings]:
    return MappingProxyType({c: settings_for(c, options) for c in user_classes if is_llm_user(c)})


def _workload(options: Any) -> WorkloadOptions:
    from llm_users.workload.build import workload_options

    return workload_options(options)


def _study(options: Any) -> StudyConfig:
    from llm_users.load.study import parse_options  # the profiles' registry: read when parsing, not at import

    return parse_options(options)


def _cost(options: Any) -> Prices | None:
    from llm_users.outputs.cost import parse_prices

    text = _given(options, "llm_price")
    return parse_prices(text) if text else None


def _export(options: Any) -> tuple[str, str] | None:
    from llm_users.outputs.export import parse

    return parse(_given(options, "llm_export"))


def _spawn_seed(options: Any) -> str | None:
    seed = getattr(options, "llm_seed", None) if options is not None else None
    return None if seed is None or str(seed).strip() == "" else str(seed)


def _snapshot(options: Any) -> Mapping[str, Any] | None:
    if options is None:
        return None
    return MappingProxyType(dict(vars(options)) if hasattr(options, "__dict__") else dict(options))


def _backoff(options: Any) -> bool:
    return _on_off(options, "llm_backoff", "--llm-backoff")


def _on_off(options: Any, name: str, flag: str, default: bool = True) -> bool:
    value = _given(options, name)
    return default if value is None else parse_bool(value, flag)


def _preflight(options: Any) -> bool:
    return _on_off(options, "llm_preflight", "--llm-preflight")


def _fail_stop(options: Any) -> float | None:
    value = _given(options, "llm_fail_stop")
    if value is None:
        return DEFAULT_FAIL_STOP_S if options is not None else None
    if str(value).strip().lower() in ("off", "false", "no", "0"):
        return None
    seconds = parse_duration_s(value, "--llm-fail-stop")
    if seconds <= 0:
        raise ConfigError(f"--llm-fail-stop must be a duration above 0 (e.g. 30s) or off, got {value!r}")
    return seconds


def _server_metrics(options: Any) -> str | None:
    url = str(_given(options, "llm_server_metrics") or "").strip()
    if url.lower() in ("", "auto", "off"):
        return None
    return check_url(url, "--llm-server-metrics (a URL, off, or auto)")


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


# The configuration of the run in hand -----------------------------------------------------------

def config_for(environment: Any) -> RunConfig:
    """The run's configuration from Locust's options and User classes (at init). It first fixes
    where the API key may go (:func:`llm_users.key_scope.fix_at_start`), before the web UI or
    a spawn message can change the host."""
    options = getattr(environment, "parsed_options", None)
    classes = list(environment.user_classes or [])
    fix_at_start(options, environment.host, classes)
    return RunConfig.from_options(options, classes)


def add_start_host(environment: Any, config: RunConfig, url: str) -> RunConfig:
    """A host the run gave itself at start, after the options were read (the auto-started
    simulator): the API key may go there too. Returns the configuration with it (also made the
    run's, ``environment.llm_config``)."""
    add_host(environment.parsed_options, url)
    environment.llm_config = config.for_test(environment.parsed_options, list(config.user_settings))
    return environment.llm_config


def install(environment: Any, config: RunConfig) -> None:
    """Make ``config`` the run's (``environment.llm_config``) and read its per-test parts again
    as each test starts. Install it before anything else listens to ``test_start``: what starts
    with the test (the study, then the users) reads the configuration of that test."""
    environment.llm_config = config
    environment.events.test_start.add_listener(lambda **_: _refresh(environment))


def _refresh(environment: Any) -> None:
    """Locust has written the web UI's start form into its options, or, on a worker, the
    master's options (it sends them with every spawn)."""
    config = environment.llm_config
    classes = list(config.user_settings) or list(environment.user_classes or [])
    try:
        environment.llm_config = config.for_test(environment.parsed_options, classes)
    except ConfigError as e:  # the web form is checked before it starts a test; a worker says why
        print(f"locust-llm: {e}", file=sys.stderr, flush=True)


def run_config(environment: Any) -> RunConfig:
    """The run's configuration: the one the plugin built at start (``environment.llm_config``),
    or, for Locust used as a library without the plugin, one read from its options now."""
    config = getattr(environment, "llm_config", None)
    if config is None:
        config = RunConfig.from_options(getattr(environment, "parsed_options", None))
    return config


def current_options(environment: Any) -> Mapping[str, Any]:
    """Locust's options as they are now, read-only, for the report (``config`` in summary.json,
    its environment's ``options``, the export's user count): Locust changes some mid-run (the web
    UI's Edit form sets ``num_users``), so the report reads them when it is written."""
    return _snapshot(getattr(environment, "parsed_options", None)) or MappingProxyType({})
