"""outputs/compare.py: --fail-on rules and the bootstrap verdicts on known data."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from llm_users.outputs.compare import CompareError, Run, parse_rules, verdicts


def _run(values: list[float]) -> Run:
    return Run(Path("x"), "x", {}, values={"ttft": values, "tpot": values, "e2e": values})


def test_rules() -> None:
    base = {"ttft.p50": 100.0, "output_tokens_per_s": 1000.0, "failures": 0}
    other = {"ttft.p50": 111.0, "output_tokens_per_s": 940.0, "failures": 2}
    got = {r.text: r.check(base, other)[0] for r in parse_rules(
        "ttft.p50>+10%, ttft.p50>+12%, ttft.p50>+10ms, ttft.p50>120, output_tokens_per_s<-5%, failures>0")}
    assert got == {"ttft.p50>+10%": True, "ttft.p50>+12%": False, "ttft.p50>+10ms": True, "ttft.p50>120": False,
                   "output_tokens_per_s<-5%": True, "failures>0": True}
    with pytest.raises(CompareError, match="cannot read"):
        parse_rules("ttft.p50 >> 3")
    with pytest.raises(CompareError, match="unknown metric"):
        parse_rules("nope.p50>1")[0].check(base, other)


def test_verdicts_on_known_samples() -> None:
    rng = random.Random(1)
    a = [rng.lognormvariate(4.6, 0.15) for _ in range(600)]
    same = [rng.lognormvariate(4.6, 0.15) for _ in range(600)]
    slower = [x * 1.2 for x in (rng.lognormvariate(4.6, 0.15) for _ in range(600))]
    for v in verdicts(_run(a), _run(same), 300, 0.02):
        assert v.verdict == "no significant difference", v
    by = {v.metric: v.verdict for v in verdicts(_run(a), _run(slower), 300, 0.02)}
    assert by["ttft.p50"] == by["e2e.p50"] == "regressed"
    few = verdicts(_run(a[:100]), _run(slower[:100]), 300, 0.02)
    assert {v.verdict for v in few if v.metric.endswith("p99")} == {"too few requests"}


# --- the configuration diff (compare_config.py) and the refusal -------------------------------------------------

def _summary(users: int = 4, **opts: object) -> dict:
    options = {"num_users": users, "spawn_rate": users, "run_time": 3, "llm_input_tokens": "50",
               "llm_output_tokens": "10", "llm_temperature": 0.5, **opts}
    return {"overall": {"requests": 700, "failures": 0, "ttft": {"p50": 50.0}},
            "environment": {"options": options, "backends_models": [{"backend": "vllm", "model": "m1"}],
                            "server": {"version": "1.0"}},
            "workload": {"source": {"kind": "synthetic", "seed": 0, "input_tokens": "50", "output_tokens": "10"}},
            "config": options}


def test_config_rows_from_options_and_from_a_structured_block() -> None:
    from llm_users.outputs.compare_config import blocking, config_rows, describe, load_plan

    rows = config_rows([_summary(4), _summary(8), _summary(4, llm_temperature=0.0)])
    by = {r.key: r for r in rows}
    assert by["load"].values == ("4 users", "8 users", "4 users") and by["load"].critical
    assert by["sampling"].values == ("temperature=0.5", "temperature=0.5", "temperature=0")
    assert by["model"].values == ("m1",) * 3 and by["input tokens"].values == ("50",) * 3
    assert by["spawn rate"].differs and not by["spawn rate"].critical  # shown, never blocking
    assert blocking(rows, 1) == ["load"] and blocking(rows, 2) == ["sampling"]
    assert describe(rows, 1) == "load: 4 users vs 8 users"
    # the study plans, in words
    assert load_plan(_summary(llm_steps="8:64:8:2s")) == "steps 8:64:8:2s (users)"
    assert load_plan(_summary(llm_sweep="rate", llm_sweep_start=18)) == "sweep rate from 18 (target 0.95, 12 points)"
    assert load_plan(_summary(llm_rate="5", llm_arrival="constant")) == "5 req/s constant"
    # a structured config block (backend, model, load_plan, lengths, slos) wins over the options
    s = _summary(4)
    s["config"] = {"backend": "sglang", "model": "m2", "load_plan": {"users": 4, "spawn_rate": 4},
                   "input_tokens": 128, "output_tokens": 64, "max_tokens": 64, "slos": {"ttft": "500ms"}}
    row = {r.key: r.values[0] for r in config_rows([s])}
    assert row["backend"] == "sglang" and row["model"] == "m2" and row["load"] == "users=4, spawn_rate=4"
    assert (row["input tokens"], row["output tokens"], row["max tokens"]) == ("128", "64", "64")
    assert row["SLOs"] == "ttft=500ms"
    # the setup block (what the run was asked to do) as the runs write it
    s = _summary(8)
    s["setup"] = {"backend": "vllm", "model": None, "client": "raw", "input_tokens": "512", "output_tokens": "128",
                  "load_plan": {"text": "8 users, spawned at 4/s; for 30 s", "kind": "users", "users": 8},
                  "dataset": None, "turns": 3, "max_tokens": 512, "temperature": 0.0, "ignore_eos": True,
                  "slos_ms": {"ttft": 500.0}}
    row = {r.key: r.values[0] for r in config_rows([s])}
    assert row["load"] == "8 users" and row["model"] == "m1"  # null model: the server's (backends_models)
    assert (row["input tokens"], row["output tokens"], row["max tokens"]) == ("512", "128", "512")
    assert row["sampling"] == "temperature=0, ignore_eos=True" and row["SLOs"] == "ttft<=500ms"
    assert row["workload"].endswith("turns=3")
    s["setup"]["load_plan"] = {"text": "steps 4:24:10:2s (users); for 6 s", "kind": "stages"}
    assert load_plan(s) == "steps 4:24:10:2s (users)"
    # only the backend or the server differ: comparable (two servers on the same work)
    other = _summary(4)
    other["environment"]["backends_models"] = [{"backend": "sglang", "model": "m1"}]
    other["environment"]["server"] = {"version": "2.0"}
    rows = config_rows([_summary(4), other])
    assert blocking(rows, 1) == [] and {r.key for r in rows if r.differs} == {"backend", "server"}


def _write_run(path: Path, summary: dict, ttft_ms: float) -> Path:
    import json

    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps(summary))
    rng = random.Random(len(str(path)))
    with (path / "requests.jsonl").open("w") as f:
        for _ in range(700):
            v = int(rng.lognormvariate(0, 0.05) * ttft_ms * 1e6)
            f.write(json.dumps({"status": "ok", "ttft_ns": v, "tpot_ns": v // 10, "e2e_ns": v * 3}) + "\n")
    return path


def test_main_refuses_a_verdict_between_different_loads_unless_allowed(tmp_path, capsys) -> None:
    from llm_users.outputs.compare import main

    base = _write_run(tmp_path / "u4", _summary(4), 50)
    more = _write_run(tmp_path / "u8", _summary(8), 40)  # TTFT 20% lower: "improved" if it were comparable
    same = _write_run(tmp_path / "u4b", _summary(4), 40)
    page = tmp_path / "c.html"
    assert main([str(base), str(more), "--fail-on", "ttft.p50>+10%", "--out", str(page)]) == 3
    out, err = capsys.readouterr()
    assert out.index("configuration") < out.index("metric")  # the diff first
    assert "! load           4 users" in out and "NOT COMPARABLE: u8 was not configured as u4" in out
    assert "improved" not in out and out.count("not comparable") >= 3
    assert "llm-compare: not comparable with the baseline's configuration: u8 (differs in load)" in err
    html = page.read_text()
    assert "Not comparable: u8 was not configured as u4" in html and "<td>not comparable</td>" in html
    assert "not evaluated for u8" in html and html.index("Configuration") < html.index("Every metric")
    # --allow-config-diff: the verdicts, under a warning
    assert main([str(base), str(more), "--allow-config-diff", "--out", str(page)]) == 0
    out, _ = capsys.readouterr()
    assert "WARNING: u8 was not configured as u4 (load: 4 users vs 8 users)" in out
    assert re.search(r"ttft\.p50\s+-\d.*improved", out)
    assert "Warning: u8 was not configured as u4" in page.read_text()
    # the same configuration: verdicts as before, no warning
    assert main([str(base), str(same), "--fail-on", "ttft.p50>+10%"]) == 0
    out, _ = capsys.readouterr()
    assert "NOT COMPARABLE" not in out and "WARNING" not in out and "\n! " not in out
    assert re.search(r"ttft\.p50\s+-\d.*improved", out) and "every --fail-on rule passed (1)" in out
