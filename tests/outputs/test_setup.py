"""outputs/setup.py: summary.json's ``setup`` block and the plan in words (issue 28)."""

from __future__ import annotations

from argparse import Namespace

from llm_users.load.registry import describe, parse_options
from llm_users.options import RunConfig
from llm_users.outputs.setup import setup_block
from llm_users.users import VLLMUser


def test_a_plain_run_says_users_and_spawn_rate() -> None:
    assert describe(parse_options(Namespace())) == {}
    options = Namespace(num_users=8, spawn_rate=2.0, run_time=30, llm_slo="ttft=500ms,tpot=50ms",
                        llm_input_tokens="512", llm_output_tokens="128:256", llm_max_tokens="300")
    config = RunConfig.from_options(options, [VLLMUser])
    s = setup_block(config, vars(options))
    assert s["load_plan"]["text"] == "8 users, spawned at 2/s; for 30 s"
    assert s["load_plan"]["kind"] == "users" and s["load_plan"]["users"] == 8
    assert (s["backend"], s["input_tokens"], s["output_tokens"], s["max_tokens"]) == ("vllm", "512", "128:256", 300)
    assert s["slos_ms"] == {"ttft": 500.0, "tpot": 50.0} and s["dataset"] is None
    steps = setup_block(RunConfig.from_options(Namespace(llm_steps="2:6:2:3s", run_time=9), [VLLMUser]), {})
    assert steps["load_plan"]["profiles"]["stages"]["plan"][0] == {"load": 2.0, "duration_s": 3.0}
    assert steps["load_plan"]["text"] == "3 stages of 3 s: 2 to 6 users, step 2; for 9 s"
