"""Workers that make records without HTTP: the master's merge at scale, fed through Locust's
real master protocol (bench/master_scale.py, tests/e2e/test_master_scale.py).

    locust -f bench/fabricated_locustfile.py --master --expect-workers 8 --headless -u 32 -r 32 -t 5s \\
        --host http://127.0.0.1:9 --llm-preflight off --llm-report DIR
    locust -f bench/fabricated_locustfile.py --worker --master-host 127.0.0.1      # 8 of these

Each user stands for streams that end a record every ``1 / FAB_RATE`` seconds (environment,
default 5 records/s per user): a finished 512-gap streaming request (``FAB_GAPS``), TTFT and ITL
drawn from lognormal pools (around 180 ms and 20 ms, a 60-200 ms stall now and then) as a vLLM
stream under load gives, fired as ``llm_response`` exactly as a real user's record is. From
there on everything is the product's own path: the worker's run classifies it, its Shipper
ships it every two seconds in the real wire form over Locust's zmq rpc, the master's
``Collector.receive`` merges it and writes requests.jsonl. No server is contacted (the
``--host`` only satisfies distributed mode's check; ``--llm-preflight off``).
"""

from __future__ import annotations

import itertools
import math
import os
import random
import time

from locust import User, constant_pacing, events, task

from llm_users import plugin
from llm_users.metrics import RequestRecord

plugin.register(events)

RATE = float(os.environ.get("FAB_RATE", "5"))
GAPS = int(os.environ.get("FAB_GAPS", "512"))

_rng = random.Random(os.getpid())
_POOL = 65_536
_ITL = [int(_rng.lognormvariate(math.log(20e6), 0.15)) for _ in range(_POOL)]
for _k in range(0, _POOL, 200):
    _ITL[_k] = _rng.randint(60_000_000, 200_000_000)  # the odd stall: a batch refill, a preemption
_TTFT = [int(_rng.lognormvariate(math.log(180e6), 0.35)) for _ in range(4096)]
_numbers = itertools.count()


def fabricate(name: str = "/v1/chat/completions", gaps: int = GAPS) -> RequestRecord:
    """One finished streaming request that ends now (its gaps a slice of the pool: C speed)."""
    n = next(_numbers)
    o = _rng.randrange(_POOL - gaps)
    itl = _ITL[o:o + gaps]
    ttft = _TTFT[n % len(_TTFT)]
    e2e = ttft + sum(itl) + 300_000
    rec = RequestRecord(request_id=f"{os.getpid()}-{n}", name=name, backend="vllm", model="fabricated",
                        start_time=time.time() - e2e / 1e9)
    rec.t0_ns = time.perf_counter_ns() - e2e
    rec.ttfb_ns, rec.ttft_ns, rec.itl_ns, rec.e2e_ns = ttft - 200_000, ttft, itl, e2e
    rec.chunks = gaps + 1
    rec.input_tokens, rec.output_tokens = 200 + n % 800, gaps + 1
    rec.tokens_source = rec.input_tokens_source = "usage"
    rec.finish_reason, rec.http_status, rec.response_bytes = "length", 200, 180 * (gaps + 1)
    rec.target_output_tokens = gaps + 1
    return rec


@events.init.add_listener
def _profile_master(environment: object, runner: object = None, **_: object) -> None:
    """``FAB_PROFILE=FILE``: the master's cProfile, written to FILE when it quits."""
    from locust.runners import MasterRunner

    path = os.environ.get("FAB_PROFILE")
    if path and isinstance(runner, MasterRunner):
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
        events.quitting.add_listener(lambda **_: (prof.disable(), prof.dump_stats(path)))


class Fabricated(User):
    """Ends one fabricated record every 1 / FAB_RATE seconds."""

    wait_time = constant_pacing(1.0 / RATE)

    @task
    def record(self) -> None:
        self.environment.events.llm_response.fire(record=fabricate(), user=self)
