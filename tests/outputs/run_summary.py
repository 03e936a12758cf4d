"""A run's summary.json and timeseries rows as report.html and its headline read them."""

from __future__ import annotations


def summary(failures: int = 0, level: str | None = "healthy", **overall: object) -> dict:
    dist = {"p50": 20.0, "p99": 30.0, "p90": 25.0, "p95": 27.0, "p99.9": 31.0, "mean": 21.0, "min": 10.0,
            "max": 40.0, "count": 100}
    ov = {"requests": 100, "successes": 100 - failures, "failures": failures, "excluded_warmup": 4,
          "output_tokens_per_s": 950.0, "requests_per_s": 31.5, "input_tokens": 10000, "output_tokens": 3000,
          "ttft": dist, "ttfb": dist, "itl": dist, "tpot": {**dist, "p50": 3.0, "p99": 3.5}, "e2e": dist,
          "failures_by_category": {"http_500": failures} if failures else {},
          "slo": {"limits_ms": {"ttft": 60.0}, "goodput_rps": 30.0, "share_meeting_all": 0.96}, **overall}
    check = {"message": "client healthy: its own delay stayed small", "saturated": False, "nodes": []}
    if level:
        check["level"] = level
    return {"host": "http://h:1", "overall": ov, "by_name": {"/x": ov}, "self_check": check,
            "window": {"test_start": 1000.0, "test_stop": 1010.0, "measured_s": 9.5},
            "environment": {"options": {"locustfile": "vllm.py"}, "backends_models": [{"backend": "vllm",
                                                                                      "model": "m1"}],
                            "server": {"version": "0.9"}},
            "setup": {"backend": "vllm", "model": None, "load_plan": {"text": "8 users, spawned at 2/s; for 10 s"},
                      "input_tokens": "100", "output_tokens": "30", "max_tokens": 64, "temperature": 0.0,
                      "ignore_eos": True, "slos_ms": {"ttft": 60.0}}}


def rows(failures: int = 0) -> list[dict]:
    return [{"time": 1000 + i, "users": 8, "requests_started": 3, "requests_finished": 3, "failures": failures,
             "output_tokens_per_s": 90, "ttft_p50_ms": 20.0, "ttft_p99_ms": 30.0, "itl_p50_ms": 3.0,
             "itl_p99_ms": 4.0} for i in range(10)]
