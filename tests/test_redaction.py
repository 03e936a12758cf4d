"""redaction.py: secrets are known by what they are, not by substrings of option names."""

from __future__ import annotations

from argparse import Namespace
from types import SimpleNamespace

from llm_users.redaction import Redactor, redact_config, secrets_in_args

KEY = "sk-canary-0123456789"


def test_keys_inside_nested_argument_strings_and_headers() -> None:
    assert secrets_in_args(f"--ttft-ms 5 --require-api-key {KEY} --seed 1") == {KEY}
    assert secrets_in_args(f"--api-key={KEY}") == {KEY}
    assert secrets_in_args(f"--header 'Authorization: Bearer {KEY}'") == {KEY}
    assert secrets_in_args("--max-tokens 64 --output-tokens 5 --api-key-env OPENAI_API_KEY") == set()


def test_config_keeps_every_setting_and_masks_the_secret_values(monkeypatch) -> None:
    monkeypatch.setenv("MY_KEY_VAR", "env-key-abcdef")
    opts = Namespace(llm_max_tokens=64, llm_api_key_env="MY_KEY_VAR", llm_sim_args=f"--require-api-key {KEY}",
                     llm_model="m", llm_note="uses env-key-abcdef", api_key="SECRET")
    r = Redactor.for_run(opts, [SimpleNamespace(api_key_env="MY_KEY_VAR")])
    cfg = r.config(opts)
    assert cfg["llm_max_tokens"] == 64 and cfg["llm_api_key_env"] == "MY_KEY_VAR"  # not dropped for "token"/"key"
    assert cfg["llm_sim_args"] == "--require-api-key ***" and cfg["llm_note"] == "uses ***"
    assert "api_key" not in cfg  # an option that is itself a key
    assert r.text(f"llm-sim --require-api-key {KEY}") == "llm-sim --require-api-key ***"
    assert r.scrub({"a": [f"x {KEY} y"], "b": {"c": "env-key-abcdef"}}) == {"a": ["x *** y"], "b": {"c": "***"}}
    assert redact_config(opts)["llm_sim_args"] == "--require-api-key ***"
