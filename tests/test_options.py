"""options.py: the one run configuration (RunConfig), parsed once, each test start reading its per-test
parts again, clear errors naming the option, the time limits' bare seconds."""

from __future__ import annotations

import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from llm_users.errors import ConfigError
from llm_users.options import RunConfig, settings_for
from llm_users.users import VLLMUser


def opts(**kw) -> Namespace:
    return Namespace(**kw)


# The run configuration (one user's settings: tests/test_settings.py; the duration rule: tests/test_durations.py)

def test_run_config_reads_every_option_once() -> None:
    c = RunConfig.from_options(opts(llm_warmup="30s", llm_cooldown="5s", run_time=60, llm_slo="ttft=500ms",
                                    llm_report="out", llm_sim_args="--itl-ms 5", llm_prometheus_port="0",
                                    llm_gpu_sidecar="a:1, b:2", llm_scrape_interval="0.5"), [VLLMUser])
    assert (c.warmup_requests, c.warmup_s, c.cooldown_s, c.run_time_s) == (0, 30.0, 5.0, 60.0)
    assert dict(c.slos) == {"ttft": 5e8} and c.report_dir == "out" and c.sim_argv == ["--itl-ms", "5"]
    assert c.prometheus_port == 0 and c.gpu_sidecars == ("a:1", "b:2") and c.scrape_interval_s == 0.5
    assert c.settings(VLLMUser).sampling.max_tokens == 512
    with pytest.raises(AttributeError):
        c.warmup_s = 1.0  # type: ignore[misc]  # frozen


def test_run_config_defaults() -> None:
    c = RunConfig.from_options(opts())
    assert (c.warmup_requests, c.warmup_s, c.cooldown_s, c.run_time_s) == (None, 0.0, 0.0, None)
    assert c.prometheus_port == 9646 and c.scrape_interval_s == 2.0 and not c.slos
    assert RunConfig.from_options(None).prometheus_port == 0  # Locust as a library: no port unasked
    assert RunConfig.from_options(opts(llm_warmup="3")).warmup_requests == 3
    assert not c.warmup_ramp


def test_warmup_ramp_measures_at_the_plateau_only() -> None:
    """Issue 53 item 1: `--llm-warmup ramp`: no per-user count, no time; the spawn's end decides."""
    c = RunConfig.from_options(opts(llm_warmup="ramp"))
    assert (c.warmup_requests, c.warmup_s, c.warmup_ramp) == (0, 0.0, True)
    assert not RunConfig.from_options(opts(llm_warmup="30s")).warmup_ramp


