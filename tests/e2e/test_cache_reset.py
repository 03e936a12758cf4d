"""Issue 29 item 6 in real locust processes against the simulator: the prefix cache is reset at
the start and before every stage after the first (closed-loop steps, open-loop stages), by the
route the server answers (vLLM's, else SGLang's); the server counts exactly 1 + the number of
stage boundaries; summary.json and the console say which; ``--llm-reset-cache off`` sends none."""

from __future__ import annotations

import pytest

from tests.helpers import get_json, read_summary, run_locust


@pytest.mark.parametrize(("routes", "args", "stages", "want"), [
    ("vllm,sglang", ("--llm-steps", "1:3:1:2s"), 3, ("vllm /reset_prefix_cache", "/reset_prefix_cache")),
    ("sglang", ("--llm-stages", "20:2s,40:2s", "--llm-arrival", "constant"), 2, ("sglang /flush_cache", "/flush_cache")),
    ("vllm,sglang", ("--llm-steps", "1:2:1:2s", "--llm-reset-cache", "off"), 2, None),
])
def test_reset_between_stages(sim_factory, tmp_path, routes, args, stages, want) -> None:
    sim = sim_factory("--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "8", "--cache-reset-routes", routes)
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--host", sim.url, "--llm-prometheus-port", "0", "--stop-timeout", "5", *args,
                      report=report, timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = read_summary(report)
    assert len(s["stages"]) == stages
    calls = get_json(sim.url + "/_sim/stats")["cache_resets"]
    if want is None:
        assert calls == {} and s["cache_reset"] == {"method": None, "off": True, "count": 0}
        assert "Prefix cache" not in proc.stdout
        return
    method, path = want
    assert calls == {path: 1 + (stages - 1)}  # the start's, then one per stage boundary
    assert s["cache_reset"] == {"method": method, "count": stages - 1, "failed": 0, "at_start": True}
    assert f"Prefix cache: reset by POST {path}" in proc.stdout and f"{stages - 1} times" in proc.stdout
