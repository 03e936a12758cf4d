"""options.py: class defaults, overrides, keys from the environment, clear errors."""

from __future__ import annotations

from argparse import Namespace

import pytest

from llm_users.durations import parse_duration_ns, parse_duration_s
from llm_users.errors import ConfigError
from llm_users.options import RunConfig, settings_for
from llm_users.users import GeminiUser, OpenAIUser, VLLMUser


def opts(**kw) -> Namespace:
    return Namespace(**kw)


def test_defaults_are_the_fixed_sampling() -> None:
    s = settings_for(VLLMUser, opts())
    assert (s.sampling.max_tokens, s.sampling.temperature, s.sampling.top_p, s.sampling.ignore_eos) == (512, 0.0, 1.0, True)
    assert s.client == "raw" and s.verify_tls and s.model is None
    assert settings_for(OpenAIUser, opts()).sampling.ignore_eos is False


def test_options_override_class_attributes() -> None:
    s = settings_for(VLLMUser, opts(llm_max_tokens=64, llm_temperature=0.7, llm_ignore_eos="false",
                                    llm_model="x", llm_read_timeout=3.5, llm_insecure="true"))
    assert s.sampling.max_tokens == 64 and s.sampling.temperature == 0.7 and not s.sampling.ignore_eos
    assert s.model == "x" and s.timeouts.read == 3.5 and not s.verify_tls


@pytest.mark.parametrize(("kw", "msg"), [({"llm_ignore_eos": "maybe"}, "true or false"),
                                         ({"llm_client": "curl"}, "raw or sdk"),
                                         ({"llm_top_p": 0.0}, "top_p")])
def test_bad_values(kw, msg) -> None:
    with pytest.raises(ConfigError, match=msg):
        settings_for(VLLMUser, opts(**kw))


def test_api_key_from_named_variables(monkeypatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key")
    s = settings_for(GeminiUser, opts())
    assert s.api_key() == "g-key"
    assert s.api_key_names() == "GEMINI_API_KEY (or GOOGLE_API_KEY)"
    monkeypatch.setenv("MY_KEY", "mine")
    assert settings_for(OpenAIUser, opts(llm_api_key_env="MY_KEY")).api_key() == "mine"


# The run configuration and the one duration rule (durations.py) --------------------------------

@pytest.mark.parametrize(("text", "ns"), [
    ("250ns", 250), ("40us", 40_000), ("40µs", 40_000), ("500ms", 5e8), ("30s", 3e10),
    ("2m", 1.2e11), ("1h", 3.6e12), ("1.5s", 1.5e9), (".5s", 5e8), (" 10 ms ", 1e7),
])
def test_each_documented_duration_form(text: str, ns: float) -> None:
    assert parse_duration_ns(text, "--x") == pytest.approx(ns)


@pytest.mark.parametrize("text", ["30", "0.5", "", "ms", "5 parsecs", "-3s", "1h30m", "3d"])
def test_anything_else_is_refused_naming_the_option(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^--llm-cooldown: cannot read .* as a duration"):
        parse_duration_ns(text, "--llm-cooldown")


def test_a_bare_number_is_refused_with_a_hint() -> None:
    with pytest.raises(ConfigError, match="bare number"):
        parse_duration_s("10", "--llm-cooldown")


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


@pytest.mark.parametrize(("kw", "msg"), [
    (dict(llm_cooldown="10s"), "--llm-cooldown needs --run-time"),
    (dict(llm_cooldown="10s", run_time=30, llm_warmup="x"), "--llm-warmup"),
    (dict(llm_slo="ttft=fast"), "--llm-slo"),
    (dict(llm_sim_args='--a "unclosed'), "--llm-sim-args"),
])
def test_run_config_errors_name_the_option(kw: dict, msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        RunConfig.from_options(opts(**kw))
