"""locustfiles/vllm.py plus a memory probe in the master: where its RSS is, by allocator.

    .venv/bin/python bench/soak.py --locustfile bench/soak_probe_locustfile.py --out DIR
    .venv/bin/python bench/soak_probe.py DIR/probe --warmup 15m

Every ``SOAK_PROBE_EVERY`` seconds (default 120) a master (or a local run's one process)
appends one JSON line to ``<dir>/<run>-<pid>.jsonl``, where ``<run>`` is the name of the run's
``--llm-report`` directory (``closed``, ``open`` in a soak) and ``<dir>`` is ``SOAK_PROBE_DIR``,
else ``probe/`` beside that report directory (``DIR/probe`` for ``bench/soak.py --out DIR``):
VmRSS, RssAnon, RssFile, smaps Rss by kind of mapping, pymalloc's arenas and live bytes, glibc's
``mallinfo2`` (bench/lib/allocator.py). A sample takes about 10 ms of the loop (smaps and the
pymalloc report), so it is for soaks, not for latency figures; workers are not probed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import gevent
import orjson
from locust import events
from locust.runners import LocalRunner, MasterRunner

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import exporters  # noqa: E402
from bench.lib import allocator  # noqa: E402
from llm_users import plugin  # noqa: E402
from llm_users.users import VLLMUser  # noqa: E402

plugin.register(events)
exporters.register(events)

EVERY_S = float(os.environ.get("SOAK_PROBE_EVERY", "120"))


def _probe(path: Path) -> None:
    t0 = time.monotonic()
    while True:
        row = {"t": round(time.monotonic() - t0, 1), **allocator.sample()}
        with path.open("ab") as f:
            f.write(orjson.dumps(row) + b"\n")
        gevent.sleep(EVERY_S)


@events.init.add_listener
def _start_probe(environment, **_kw) -> None:
    if not isinstance(environment.runner, (MasterRunner, LocalRunner)):
        return
    report = getattr(environment.parsed_options, "llm_report", None)
    report_dir = Path(report) if report else Path.cwd() / "run"
    out = Path(os.environ.get("SOAK_PROBE_DIR") or report_dir.parent / "probe")
    out.mkdir(parents=True, exist_ok=True)
    gevent.spawn(_probe, out / f"{report_dir.name}-{os.getpid()}.jsonl")


class VLLM(VLLMUser):
    pass
