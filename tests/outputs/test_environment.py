"""outputs/environment.py: secrets never reach the environment block."""

from __future__ import annotations

from llm_users.outputs.environment import MASK, command_line, scrub


def test_command_line_masks_secret_flags_only() -> None:
    argv = ["locust", "--api-key", "sk-1", "--llm-api-key-env", "OPENAI_API_KEY", "--token=abc",
            "--llm-output-tokens", "64", "--llm-sim-args", "--ttft-ms 5 --output-tokens 5", "--llm-max-tokens", "9"]
    assert command_line(argv) == ["locust", "--api-key", MASK, "--llm-api-key-env", "OPENAI_API_KEY",
                                  f"--token={MASK}", "--llm-output-tokens", "64", "--llm-sim-args",
                                  "--ttft-ms 5 --output-tokens 5", "--llm-max-tokens", "9"]


def test_scrub_masks_secret_environment_values(monkeypatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-very-secret")
    out = scrub({"a": ["x tok-very-secret y"], "b": {"c": "tok-very-secret"}})
    assert out == {"a": [f"x {MASK} y"], "b": {"c": MASK}}


def test_the_platform_is_platform_platform_without_a_child_process(monkeypatch) -> None:
    """summary.json's client platform reads as ``platform.platform()`` does, but its processor
    field (``uname -p`` in a child process: 0.3-2 s at each run's end) is never asked."""
    import platform
    import subprocess

    from llm_users.outputs.environment import os_platform

    expected = platform.platform()

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("a child process")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(platform, "_uname_cache", None, raising=False)
    assert os_platform() == expected
