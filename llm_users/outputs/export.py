"""``--llm-export vllm-bench FILE``: the run as the result JSON ``vllm bench serve --save-result``
writes (vLLM ``benchmarks/serve.py``), so dashboards that read those files read our runs.

Keys are vLLM's; values are ours, over the same measured requests as summary.json:

- ``duration`` = measured window (s); ``completed``/``failed`` = successes/failures;
  ``total_input_tokens``/``total_output_tokens`` = the server's counts;
- ``request_throughput`` = completed / duration (vLLM counts completed requests);
  ``output_throughput`` = our output tokens/s; ``total_token_throughput`` = (input + output) / duration;
  ``request_goodput`` = our goodput (None without ``--llm-slo``, as vLLM without ``--goodput``);
- ``max_concurrency`` = the most users that ran in the measured window (summary.json
  ``window.users.max``: a run that never reached ``-u`` says what it reached; the users asked
  where a summary has no such figure, a load profile's);
- ``max_output_tokens_per_s`` and ``max_concurrent_requests`` = the per-second timeline's peaks
  (output tokens/s, active users);
- per metric ``ttft``, ``tpot``, ``itl``, ``e2el`` (our E2E): ``mean_*_ms``, ``median_*_ms`` (our p50),
  ``std_*_ms`` (from the HDR histogram), ``p90/p95/p99/p99.9_*_ms`` (vLLM's names for those
  ``--metric-percentiles``). Our ITL is vLLM's ITL and our TPOT is vLLM's TPOT (docs/metrics.md).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

from llm_users.errors import ConfigError
from llm_users.outputs.atomic import write_atomic
from llm_users.outputs.final import FinalData
from llm_users.protocols.backend import find_backend

FORMATS = ("vllm-bench",)
_METRICS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}
_PCTS = {"p90": "p90", "p95": "p95", "p99": "p99", "p99.9": "p99.9"}


def _bench_backend(name: str | None) -> str | None:
    """Our backend -> vLLM bench's --backend name (the descriptor's ``bench_name``, else ours)."""
    b = find_backend(name)
    return (b.bench_name or b.name) if b is not None else name


def add_arguments(opt: Any) -> None:
    opt("--llm-export", "also write the result in another tool's format: vllm-bench FILE", nargs=2,
        metavar=("FORMAT", "FILE"))


def parse(value: Any) -> tuple[str, str] | None:
    if not value:
        return None
    if isinstance(value, str):
        value = value.split()
    if len(value) != 2 or value[0] not in FORMATS:
        raise ConfigError(f"--llm-export: give FORMAT FILE with FORMAT one of {', '.join(FORMATS)}, got {value!r}")
    return value[0], value[1]


def vllm_bench(summary: dict[str, Any], stats: Any, rows: list[dict[str, Any]], users: int | None) -> dict[str, Any]:
    ov = summary["overall"]
    dur = (summary.get("window") or {}).get("measured_s") or ov.get("duration_s") or 0.0
    completed = ov["successes"]
    env = summary.get("environment") or {}
    server = env.get("server") or {}
    backends = env.get("backends_models") or []
    backend = backends[0]["backend"] if backends else None
    model = server.get("model_id") or (backends[0]["model"] if backends else None)
    peak_tok = max((r.get("output_tokens_per_s") or 0 for r in rows), default=None)
    peak_users = max((r.get("users") or 0 for r in rows), default=None)
    slo = ov.get("slo")
    measured = ((summary.get("window") or {}).get("users") or {}).get("max")  # issue 53 item 1
    out: dict[str, Any] = {
        "date": time.strftime("%Y%m%d-%H%M%S", time.localtime((summary.get("window") or {}).get("test_start")
                                                                or time.time())),
        "backend": _bench_backend(backend),
        "label": "locust-llm",
        "model_id": model,
        "tokenizer_id": None,
        "num_prompts": ov["requests"],
        "request_rate": "inf",  # closed loop: users send back to back
        "burstiness": 1.0,
        "max_concurrency": measured if measured is not None else users if users is not None else peak_users,
        "duration": dur,
        "completed": completed,
        "failed": ov["failures"],
        "total_input_tokens": ov["input_tokens"],
        "total_output_tokens": ov["output_tokens"],
        "request_throughput": completed / dur if dur else None,
        "request_goodput": slo.get("goodput_rps") if slo else None,
        "output_throughput": ov["output_tokens_per_s"],
        "total_token_throughput": (ov["input_tokens"] + ov["output_tokens"]) / dur if dur else None,
        "max_output_tokens_per_s": peak_tok,
        "max_concurrent_requests": peak_users,
    }
    for theirs, ours in _METRICS.items():
        s = ov[ours]
        out[f"mean_{theirs}_ms"] = s["mean"]
        out[f"median_{theirs}_ms"] = s["p50"]
        dist = stats.total.dists[ours] if stats is not None else None
        out[f"std_{theirs}_ms"] = dist.hist.get_stddev() / 1000 if dist is not None and dist.count else None
        for word, key in _PCTS.items():
            out[f"{word}_{theirs}_ms"] = s[key]
    return out




class VllmBenchExport:
    """The ``vllm_bench`` output: with ``--llm-export vllm-bench FILE``, the final summary in
    vLLM bench's shape, written once at the stop (master or local runner). It reads what the
    run was asked from the summary's ``config`` block (the run's options as recorded)."""

    name = "vllm_bench"

    def write(self, final: FinalData, directory: str | None) -> None:
        config = final.summary.get("config") or {}
        spec = parse(config.get("llm_export"))
        if spec is None:
            return
        _, path = spec
        # num_users as the summary's config block has it at the stop: the Edit form may have changed it
        data = vllm_bench(final.summary, final.stats, final.timeline_rows, config.get("num_users"))
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, orjson.dumps(data, option=orjson.OPT_INDENT_2))
        print(f"locust-llm: vLLM bench result written to {path}", flush=True)


VLLM_BENCH = VllmBenchExport()
