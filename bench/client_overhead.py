"""How much does the load generator cost, and how true are its stamps? Three clients, same streams.

The simulator runs pinned to one core (``taskset -c 0``), each client in turn pinned to the
other (``taskset -c 1``). For every step of N concurrent streams (fixed ITL, one token per
chunk, closed loop: a stream sends its next request when the last one ends; first requests
spread evenly over one request's length) the three clients run one after another against the
same simulator:

- ``ours``: a headless Locust process with our VLLMUser (bench/ours_locustfile.py: the
  locustfiles/vllm.py user plus the benchmark's start-up pause and start spread), with
  ``--llm-report``;
- ``fasthttp``: Locust's stock FastHttpUser reading ``resp._response.readline()``
  (bench/fasthttp_locustfile.py);
- ``floor``: a bare gevent client (bench/floor_client.py).

Per client and step: token chunks/s received in the measured window; client CPU milliseconds
per 1,000 chunks (utime+stime from /proc of the client process and its children, window
only); RSS per open stream (VmRSS with the streams open minus VmRSS before any opened, over
N); and the error of the client's stamps against the simulator's ground truth
(``GET /_sim/trace``: the perf_counter_ns taken just before each chunk was written; the same
CLOCK_MONOTONIC as the client's): TTFT error per request (client first-token stamp minus the
simulator's write stamp of that chunk) and ITL error per gap (client gap minus simulator gap),
p50 and p99, in ms. Then each client's sustained capacity: the highest chunks/s whose TTFT
error p99 stays under 5 ms (and under 1 ms).

The CPU comparison with the floor is read at the calm step (the step nearest ``--calm-rate``,
3,000 chunks/s) from ``--calm-pairs`` rounds in which ours and the floor stream at once, N
streams each, on the client core (``calm_pair``): both are read in the same window, so the
host's changes of speed between windows (20-40 % on this project's VMs, the floor's as much
as ours) fall on both alike. The target's ratio is the floor's best sequential round plus
ours' median excess over the floor in the pairs, over that round; the pairs' own ratios and
the sequential rounds' are shown beside it.

The simulator's own chunks/s, pacing and CPU are checked every run; a run where it fell more
than 5 % short of the offered rate is flagged, with the culprit (simulator or client). Run as
root, the simulator and the clients get SCHED_FIFO priority (``--priority``), so other jobs on a
shared machine only get the cores' idle time; a run where the client still waited for its core
(run delay from /proc/PID/schedstat, plus hypervisor steal) more than 2 % of the window is
retried, then flagged.

    .venv/bin/python bench/client_overhead.py            # about 25 minutes (more when runs are retried)
    .venv/bin/python bench/client_overhead.py --quick    # about 2 minutes
    .venv/bin/python bench/client_overhead.py --steps 60,320 --duration 8 --clients ours,floor
    .venv/bin/python bench/client_overhead.py --steps 280 --clients ours --start even,locust,locust-off

``--start`` chooses how the streams start (issue 15): ``even`` (the default above: first requests
spread evenly over one request's length; ``ours`` runs with ``--llm-spawn-spread off`` so that
spread is the only one), ``locust`` (Locust's way: ``-r --spawn-rate`` users at once every
second, with our default ``--llm-spawn-spread on``) and ``locust-off`` (Locust's bursts as they
are: ``--llm-spawn-spread off``). The ``locust`` modes run ``ours`` and ``fasthttp`` (which has
no spread: its first requests go out with each batch); ``floor`` starts evenly only.

Writes bench/results/client_overhead.json and, unless --no-profile, a py-spy profile of our
client at a high rate (bench/results/profile_ours.txt). docs/benchmarks.md explains it all.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The pieces live in bench/overhead/ (one concern a module; bench/overhead/__init__.py lists
# them) and the /proc readers in bench/lib/procfs.py. Their names stay reachable from here, as
# they were when this file held them all (tests/test_bench_summary.py loads it by path).
from bench.lib.procfs import CLK_TCK, core_busy_ms, cpu_ms, preemptions, rss_kb, run_delay_ms  # noqa: E402
from bench.overhead import cli  # noqa: E402
from bench.overhead.analysis import analyse, lag_figures, load_client_records, pct  # noqa: E402
from bench.overhead.cli import TAIL_STEPS, tail_steps  # noqa: E402
from bench.overhead.config import (  # noqa: E402
    BENCH,
    BOUNDS_MS,
    CLIENTS,
    ROOT,
    START_MODES,
    VENV_BIN,
    label,
    offered_rate,
    request_s,
    start_s,
    window_s,
)
from bench.overhead.report import collapse_report, steps_table, summary_text, table  # noqa: E402
from bench.overhead.rules import by_round, capacity, step_rows, summarise, targets  # noqa: E402
from bench.overhead.runs import (  # noqa: E402
    READY,
    calm_pair,
    client_command,
    profile_client,
    run_measured,
    run_one,
    run_together,
    wait_quiet,
)
from bench.overhead.simulator import Simulator, sim_loop  # noqa: E402

__all__ = [
    "BENCH", "BOUNDS_MS", "CLIENTS", "CLK_TCK", "READY", "ROOT", "START_MODES", "TAIL_STEPS", "VENV_BIN",
    "Simulator", "analyse", "by_round", "calm_pair", "capacity", "client_command", "collapse_report",
    "core_busy_ms", "cpu_ms", "label", "lag_figures", "load_client_records", "main", "offered_rate",
    "parse_args", "pct", "preemptions", "profile_client", "request_s", "rss_kb", "run_delay_ms",
    "run_measured", "run_one", "run_together", "sim_loop", "start_s", "step_rows", "steps_table", "summarise",
    "summary_text", "table", "tail_steps", "targets", "wait_quiet", "window_s",
]

DESCRIPTION = __doc__.split("\n\n")[0]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return cli.parse_args(argv, DESCRIPTION)


def main(argv: list[str] | None = None) -> int:
    return cli.main(argv, DESCRIPTION)


if __name__ == "__main__":
    sys.exit(main())
