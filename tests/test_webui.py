"""llm_users/webui.py: the start form's LLM fields are checked before a run starts."""

from __future__ import annotations

import argparse

from llm_users.users import VLLMUser
from llm_users.webui import check_form


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
