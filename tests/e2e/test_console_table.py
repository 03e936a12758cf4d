"""console_table.py in a real headless run: Locust's table every 2 s, whole and in order."""

from __future__ import annotations

import pytest

from tests.helpers import read_records, run_locust

pytestmark = pytest.mark.slow


def test_the_periodic_table_prints_whole_in_a_real_run(sim_factory, tmp_path) -> None:
    sim = sim_factory("--ttft-ms", "20", "--itl-ms", "5", "--output-tokens", "20")
    report = tmp_path / "r"
    proc = run_locust("vllm.py", "--host", sim.url, "-u", "4", "-r", "4", "-t", "5s", report=report,
                      only_summary=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    heads = [i for i, ln in enumerate(lines) if ln.startswith("Type ") and "# reqs" in ln]
    assert len(heads) >= 3, proc.stderr[-3000:]  # at 0, 2 and 4 s, and the final one at exit
    for i in heads:  # each table whole, up to its blank line: nothing printed into its middle
        end = lines.index("", i)
        block = lines[i:end]
        assert block[1].startswith("--------|") and block[-2].startswith("--------|"), block
        assert block[-1].strip().startswith("Aggregated"), block
        assert all(row.startswith("POST ") for row in block[2:-2]), block
    done = [ln for ln in lines[heads[-2]:heads[-1]] if "Aggregated" in ln]
    assert done and int(done[-1].split()[1]) > 0  # a periodic table counted requests
    statuses = {r["status"] for r in read_records(report)}
    assert "ok" in statuses and statuses <= {"ok", "interrupted"}, statuses  # in flight at -t: interrupted
