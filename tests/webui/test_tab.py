"""llm_users/webui/tab.py: the start form's LLM fields are checked before a run starts."""

from __future__ import annotations

import argparse

import pytest

from llm_users.errors import ConfigError
from llm_users.metrics import RequestRecord
from llm_users.options import RunConfig
from llm_users.users import VLLMUser
from llm_users.webui.live import LiveView
from llm_users.webui.tab import check_form


def opts(**kw: object) -> RunConfig:
    """The run's configuration from these options (the form's fields go over them)."""
    return RunConfig.from_options(argparse.Namespace(**kw))


def test_good_and_empty_fields_pass() -> None:
    assert check_form({"user_count": "4"}, opts(), [VLLMUser]) is None
    assert check_form({"llm_max_tokens": "16", "llm_model": "m", "llm_temperature": ""}, opts(), [VLLMUser]) is None


def test_bad_fields_get_one_line_reasons() -> None:
    # the command line's own line (llm_users/options.py), not a message of the form's own
    assert check_form({"llm_max_tokens": "lots"}, opts(), [VLLMUser]) == "--llm-max-tokens must be a whole number, got 'lots'"
    assert check_form({"llm_top_p": "x"}, opts(), [VLLMUser]) == "--llm-top-p must be a number, got 'x'"
    reason = check_form({"llm_client": "curl"}, opts(), [VLLMUser])
    assert reason is not None and "--llm-client" in reason and "\n" not in reason


def test_per_request_settings_are_read_per_test_and_none_is_under_custom_parameters() -> None:
    """Locust's start form lists the actions marked include_in_web_ui under "Custom parameters";
    ours are in their own LLM group (webui/form.py), so none is marked. The per-request
    settings are read again as each test starts (``llm_per_test``), process-level ones are not."""
    from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments

    from llm_users import options

    parser = get_empty_argument_parser()
    setup_parser_arguments(parser)
    options.add_arguments(parser)
    assert not {a for a in parser.args_included_in_web_ui if a.startswith("llm_")}
    web = {a.dest for a in parser._actions if getattr(a, "llm_per_test", False)}
    assert {"llm_model", "llm_max_tokens", "llm_endpoint", "llm_temperature", "llm_client",
            "llm_spawn_spread", "llm_think_jitter"} <= web
    assert not {"llm_report", "llm_prometheus_port", "llm_slo", "llm_sim_args", "llm_gpu_sidecar"} & web


def _command_line_error(*args: str) -> str:
    """The line ``locust --llm-... VALUE`` stops with (the plugin prints it after 'locust-llm: ')."""
    from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments

    from llm_users import options
    from llm_users.load import study

    parser = get_empty_argument_parser()
    setup_parser_arguments(parser)
    options.add_arguments(parser)
    study.add_arguments(parser)
    parsed = parser.parse_args(["-f", "locustfile.py", *args])
    try:
        RunConfig.from_options(parsed, [VLLMUser])
    except ConfigError as e:
        return str(e)
    raise AssertionError(f"{args} was accepted")


@pytest.mark.parametrize(("field", "value"), [
    ("llm_max_tokens", "lots"), ("llm_temperature", "9"), ("llm_connect_timeout", "-1"),
    ("llm_client", "curl"), ("llm_rate", "fast"), ("llm_seed", "x"), ("llm_think_jitter", "5"),
])
def test_the_web_form_and_the_command_line_give_the_same_line(field: str, value: str) -> None:
    """Issue 26: the form is checked by the command line's parser, so the reasons are the same."""
    cli = _command_line_error("--" + field.replace("_", "-"), value)
    assert cli.startswith("--" + field.replace("_", "-"))
    assert check_form({field: value}, opts(), [VLLMUser]) == cli


