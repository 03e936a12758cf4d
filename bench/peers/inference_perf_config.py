"""inference-perf's config for one peer run (printed; YAML is a superset of JSON): completions API
(its random-prompt generator serves no other),
streaming, random prompts of 32 tokens and 200-token outputs (ignore_eos), a concurrent load of
``--streams`` for about ``--duration`` seconds (inference-perf's concurrent stage counts
requests, not seconds: streams x the requests one stream finishes in that time), the local
tokenizer, the per-request lifecycle summary written under ``--out``.

    python bench/peers/inference_perf_config.py --url URL --streams 50 --duration 60 \\
        --tokens 200 --tokenizer DIR --out DIR > config.yml
"""

from __future__ import annotations

import argparse
import json
import math
import sys


def config(url: str, streams: int, duration: float, tokens: int, tokenizer: str, out: str,
           request_s: float = 4.03) -> dict:
    per_stream = max(1, math.ceil(duration / request_s))
    fixed = {"type": "fixed", "min": 32, "max": 32, "mean": 32, "std_dev": 0}
    return {
        "api": {"type": "completion", "streaming": True},  # its random prompts come for completions only
        "data": {"type": "random", "input_distribution": fixed,
                 "output_distribution": {**fixed, "min": tokens, "max": tokens, "mean": tokens}},
        "load": {"type": "concurrent", "stages": [{"num_requests": streams * per_stream, "concurrency_level": streams}]},
        "server": {"type": "vllm", "model_name": "sim-model", "base_url": url, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": tokenizer},
        "report": {"request_lifecycle": {"summary": True, "per_stage": True, "per_request": False}},
        "storage": {"local_storage": {"path": out}},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--streams", type=int, required=True)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--request-s", type=float, default=4.03, help="one request's length (TTFT + 199 ITL)")
    a = ap.parse_args(argv)
    print(json.dumps(config(a.url, a.streams, a.duration, a.tokens, a.tokenizer, a.out, a.request_s), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