@pytest.mark.parametrize(("kw", "msg"), [
    (dict(llm_cooldown="10s"), "--llm-cooldown needs --run-time"),
    (dict(llm_cooldown="10s", run_time=30, llm_warmup="x"), "--llm-warmup"),
    (dict(llm_slo="ttft=fast"), "--llm-slo"),
    (dict(llm_sim_args='--a "unclosed'), "--llm-sim-args"),
])
def test_run_config_errors_name_the_option(kw: dict, msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        RunConfig.from_options(opts(**kw))


# One configuration, parsed once (issue 26) -----------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def test_the_configuration_loads_without_gevent_or_httptools() -> None:
    """options.py no longer takes Timeouts from the stream client: reading the configuration
    does not import the network stack (nor Locust)."""
    code = ("import llm_users.options, sys; "
            "assert 'gevent' not in sys.modules and 'httptools' not in sys.modules, sorted(sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_configuration_and_the_users_are_in_no_import_cycle() -> None:
    from tests.test_structure import cycles, import_graph

    graph = import_graph()
    assert "llm_users.users" not in graph["llm_users.options"]
    tangled = [c for c in cycles(graph) if {"llm_users.options", "llm_users.users", "llm_users.settings"} & set(c)]
    assert tangled == []


def test_every_part_is_parsed_into_the_one_configuration() -> None:
    c = RunConfig.from_options(opts(llm_price="in=1,out=2", llm_export=["vllm-bench", "out.json"], llm_seed="07",
                                    llm_rate="5", llm_max_inflight="3", llm_input_tokens="64",
                                    llm_first_byte_timeout="7"), [VLLMUser])
    assert c.cost is not None and (c.cost.input, c.cost.output) == (1.0, 2.0)
    assert c.export == ("vllm-bench", "out.json")
    assert c.spawn_seed == "07"  # as given: the users' generators are seeded by the text
    loop = c.study.part("open_loop") if c.study is not None else None
    assert loop is not None and (loop.rate, loop.cap, loop.seed, c.study.open_loop) == (5.0, 3, 7, True)
    assert c.workload is not None and c.workload.input_tokens is not None and c.workload.seed == 7
    assert c.settings(VLLMUser).timeouts.first_byte == 7.0
    assert c.options is not None and c.options["llm_rate"] == "5"
    with pytest.raises(TypeError):
        c.options["llm_rate"] = "6"  # type: ignore[index]  # read-only


class _Listed(VLLMUser):
    prompts = "conversations"


def test_a_user_class_keeps_its_own_dataset_where_none_is_given() -> None:
    assert RunConfig.from_options(opts()).workload_for(_Listed).dataset == "conversations"
    assert RunConfig.from_options(opts(llm_dataset="short")).workload_for(_Listed).dataset == "short"
    assert RunConfig.from_options(opts()).workload_for(VLLMUser).dataset is None


@pytest.mark.parametrize(("kw", "msg"), [
    (dict(llm_price="free"), "--llm-price"),
    (dict(llm_export=["csv", "x"]), "--llm-export"),
    (dict(llm_rate="fast"), "--llm-rate"),
    (dict(llm_stages="50:60s", llm_steps="1:2:1:5s"), "--llm-stages or --llm-steps"),
    (dict(llm_seed="x"), "--llm-seed must be a whole number"),
    (dict(llm_prefix_tokens=8), "--llm-prefix-tokens needs --llm-input-tokens"),
])
def test_every_part_fails_at_start_naming_the_option(kw: dict, msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        RunConfig.from_options(opts(**kw), [VLLMUser])


def test_each_test_start_reads_the_per_test_parts_again() -> None:
    """Locust writes the web form (or, on a worker, the master's options) into its options before
    test_start: the users, the study and the workload of that test see them; the run-wide parts stay."""
    from locust.env import Environment

    from llm_users import options

    ns = Namespace(llm_max_tokens="16", llm_report="out", llm_rate=None, llm_seed=None)
    env = Environment(user_classes=[VLLMUser], parsed_options=ns)
    options.install(env, options.config_for(env))
    first = options.run_config(env)
    assert first.settings(VLLMUser).sampling.max_tokens == 16 and first.study.part("open_loop").rate is None
    ns.llm_max_tokens, ns.llm_rate, ns.llm_seed, ns.llm_input_tokens, ns.llm_report = "32", "9", "4", "128", "other"
    env.events.test_start.fire(environment=env)
    now = options.run_config(env)
    assert now.settings(VLLMUser).sampling.max_tokens == 32
    loop = now.study.part("open_loop")
    assert (loop.rate, loop.seed, now.spawn_seed) == (9.0, 4, "4")
    assert now.workload.input_tokens is not None and now.options["llm_max_tokens"] == "32"
    assert now.report_dir == "out"  # run-wide: as parsed at start
    ns.llm_max_tokens = "lots"
    env.events.test_start.fire(environment=env)  # a bad value: said once, the test keeps its settings
    assert options.run_config(env).settings(VLLMUser).sampling.max_tokens == 32


def test_the_report_reads_locusts_options_as_they_are_now() -> None:
    from types import SimpleNamespace

    from llm_users import options

    ns = Namespace(num_users=2)
    env = SimpleNamespace(parsed_options=ns)
    assert options.current_options(env)["num_users"] == 2
    ns.num_users = 5  # the web UI's Edit form, mid-run
    assert options.current_options(env)["num_users"] == 5
    assert dict(options.current_options(SimpleNamespace(parsed_options=None))) == {}


def test_a_test_reads_the_slos_again_and_a_bad_one_keeps_the_runs() -> None:
    """The web form's --llm-slo reaches the configuration of the test it starts (the run takes
    them before its first record: tests/test_distributed.py); a bad one keeps the run's."""
    run = RunConfig.from_options(Namespace(llm_slo="ttft=500ms"), [VLLMUser])
    fresh = run.for_test(Namespace(llm_slo="ttft=300ms,tpot=50ms"), [VLLMUser])
    assert dict(fresh.slos) == {"ttft": 300e6, "tpot": 50e6} and dict(run.slos) == {"ttft": 500e6}
    assert dict(run.for_test(Namespace(llm_slo="ttft=fast"), [VLLMUser]).slos) == {"ttft": 500e6}


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30.0), ("500ms", 0.5), ("2m", 120.0), ("45", 45.0),
                                                ("1.5", 1.5)])
def test_the_time_limits_take_a_unit_and_bare_seconds_still(text: str, seconds: float) -> None:
    """Issue 53 item 7: ``--llm-timeout 30s`` was refused; ``--llm-timeout 30`` keeps working."""
    s = settings_for(VLLMUser, Namespace(llm_timeout=text, llm_connect_timeout=text, llm_first_byte_timeout=text,
                                         llm_read_timeout=text))
    assert s.timeouts.total == s.timeouts.connect == s.timeouts.first_byte == s.timeouts.read == seconds
    cfg = RunConfig.from_options(Namespace(llm_scrape_interval=text, llm_prometheus_linger=text))
    assert cfg.scrape_interval_s == cfg.prometheus_linger_s == seconds


def test_a_time_limit_that_is_no_duration_names_the_option() -> None:
    with pytest.raises(ConfigError, match=r"^--llm-timeout: cannot read 'soon' as a duration"):
        settings_for(VLLMUser, Namespace(llm_timeout="soon"))
    with pytest.raises(ConfigError, match=r"^--llm-scrape-interval: cannot read '2 sec' as a duration"):
        RunConfig.from_options(Namespace(llm_scrape_interval="2 sec"))
    with pytest.raises(ConfigError, match=r"^--llm-prometheus-linger must not be negative"):
        RunConfig.from_options(Namespace(llm_prometheus_linger="-1"))
