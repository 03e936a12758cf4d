"""Issue 53 item 10, in real headless runs against the embedded simulator: the console's lines
say what ran.

- Locust's final table and the LLM summary print two request counts; the summary says in one
  line why they differ (warm-up, cool-down and cancelled requests are in Locust's, not in these
  statistics), and its numbers add up to the total Locust itself saved (``--json-file``).
- ``--llm-trace FILE``: the open-loop line names the trace (its rows and speed-up), not an
  arrival law and seed that decided nothing, and no row is dropped as warm-up unless asked.

Each run is one scenario of the module's pool (tests/e2e/locust_pool.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.locust_pool import Pool, Scenario, pool_in
from tests.helpers import locust_request_count, read_summary

pytestmark = pytest.mark.slow

COMMON = ("--llm-prometheus-port", "0")
#: A Mooncake-shaped trace: 12 rows, 100 ms apart, a few tokens each (all answered well inside -t).
ROWS = [{"timestamp": 100 * i, "input_length": 20 + i, "output_length": 3 + i % 4, "hash_ids": [i]} for i in range(12)]


def _scenarios(base: Path) -> dict[str, Scenario]:
    trace = base / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return {
        # each user's first request is warm-up (the default): in Locust's table, not in ours
        "counts": Scenario("vllm.py", ("-u", "4", "-r", "4", "-t", "4s", "--llm-output-tokens", "8",
                                       "--json-file", str(base / "counts-locust"), *COMMON), timeout=90),
        # no --llm-warmup: a trace replay measures every row
        "trace": Scenario("vllm.py", ("-t", "4s", "--llm-trace", str(trace), "--json-file",
                                      str(base / "trace-locust"), *COMMON), timeout=90),
    }


def _needs(item: Any) -> list[str]:
    return {
        "test_the_summary_says_why_locusts_count_differs_and_the_numbers_add_up": ["counts"],
        "test_a_trace_replay_names_the_trace_and_measures_every_row": ["trace"],
    }[item.originalname]


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    base = tmp_path_factory.mktemp("console-counts")
    yield from pool_in(request, base, _scenarios(base), _needs, parallel=2)


def test_the_summary_says_why_locusts_count_differs_and_the_numbers_add_up(runs) -> None:
    run = runs.run("counts")
    assert run.proc.returncode == 0, run.tail()
    ov = read_summary(run.report)["overall"]
    assert ov["excluded_warmup"] == 4, ov  # 4 users, each one's first request
    lines = [ln for ln in run.proc.stdout.splitlines() if ln.startswith("requests: ")]
    assert len(lines) == 1, run.tail()
    m = re.match(r"requests: (\d+) measured here; Locust's table counts (\d+) = (\d+) \+ (\d+) warm-up \(", lines[0])
    assert m, lines[0]
    measured, total, first, warmup = map(int, m.groups())
    assert measured == first == ov["requests"] and warmup == ov["excluded_warmup"]
    assert total == measured + warmup == locust_request_count(run.report.parent.parent / "counts-locust"), lines[0]
    interrupted = ov.get("interrupted") or 0  # in flight at -t: in neither count, and said so
    assert lines[0].endswith(f"; the {interrupted} interrupted are in neither") == bool(interrupted), lines[0]


def test_a_trace_replay_names_the_trace_and_measures_every_row(runs) -> None:
    run = runs.run("trace")
    assert run.proc.returncode == 0, run.tail()
    summary = read_summary(run.report)
    ov, window = summary["overall"], summary["window"]
    assert (ov["requests"], ov["excluded_warmup"], ov["failures"]) == (len(ROWS), 0, 0), ov  # every row measured
    assert window["warmup"]["requests_per_user"] == 0
    assert locust_request_count(run.report.parent.parent / "trace-locust") == len(ROWS)  # the counts agree: no line
    out = run.proc.stdout
    assert not any(ln.startswith("requests: ") for ln in out.splitlines()), run.tail()
    path = summary["arrivals"]["trace"]
    loop = [ln for ln in out.splitlines() if ln.startswith("open loop (")]
    assert len(loop) == 1, run.tail()
    assert loop[0].startswith(f"open loop (trace replay of {path}'s {len(ROWS)} rows at speed-up 1): target the "
                              "trace's schedule, achieved "), loop[0]
    assert "seed" not in loop[0] and summary["arrivals"]["arrival"] not in loop[0]
    assert (f"measured window: {window['measured_s']:.1f} s; warm-up excluded: 0 requests (none: a trace replay "
            "measures every row it sends; --llm-warmup N excludes each user's first N)") in out, run.tail()
