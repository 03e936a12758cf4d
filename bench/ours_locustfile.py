"""Our client, as bench/client_overhead.py runs it: locustfiles/vllm.py's VLLMUser, unchanged,
plus the two things every client of the benchmark does alike: a pause after ``BENCH-READY``
(so the harness can read the process's memory with no stream open) and first requests spread
evenly over ``BENCH_SPREAD_S`` seconds.

    BENCH_STREAMS=64 locust -f bench/ours_locustfile.py --host http://127.0.0.1:8000 --headless \\
        -u 64 -r 64 -t 10s --llm-report DIR --llm-max-tokens 128

The model is fixed (``BENCH_MODEL``, default ``sim-model``) so no user asks /v1/models.
"""

from __future__ import annotations

import itertools
import os
import time

import gevent
from locust import events

import exporters
from llm_users import plugin
from llm_users.users import VLLMUser

plugin.register(events)
exporters.register(events)  # the Prometheus /metrics endpoint (docs/prometheus.md)

STREAMS = int(os.environ.get("BENCH_STREAMS", "1"))
SPREAD_S = float(os.environ.get("BENCH_SPREAD_S", "1"))
_numbers = itertools.count()


@events.init.add_listener
def _hold(environment, **_kw) -> None:
    print("BENCH-READY", flush=True)
    time.sleep(float(os.environ.get("BENCH_HOLD_S", "0")))


class VLLM(VLLMUser):
    model = os.environ.get("BENCH_MODEL", "sim-model")

    def on_start(self) -> None:
        super().on_start()
        gevent.sleep(SPREAD_S * (next(_numbers) % STREAMS) / STREAMS)
