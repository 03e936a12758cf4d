"""Issue 9 item 8: the fixed sampling is checked against what the server reports. A server that
ignores the max-token field, one that stops short although ignore_eos was sent, and one that
answers with another model are each counted and said once, with a hint."""

from __future__ import annotations

import pytest

from tests.helpers import read_summary, run_locust

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("sim_args", "issues", "client"),
    [
        # ignores max_tokens (answers 30 for a max of 20) and reports its own model
        (["--ignore-max-tokens", "30", "--answer-model", "other-model"], {"over_max_tokens", "model_mismatch"}, "raw"),
        (["--ignore-max-tokens", "30", "--answer-model", "other-model"], {"over_max_tokens", "model_mismatch"}, "sdk"),
        # honours max_tokens but stops at 10 although ignore_eos was sent
        (["--output-tokens", "10"], {"short_under_ignore_eos"}, "raw"),
        # honours everything: nothing to say
        ([], set(), "raw"),
    ],
)
def test_ignored_sampling_is_reported(sim_args: list[str], issues: set[str], client: str, sim_factory,
                                      tmp_path) -> None:
    sim = sim_factory("--ttft-ms", "5", "--itl-ms", "1", *sim_args)
    proc = run_locust("vllm.py", "--host", sim.url, "-u", "2", "-r", "2", "-t", "2s", "--llm-model", "sim-model",
                      "--llm-max-tokens", "20", "--llm-client", client, report=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ov = read_summary(tmp_path)["overall"]
    assert set(ov["sampling_issues"]) == issues, ov["sampling_issues"]
    for kind in issues:
        assert ov["sampling_issues"][kind]["requests"] == ov["successes"] > 0
        assert ov["sampling_issues"][kind]["hint"]
        assert proc.stdout.count(f"sampling not honoured ({kind})") == 1, proc.stdout[-2000:]
    if "over_max_tokens" in issues:
        assert "use the vLLM user (max_tokens)" in proc.stdout
    if not issues:
        assert "sampling not honoured" not in proc.stdout
