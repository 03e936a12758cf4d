"""llm_users/webui/tab.py: the start form's LLM fields are checked before a run starts."""

from __future__ import annotations

import argparse

from llm_users.users import VLLMUser
from llm_users.webui.tab import check_form


def opts(**kw: object) -> argparse.Namespace:
    return argparse.Namespace(**kw)


def test_good_and_empty_fields_pass() -> None:
    assert check_form({"user_count": "4"}, opts(), [VLLMUser]) is None
    assert check_form({"llm_max_tokens": "16", "llm_model": "m", "llm_temperature": ""}, opts(), [VLLMUser]) is None


def test_bad_fields_get_one_line_reasons() -> None:
    assert check_form({"llm_max_tokens": "lots"}, opts(), [VLLMUser]) == "--llm-max-tokens must be an integer, got 'lots'"
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
