"""outputs/compare_html.py: llm-compare's page: the configuration diff first (red where it blocks
the verdicts, under a warning with --allow-config-diff), the verdicts of each run against the
baseline, the --fail-on line, every metric, and the overlays drawn only where the runs have data."""

from __future__ import annotations

import re
from pathlib import Path

from llm_users.outputs.compare_config import ConfigRow
from llm_users.outputs.compare_html import config_section, pareto_overlay, render, turn_overlay, write_page
from llm_users.outputs.compare_stats import Run, Verdict, parse_rules


def _run(label: str, ms: list[float], **summary) -> Run:
    return Run(Path(f"/runs/{label}"), label, summary, values={"ttft": ms, "tpot": [], "e2e": ms},
               metrics={"ttft.p50": ms[len(ms) // 2], "failures": 0})


BASE, NEW = _run("base", [10.0, 11.0, 12.0]), _run("new", [13.0, 14.0, 15.0])
VERDICTS = [Verdict("ttft.p50", 3.0, 1.5, 4.5, 0.27, "regressed"), Verdict("e2e.p50", -1.0, -3.0, 1.0, None,
                                                                               "no significant difference")]
ROWS = [ConfigRow("users", ("4", "8"), critical=True), ConfigRow("host", ("a", "b"), critical=False),
        ConfigRow("model", ("m", "m"), critical=True)]


def test_the_verdicts_table_and_every_metric() -> None:
    page = render([BASE, NEW], [VERDICTS], [], [])
    assert page.startswith("<!doctype html>") and "<script" not in page
    assert "Baseline: <b>/runs/base</b>; compared: <b>/runs/new</b>" in page
    assert ("<tr class='regressed'><td>ttft.p50</td><td>+3.000</td><td>+27.0%</td><td>[+1.500, +4.500]</td>"
            "<td>regressed</td></tr>") in page
    assert "<tr><td>e2e.p50</td><td>-1.000</td><td>-</td><td>[-3.000, +1.000]</td>" in page  # no rel: a dash
    assert "<h2>new vs base: verdicts</h2>" in page and "<h2>Every metric</h2>" in page
    assert "--fail-on" not in page  # no rules, no line
    assert page.count("<svg") == 2  # the TTFT and E2E CDFs: TPOT has no values, no turns, no stages


def test_the_fail_on_line() -> None:
    rules = parse_rules("ttft.p50>+10%")
    ok = render([BASE, NEW], [VERDICTS], [], rules)
    assert "<p class='ok'><b>--fail-on:</b> every rule passed (ttft.p50&gt;+10%)</p>" in ok
    bad = render([BASE, NEW], [VERDICTS], ["ttft.p50 +40.0% (rule ttft.p50>+10%)"], rules)
    assert "<p class='bad'><b>--fail-on:</b> ttft.p50 +40.0% (rule ttft.p50&gt;+10%)</p>" in bad


def test_a_blocking_difference_is_red_and_withholds_the_rules() -> None:
    section = config_section([BASE, NEW], ROWS, allow=False)
    assert section.index("<h2>Configuration</h2>") == 0
    assert "<b>Not comparable: new was not configured as base</b> (users: 4 vs 8): no verdict is given" in section
    assert "<tr class='blocking'><td>users</td>" in section and "<tr class='differs'><td>host</td>" in section
    assert "<tr><td>model</td><td>m</td><td>m</td></tr>" in section
    allowed = config_section([BASE, NEW], ROWS, allow=True)
    assert "<b>Warning: new was not configured as base</b> (users: 4 vs 8): the verdicts are given" in allowed
    page = render([BASE, NEW], [VERDICTS], [], parse_rules("ttft.p50>+10%"), ROWS)
    assert page.index("Configuration") < page.index("verdicts") < page.index("Every metric")
    assert "<b>--fail-on:</b> not evaluated for new (not comparable)</p>" in page
    comparable = [ConfigRow("users", ("4", "4"), critical=True)]
    assert "Not comparable" not in config_section([BASE, NEW], comparable, allow=False)


def test_turn_and_stage_overlays_only_where_the_runs_have_them() -> None:
    assert turn_overlay([BASE, NEW]) is None and pareto_overlay([BASE, NEW]) is None
    turns = _run("t", [1.0], by_turn=[{"turn": 1, "ttft": {"p50": 10.0}}, {"turn": 2, "ttft": {"p50": 12.0}}])
    assert "TTFT by session turn" in (turn_overlay([BASE, turns]) or "")
    stages = {"stages": [{"stats": {"output_tokens_per_s": 100.0, "ttft": {"p50": 20.0}}},
                         {"output_tokens_per_s": 200.0, "ttft": {"p50": 35.0}}]}  # with or without "stats"
    pareto = pareto_overlay([_run("s", [1.0], **stages)])
    assert pareto is not None and "Per stage: throughput vs latency" in pareto
    no_points = _run("x", [1.0], stages=[{"stats": {"output_tokens_per_s": None, "ttft": {}}}])
    assert pareto_overlay([no_points]) is None


def test_write_page_writes_the_rendered_page(tmp_path: Path) -> None:
    out = write_page(tmp_path / "compare.html", [BASE, NEW], [VERDICTS], [], [])
    text = out.read_text()
    assert re.sub(r"<svg.*?</svg>", "", text, flags=re.S) == re.sub(
        r"<svg.*?</svg>", "", render([BASE, NEW], [VERDICTS], [], []), flags=re.S)