def test_a_field_read_at_start_is_refused_when_changed_and_slos_only_before_the_first_test() -> None:
    run = opts(llm_steps="1:4:1:10s", llm_slo="ttft=500ms")
    assert check_form({"llm_steps": "1:4:1:10s", "llm_input_tokens": "300"}, run, [VLLMUser]) is None
    assert check_form({"llm_steps": "2:8:2:10s"}, run, [VLLMUser]) == (
        "--llm-steps is read when locust starts: give it on the command line (this run: 1:4:1:10s)")
    assert check_form({"llm_price": "in=1,out=2"}, run, [VLLMUser]).startswith("--llm-price is read when locust starts")
    assert check_form({"llm_slo": "ttft=100ms"}, run, [VLLMUser]) is None  # no test yet: it takes effect
    assert check_form({"llm_slo": "ttft=1"}, run, [VLLMUser]).startswith("--llm-slo")  # the parser's own line
    reason = check_form({"llm_slo": "ttft=100ms"}, run, [VLLMUser], started=True)
    assert reason == "--llm-slo can change only before the run's first test: the report holds one set (this run: ttft=500ms)"
    assert check_form({"llm_slo": "ttft=500ms"}, run, [VLLMUser], started=True) is None


def test_stage_markers_since_the_reset() -> None:
    from types import SimpleNamespace

    from llm_users.load.stages import StageBook
    from llm_users.webui.tab import stage_marks

    book = StageBook()
    book.begin("users", 2, 1000.0, 1.0)
    book.begin("users", 4, 1010.0, 1.0)
    book.begin("rate", 8.5, 1020.0, 1.0)
    run = SimpleNamespace(study=SimpleNamespace(runs={"stages": SimpleNamespace(book=book)}))
    assert stage_marks(run, 999.0) == [{"time": 1000.0, "label": "2 users"}, {"time": 1010.0, "label": "4 users"},
                                       {"time": 1020.0, "label": "8.5 req/s"}]
    assert stage_marks(run, 1015.0) == [{"time": 1015.0, "label": "4 users"}, {"time": 1020.0, "label": "8.5 req/s"}]
    assert stage_marks(SimpleNamespace(), 0.0) == []


def test_the_connection_per_request_note_since_the_reset() -> None:
    """The tab says what the console says when most requests opened their own connection (the
    openai SDK's habit), over the requests since the last reset."""
    from llm_users.metrics import RequestRecord
    from llm_users.webui.tab import notes

    def rec(i: int, connect_ns: int | None) -> RequestRecord:
        return RequestRecord(f"r{i}", "/v1/chat/completions", "openai", "m", start_time=100 + i, ttft_ns=40_000_000,
                             e2e_ns=200_000_000, itl_ns=[5_000_000], connect_ns=connect_ns)

    live = LiveView()
    live.reset(100.0)
    assert notes(live) == []
    for i in range(3):
        live.stats.add(rec(i, 700_000))
    assert notes(live) == ["3 of 3 requests opened their own connection (connect p50 0.70 ms, p99 0.70 ms): "
                           "before t0, so in no latency figure here, only in the request rate"]
    live.reset(110.0)
    for i in range(3):  # after the reset: reused connections, no note
        live.stats.add(rec(10 + i, None))
    assert notes(live) == []


def test_live_tab_shows_the_columns_for_an_embeddings_run() -> None:
    from types import SimpleNamespace

    from llm_users.settings import settings_for
    from llm_users.users import VLLMEmbedUser, VLLMUser
    from llm_users.webui.tab import _has_kinds

    def run(*classes: type) -> SimpleNamespace:
        return SimpleNamespace(current_config=SimpleNamespace(user_settings={c: settings_for(c, None) for c in classes}))

    assert _has_kinds(run(VLLMUser, VLLMEmbedUser)) and not _has_kinds(run(VLLMUser))


def test_the_users_line_reads_the_runs_count_of_each_second() -> None:
    """The charts' users (issue 53 item 6): the count the run takes each second (timeseries.csv's;
    a master's, its workers' total), over the seconds the charts may show."""
    from types import SimpleNamespace

    from llm_users.distributed import Collector
    from llm_users.webui.live import KEEP_S
    from llm_users.webui.tab import users_by_second

    c = Collector()
    for t, n in ((1000, 1), (1001, 2), (1002, 4), (1000 + KEEP_S + 5, 8)):
        c.timeline.users(t + 0.5, n)
    run = SimpleNamespace(collector=c)
    assert users_by_second(run, 1000.7, 1003.0) == {1000: 1, 1001: 2, 1002: 4}
    assert users_by_second(run, 1000.0, 1000.0 + KEEP_S + 6) == {1000 + KEEP_S + 5: 8}  # the last KEEP_S s only
    assert users_by_second(SimpleNamespace(collector=None), 1000.0, 1003.0) == {}
