"""Issue 53: what a user reads on the first command is what ran.

- An empty ``--host`` (``--host "$SERVER"`` with the variable unset, ``LOCUST_HOST=``) is refused
  in one line; before, it started the embedded simulator and measured that as "no --host given".
- A run without ``--llm-report`` does not say its interrupted requests are "kept in requests.jsonl".
"""

from __future__ import annotations

import pytest

from tests.helpers import run_locust

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("how", ["--host", "LOCUST_HOST"])
def test_an_empty_host_is_refused_not_replaced_by_the_simulator(how: str) -> None:
    args, env = (["--host", ""], None) if how == "--host" else ([], {"LOCUST_HOST": ""})
    proc = run_locust("vllm.py", *args, "-u", "1", "-t", "30s", "--llm-prometheus-port", "0", env=env, timeout=60)
    out = proc.stdout + proc.stderr
    lines = [ln for ln in out.splitlines() if ln.startswith("locust-llm:")]
    assert proc.returncode == 1, out[-2000:]
    assert lines == ["locust-llm: --host is empty (given without a value, or LOCUST_HOST set to nothing): give the "
                     "server's URL, e.g. --host http://localhost:8000, or leave --host out to run against the "
                     "embedded simulator"], out[-2000:]
    assert "started the embedded simulator" not in out and "Traceback" not in out


def test_without_a_report_no_line_names_requests_jsonl() -> None:
    # the simulator's default 512-token answers outlast a 2 s run: every request is interrupted
    proc = run_locust("vllm.py", "-u", "2", "-r", "2", "-t", "2s", "--llm-prometheus-port", "0", timeout=60)
    out = proc.stdout + proc.stderr
    assert "interrupted: 2 requests were in flight when the run stopped" in out, out[-2000:]
    assert "requests.jsonl" not in out
