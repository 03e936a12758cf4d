"""llm_users/webui/tab.py: the start form's LLM fields are checked before a run starts."""

from __future__ import annotations

import argparse

import pytest

from llm_users.errors import ConfigError
from llm_users.options import RunConfig
from llm_users.users import VLLMUser
from llm_users.webui.tab import check_form


def opts(**kw: object) -> RunConfig:
    """The run's configuration from these options (the form's fields go over them)."""
    return RunConfig.from_options(argparse.Namespace(**kw))


def test_good_and_empty_fields_pass() -> None:
    assert check_form({"user_count": "4"}, opts(), [VLLMUser]) is None
    assert check_form({"llm_max_tokens": "16", "llm_model": "m", "llm_temperature": ""}, opts(), [VLLMUser]) is None


def test_bad_fields_get_one_line_reasons() -> None:
    # the command line's own line (llm_users/options.py), not a message of the form's own
    assert check_form({"llm_max_tokens": "lots"}, opts(), [VLLMUser]) == "--llm-max-tokens must be a whole number, got 'lots'"
    assert check_form({"llm_top_p": "x"}, opts(), [VLLMUser]) == "--llm-top-p must be a number, got 'x'"
    reason = check_form({"llm_client": "curl"}, opts(), [VLLMUser])
    assert reason is not None and "--llm-client" in reason and "\n" not in reason


def test_per_request_settings_are_start_form_fields_and_process_ones_are_not() -> None:
    """Locust's start form lists the actions marked include_in_web_ui (its own add_argument marks
    them; our argument group's does not, so options.add_arguments must)."""
    from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments

    from llm_users import options

    parser = get_empty_argument_parser()
    setup_parser_arguments(parser)
    options.add_arguments(parser)
    web = set(parser.args_included_in_web_ui)
    assert {"llm_model", "llm_max_tokens", "llm_endpoint", "llm_temperature", "llm_client",
            "llm_spawn_spread", "llm_think_jitter"} <= web
    assert not {"llm_report", "llm_prometheus_port", "llm_slo", "llm_sim_args", "llm_gpu_sidecar"} & web


def _command_line_error(*args: str) -> str:
    """The line ``locust --llm-... VALUE`` stops with (the plugin prints it after 'locust-llm: ')."""
    from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments

    from llm_users import options
    from llm_users.load import study

    parser = get_empty_argument_parser()
    setup_parser_arguments(parser)
    options.add_arguments(parser)
    study.add_arguments(parser)
    parsed = parser.parse_args(["-f", "locustfile.py", *args])
    try:
        RunConfig.from_options(parsed, [VLLMUser])
    except ConfigError as e:
        return str(e)
    raise AssertionError(f"{args} was accepted")


@pytest.mark.parametrize(("field", "value"), [
    ("llm_max_tokens", "lots"), ("llm_temperature", "9"), ("llm_connect_timeout", "-1"),
    ("llm_client", "curl"), ("llm_rate", "fast"), ("llm_seed", "x"), ("llm_think_jitter", "5"),
])
def test_the_web_form_and_the_command_line_give_the_same_line(field: str, value: str) -> None:
    """Issue 26: the form is checked by the command line's parser, so the reasons are the same."""
    cli = _command_line_error("--" + field.replace("_", "-"), value)
    assert cli.startswith("--" + field.replace("_", "-"))
    assert check_form({field: value}, opts(), [VLLMUser]) == cli
