"""webui/form.py: the start form's LLM group (its fields and the run's values in them), the
fields the web UI may set, and the one line refusing a change the run cannot take now."""

from __future__ import annotations

from llm_users.webui.form import GROUPS, dest, fixed_reason, form_groups, value_of, web_fields


def test_the_llm_group_lists_the_documented_options_with_the_runs_values() -> None:
    from llm_users.webui.form import form_groups

    groups = form_groups({"llm_slo": "ttft=500ms", "llm_prompts": "sharegpt", "llm_steps": "1:4:1:10s"}, started=False)
    fields = {f["flag"]: f for g in groups for f in g["fields"]}
    assert {"--llm-slo", "--llm-input-tokens", "--llm-output-tokens", "--llm-turns", "--llm-dataset", "--llm-rate",
            "--llm-steps", "--llm-price", "--llm-model", "--llm-max-tokens"} <= set(fields)
    assert "--llm-prompts" not in fields  # the old name's value shows under --llm-dataset
    assert fields["--llm-dataset"]["value"] == "sharegpt" and fields["--llm-dataset"]["name"] == "llm_dataset"
    assert fields["--llm-slo"]["value"] == "ttft=500ms" and not fields["--llm-slo"]["readonly"]
    assert fields["--llm-steps"]["readonly"] and fields["--llm-price"]["readonly"]
    assert not fields["--llm-input-tokens"]["readonly"]
    started = {f["flag"]: f for g in form_groups({}, started=True) for f in g["fields"]}
    assert started["--llm-slo"]["readonly"]


def test_values_as_the_form_shows_them() -> None:
    assert dest("--llm-max-tokens") == "llm_max_tokens"
    assert value_of(None, "--llm-model") == "" and value_of({"llm_model": None}, "--llm-model") == ""
    assert value_of({"llm_max_tokens": 64}, "--llm-max-tokens") == "64"
    assert value_of({"llm_stages": ["50:60s", "100:60s"]}, "--llm-stages") == "50:60s,100:60s"  # a list: joined
    assert value_of({"llm_dataset": "short", "llm_prompts": "old"}, "--llm-dataset") == "short"  # the new name first
    assert value_of({"llm_prompts": "old"}, "--llm-model") == ""  # the old name is the dataset's only
    assert [g["title"] for g in form_groups(None, False)] == [title for title, _ in GROUPS]


def test_the_web_fields_are_the_forms_and_none_names_a_key_a_file_or_tls() -> None:
    fields = web_fields()
    assert fields == {dest(flag) for _, group in GROUPS for flag, _, _ in group}
    assert {"llm_slo", "llm_model", "llm_dataset", "llm_response_format"} <= fields
    assert not {"llm_api_key_env", "llm_api_key_hosts", "llm_insecure", "llm_tools", "llm_report", "llm_prompts"} & fields


def test_fixed_reason_refuses_only_a_change_the_run_cannot_take() -> None:
    run = {"llm_steps": "1:4:1:10s", "llm_slo": "ttft=500ms"}
    assert fixed_reason({"llm_steps": " 1:4:1:10s ", "llm_model": "other"}, run, started=False) is None  # unchanged
    assert fixed_reason({"llm_price": "in=1,out=2"}, run, started=False) == (
        "--llm-price is read when locust starts: give it on the command line (this run: none)")
    assert fixed_reason({"llm_slo": "ttft=100ms"}, run, started=False) is None  # before the first test: it applies
    assert fixed_reason({"llm_slo": "ttft=100ms"}, run, started=True) == (
        "--llm-slo can change only before the run's first test: the report holds one set (this run: ttft=500ms)")
    assert fixed_reason({"llm_slo": "ttft=500ms"}, run, started=True) is None
