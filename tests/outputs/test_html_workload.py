"""outputs/html_workload.py: report.html's workload sections, each drawn only when the summary
has its data: latency by session turn (table and chart), achieved vs target input length, TTFT
by shared prefix and by cache hit, and cost, with the numbers in the tables' format."""

from __future__ import annotations

import re
from typing import Any

from llm_users.outputs.html_workload import error_chart, sections, turn_chart


def _turn(turn: int, ttft: float) -> dict[str, Any]:
    return {"turn": turn, "requests": 10, "failures": 0, "ttft": {"p50": ttft, "p99": ttft * 2},
            "e2e": {"p50": 900.0, "p99": 1500.0}, "input_tokens_mean": 100.0 * turn, "output_tokens_mean": 64.0}


def _rows(page: str, heading: str) -> list[list[str]]:
    """The cells of the table under ``heading``."""
    table = page.split(f"<h2>{heading}</h2>", 1)[1].split("</table>", 1)[0]
    return [re.findall(r"<t[dh]>(.*?)</t[dh]>", row) for row in table.split("<tr>")[1:]]


def test_nothing_in_the_summary_draws_nothing() -> None:
    assert sections({}) == "" and sections({"by_turn": [], "workload": {}, "cost": None}) == ""
    assert turn_chart([]) is None and error_chart({"histogram": {}}) is None


def test_latency_by_turn_is_a_table_and_a_chart() -> None:
    page = sections({"by_turn": [_turn(1, 40.0), _turn(2, 55.5)]})
    assert _rows(page, "Sessions: latency by turn") == [
        ["turn", "requests", "failures", "TTFT p50", "TTFT p99", "E2E p50", "E2E p99", "input tokens (mean)",
         "output tokens (mean)"],
        ["1", "10", "0", "40.0", "80.0", "900.0", "1500.0", "100.0", "64.0"],
        ["2", "10", "0", "55.5", "111.0", "900.0", "1500.0", "200.0", "64.0"]]
    assert "<svg" in page and "Latency by session turn" in page and "input tokens (mean)" in page


def test_input_length_achieved_vs_target() -> None:
    err = {"requests": 200, "exact_share": 0.955, "abs_tokens": {"p50": 0, "p99": 2, "max": 3},
           "pct": {"p50": 0.0, "p99": 0.4, "max": 0.6}, "histogram": {"-1": 4, "0": 191, "2": 5}}
    page = sections({"workload": {"input_tokens_error": err,
                                  "source": {"method": "server tokenizer", "input_tokens": 512, "overhead_tokens": 7}}})
    assert ("Target 512 tokens, made exact by <b>server tokenizer</b> (overhead 7 tokens); the server counted "
            "200 prompts, 95.5% exactly on target.") in page
    assert _rows(page, "Input length: achieved vs target")[1:] == [["tokens", "0", "2", "3"],
                                                                   ["percent", "0.000", "0.400", "0.600"]]
    assert "Input length: server count vs target" in page  # the histogram's chart


def test_prefixes_and_cost() -> None:
    page = sections({
        "workload": {"prefixes": {"by_prefix": [{"prefix": 0, "requests": 5, "ttft": {"p50": 20.0, "p99": 30.0}}],
                                  "by_cache_hit": {"hit": {"requests": 4, "ttft": {"p50": 12.0, "p99": 15.0}}}}},
        "cost": {"currency": "USD", "total": 1.5, "per_request": 0.015, "per_1k_output_tokens": 0.25,
                 "input_cost": 0.5, "cached_input_cost": 0.1, "output_cost": 0.9, "prices_text": "in=1 <b>, out=2"}})
    assert _rows(page, "Shared prefixes: TTFT")[1:] == [["prefix 0", "5", "20.0", "30.0"], ["cache hit", "4", "12.0", "15.0"]]
    assert _rows(page, "Cost") == [["", "total USD", "per request", "per 1k output tokens", "input", "cached input",
                                    "output"], ["measured requests", "1.500", "0.015", "0.250", "0.500", "0.100", "0.900"]]
    assert "Prices per million tokens: in=1 &lt;b&gt;, out=2." in page  # escaped


def test_cost_without_a_currency_says_price_units() -> None:
    """Issue 53 item 10: --llm-price with no currency= heads the total "price units", not nothing."""
    cost = {"currency": "", "total": 1.5, "per_request": 0.015, "per_1k_output_tokens": 0.25,
            "input_cost": 0.5, "cached_input_cost": 0.1, "output_cost": 0.9, "prices_text": "in=1,out=2"}
    assert _rows(sections({"cost": cost}), "Cost")[0][1] == "total price units"
