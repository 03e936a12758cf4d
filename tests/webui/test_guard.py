"""The web UI's rules for a visitor (llm_users/webui/guard.py), each on the values it decides;
tests/e2e/test_webui_guard.py drives them through a real locust process."""

from __future__ import annotations

from argparse import Namespace

from llm_users.options import RunConfig
from llm_users.webui.form import web_fields
from llm_users.webui.guard import (
    cross_origin,
    exposure_line,
    key_notes,
    refused_field,
    refused_host,
    refused_user_class,
    refused_users,
    refused_value,
)
from locustfiles.vllm import VLLMUser

OPTIONS = {"num_users": 1, "host": "http://127.0.0.1:8000", "html_file": None, "llm_api_key_env": None,
           "llm_insecure": None, "llm_tools": None, "llm_dataset": None, "llm_report": None,
           "llm_api_key_hosts": "http://127.0.0.1:8000", "my_custom": "x"}


def test_only_the_forms_fields_are_settable() -> None:
    assert refused_field(["user_count", "spawn_rate", "host", "run_time", "llm_max_tokens", "llm_slo", "my_custom",
                          "not_an_option"], OPTIONS, ["my_custom"]) is None
    assert refused_field(["llm_api_key_env"], OPTIONS, []) == (
        "--llm-api-key-env cannot be set from the web UI: give it on the command line "
        "(the API key's variable is chosen on the command line only)")
    for name in ("llm_api_key_hosts", "llm_insecure", "llm_tools", "llm_report", "html_file", "llm_prompts"):
        assert refused_field(["host", name], OPTIONS, ["my_custom"]) == (
            f"--{name.replace('_', '-')} cannot be set from the web UI: give it on the command line"), name
    assert "llm_api_key_env" not in web_fields() and "llm_tools" not in web_fields()


def test_a_dataset_from_the_web_is_a_shipped_one_or_the_runs_own() -> None:
    shipped = ["conversations.json", "short.json"]
    assert refused_value({"llm_dataset": "short"}, OPTIONS, shipped) is None
    assert refused_value({"llm_dataset": "conversations.json"}, OPTIONS, shipped) is None
    assert refused_value({"llm_dataset": "/root/.aws/credentials"}, OPTIONS, shipped) == (
        "--llm-dataset from the web UI takes a shipped dataset (conversations.json, short.json); "
        "give a file on the command line")
    own = {**OPTIONS, "llm_dataset": "/data/mine.jsonl"}
    assert refused_value({"llm_dataset": "/data/mine.jsonl"}, own, shipped) is None  # sent back unchanged
    assert refused_value({"llm_response_format": "json"}, OPTIONS, shipped) is None
    assert refused_value({"llm_response_format": "schema:/etc/passwd"}, OPTIONS, shipped).startswith(
        "--llm-response-format from the web UI takes json")


def test_an_empty_or_bad_host_is_one_line() -> None:
    assert refused_host("", classes_have_hosts=False) == "give the server's URL as Host, e.g. http://localhost:8000"
    assert refused_host("", classes_have_hosts=True) is None
    assert refused_host("localhost:8000", classes_have_hosts=False).startswith("Host must be an http:// or https://")
    assert refused_host("http://10.1.2.3:8000", classes_have_hosts=False) is None


def test_the_user_class_editor_sets_its_own_fields_only() -> None:
    assert refused_user_class({"user_class_name": "VLLMUser", "host": "http://h:1", "weight": 2, "fixed_count": 0,
                               "tasks": ["generate"]}) is None
    assert refused_user_class({"user_class_name": "VLLMUser", "api_key_env": "AWS_SECRET_ACCESS_KEY",
                               "extra_headers": {}}) == (
        "the web UI may change a User class's host, weight, fixed_count and tasks only, not api_key_env, extra_headers")


def test_a_post_from_another_origin_is_refused() -> None:
    own = "http://127.0.0.1:8089/"
    assert cross_origin("POST", {"Origin": "http://evil.example"}, own)
    assert cross_origin("POST", {"Origin": "http://localhost:3000"}, own)
    assert cross_origin("POST", {"Origin": "null"}, own)
    assert cross_origin("POST", {"Sec-Fetch-Site": "cross-site"}, own)
    assert cross_origin("POST", {"Sec-Fetch-Site": "same-site"}, own)
    assert not cross_origin("POST", {"Origin": "http://127.0.0.1:8089"}, own)
    assert not cross_origin("POST", {"Sec-Fetch-Site": "same-origin"}, own)
    assert not cross_origin("POST", {}, own)  # curl: no browser, no ambient credentials
    assert not cross_origin("GET", {"Origin": "http://evil.example"}, own)  # reads change nothing
    behind = {"Origin": "https://locust.example.com", "X-Forwarded-Host": "locust.example.com",
              "X-Forwarded-Proto": "https"}
    assert not cross_origin("POST", behind, "http://10.0.0.5:8089/")


def test_the_exposure_line_and_the_key_notes(monkeypatch) -> None:
    monkeypatch.setenv("GUARD_TEST_KEY", "sk-guard-test-0123456789")
    opts = Namespace(llm_api_key_env="GUARD_TEST_KEY", llm_api_key_hosts="http://127.0.0.1:8000")
    config = RunConfig.from_options(opts, [VLLMUser])
    assert exposure_line({"web_host": "", "web_port": 8089, "web_login": False}, config) == (
        "the web UI listens on all interfaces:8089 without --web-login and an API key (GUARD_TEST_KEY) is loaded: "
        "whoever reaches it can start runs that use the key; add --web-host 127.0.0.1 (or --web-login)")
    assert exposure_line({"web_host": "127.0.0.1", "web_port": 8089, "web_login": False}, config) is None
    assert exposure_line({"web_host": "0.0.0.0", "web_port": 8089, "web_login": True}, config) is None
    keyless = RunConfig.from_options(Namespace(llm_api_key_hosts="http://127.0.0.1:8000"), [VLLMUser])
    assert exposure_line({"web_host": "", "web_port": 8089, "web_login": False}, keyless) is None
    assert key_notes(config, "http://127.0.0.1:8000") == []
    assert key_notes(config, "http://127.0.0.1:9") == [
        "the API key (GUARD_TEST_KEY) is not sent to http://127.0.0.1:9: it goes only to the hosts given when "
        "locust started (http://127.0.0.1:8000); to send it there, start locust with --llm-api-key-hosts "
        "http://127.0.0.1:9"]
    assert key_notes(keyless, "http://127.0.0.1:9") == []


def test_a_negative_user_count_is_one_line() -> None:
    assert refused_users("-5") == "the number of users must be 0 or more"
    assert refused_users("0") is None and refused_users("64") is None
    assert refused_users("lots") is None and refused_users(None) is None  # Locust's own message
