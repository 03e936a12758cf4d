"""outputs/html_headline.py: report.html's headline strip and its one-sentence self-check, a
study's headline (issue 28)."""

from __future__ import annotations

import pytest

from llm_users.outputs.html_headline import cells, headline, verdict
from tests.outputs.run_summary import summary as _summary
from tests.outputs.study_points import stages_summary as _stages_summary


def test_headline_strip_has_the_numbers_and_tokens_per_request() -> None:
    got = {k: v for k, v, _ in cells(_summary())}
    assert got["Goodput"] == "30.0 req/s" and got["SLO attainment"] == "96.0%"
    assert got["Output tokens/s"] == "950.0" and got["Requests/s"] == "31.5"
    assert got["TTFT p50 / p99"] == "20.0 / 30.0" and got["TPOT p50 / p99"] == "3.000 / 3.500"
    assert got["Tokens per request"] == "100.0 / 30.0"  # from the totals: 10000 and 3000 over 100 successes
    given = _summary(input_tokens_per_request={"p50": 98, "mean": 99.5},
                     output_tokens_per_request={"p50": 30, "mean": 29.0}, total_tokens_per_s=4100.0)
    got = {k: (v, s) for k, v, s in cells(given)}
    assert got["Tokens per request"] == ("98 / 30", "p50 in / out; mean 99.5 / 29.0")
    assert got["Total tokens/s"][0] == "4100.0"
    no_slo = _summary()
    del no_slo["overall"]["slo"]
    assert "Goodput" not in {k for k, _, _ in cells(no_slo)}


@pytest.mark.parametrize(("level", "saturated", "css"), [
    ("healthy", False, "lv-ok"), ("caution", False, "lv-warn"), ("saturated", True, "lv-bad"),
    ("failed", False, "lv-bad"), ("unmeasured", False, "lv-none"), (None, False, "lv-ok"), (None, True, "lv-bad"),
])
def test_the_verdict_is_one_sentence_coloured_by_its_level(level, saturated, css) -> None:
    s = _summary(level=level)
    s["self_check"]["saturated"] = saturated
    line = verdict(s)
    assert line.count("<p") == 1 and f"verdict {css}" in line
    assert "client healthy: its own delay stayed small" in line
    assert "Client self-check" in headline(s)


def test_report_headline_of_a_study_leads_with_the_knee_and_labels_the_pooled_goodput() -> None:
    from llm_users.outputs.html_headline import cells

    s = _stages_summary()
    s["overall"].update(requests=400, failures=12, output_tokens_per_s=1.0, requests_per_s=1.0)
    got = {k: (v, small) for k, v, small in cells(s)}
    assert got["Goodput at the knee"] == ("38.80 req/s", "at 8 u, 97.0% met every SLO")
    assert got["Points meeting the SLOs"] == ("2 of 4", "stages with ≥ 95% of requests meeting every SLO")
    assert got["Goodput, pooled"] == ("42.00 req/s", "over all 4 stages at different loads: not a capacity figure")
    assert "Goodput" not in got and "SLO attainment" not in got  # a plain run's cells, which would mislead here
    s["stages"] = s["stages"][2:]  # only failing stages: no knee
    got = {k: (v, small) for k, v, small in cells(s)}
    assert got["Goodput at the knee"] == ("-", "no stage met the SLOs") and got["Points meeting the SLOs"][0] == "0 of 2"
