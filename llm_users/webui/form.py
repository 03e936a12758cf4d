"""The start form's LLM group: the ``--llm-*`` options a user types, listed under their own
heading on Locust's start form (not under Locust's "Custom parameters"), with the run's values.

``tab.js`` fetches :func:`form_groups` (``GET /llm/form.json``) and adds one ``<input>`` per
field, named by the option's ``dest`` (``llm_slo``), inside Locust's start ``<form>``: Locust's
form sends every named input it holds (``querySelectorAll('input, select, textarea')``) and its
``/swarm`` handler writes each field that is an option into ``parsed_options``, where the run
reads it as the test starts (``options.RunConfig.for_test``). Some options are read only when
Locust starts (the price, the stage plan): the form shows them read-only, and
:func:`fixed_reason` refuses a form that changes one, with one line, as a bad value is refused.
The SLOs may change until the run's first test starts (the report covers one set of SLOs).

These fields are the only ``--llm-*`` options the web UI may set (:mod:`llm_users.webui.guard`
refuses any other): none names the API key's variable, reads a local file to send it (a
dataset or schema file), or weakens TLS.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: read when Locust starts: shown read-only, a change is refused
AT_START = "start"
#: may change until the run's first test starts
BEFORE_FIRST_TEST = "first"

# (heading, [(flag, hint, fixed)]); the hint is the option's --help in a few words
GROUPS: list[tuple[str, list[tuple[str, str, str | None]]]] = [
    ("Goals", [
        ("--llm-slo", "SLOs for goodput, e.g. ttft=500ms,tpot=50ms,e2e=30s", BEFORE_FIRST_TEST),
        ("--llm-price", "prices per million tokens: in=X,out=Y[,currency=USD]", AT_START),
    ]),
    ("Workload", [
        ("--llm-dataset", "a shipped dataset's name (a file: give it on the command line)", None),
        ("--llm-input-tokens", "synthetic prompts of N input tokens: 512 or 128:2048", None),
        ("--llm-output-tokens", "output tokens per request: 256, 64:512 or normal:256,32", None),
        ("--llm-turns", "multi-turn sessions of N turns", None),
        ("--llm-think-time", "wait between a session's turns, e.g. 2s", None),
    ]),
    ("Load plan", [
        ("--llm-rate", "open loop: requests/s for the whole run (users then idle)", None),
        ("--llm-arrival", "open loop: constant | poisson | gamma:K", None),
        ("--llm-max-inflight", "open loop: at most N requests in flight", None),
        ("--llm-steps", "stages START:STOP:STEP:DURATION, e.g. 50:2000:50:60s", AT_START),
        ("--llm-stages", "stages LOAD:DURATION,..., e.g. 50:60s,100:60s", AT_START),
    ]),
    ("Requests", [
        ("--llm-model", "model name to request", None),
        ("--llm-max-tokens", "maximum output tokens per request", None),
        ("--llm-temperature", "sampling temperature", None),
        ("--llm-top-p", "nucleus sampling top_p", None),
        ("--llm-ignore-eos", "true/false: generate past EOS where the backend can", None),
        ("--llm-endpoint", "chat | completions | responses | generate", None),
        ("--llm-client", "raw (our streaming client) | sdk (the backend's SDK)", None),
        ("--llm-timeout", "whole-request time limit, e.g. 10m (or seconds)", None),
        ("--llm-think-jitter", "random pause before each later request, e.g. 200ms", None),
        ("--llm-spawn-spread", "on/off: spread each spawn batch's first requests", None),
        ("--llm-response-format", "json: ask for a JSON answer, checked (schema:FILE: on the command line)", None),
    ]),
]


def web_fields() -> frozenset[str]:
    """The ``dest`` of every option the form holds: the web UI may set these and no other."""
    return frozenset(dest(flag) for _, fields in GROUPS for flag, _, _ in fields)


def dest(flag: str) -> str:
    """``--llm-max-tokens`` -> ``llm_max_tokens`` (argparse's name: the form field's name)."""
    return flag.lstrip("-").replace("-", "_")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def value_of(options: Mapping[str, Any] | None, flag: str) -> str:
    """The option's value as the form shows it ("" when not given); the dataset also under its
    old name, ``--llm-prompts``."""
    opts = options or {}
    value = _text(opts.get(dest(flag)))
    if not value and flag == "--llm-dataset":
        value = _text(opts.get("llm_prompts"))
    return value


def form_groups(options: Mapping[str, Any] | None, started: bool) -> list[dict[str, Any]]:
    """The LLM group's headings and fields with the run's current values; ``started``: the run's
    first test has started (the SLOs are then fixed too)."""
    out = []
    for title, fields in GROUPS:
        out.append({"title": title, "fields": [
            {"name": dest(flag), "flag": flag, "hint": hint, "value": value_of(options, flag),
             "readonly": fixed == AT_START or (fixed == BEFORE_FIRST_TEST and started)}
            for flag, hint, fixed in fields]})
    return out


def fixed_reason(form: Mapping[str, Any], options: Mapping[str, Any] | None, started: bool) -> str | None:
    """The one line refusing a form that changes an option the run cannot change now, or None."""
    for _, fields in GROUPS:
        for flag, _, fixed in fields:
            name = dest(flag)
            if fixed is None or name not in form:
                continue
            if fixed == BEFORE_FIRST_TEST and not started:
                continue
            now = value_of(options, flag).strip()
            if str(form[name]).strip() != now:
                if fixed == AT_START:
                    return f"{flag} is read when locust starts: give it on the command line (this run: {now or 'none'})"
                return (f"{flag} can change only before the run's first test: the report holds one set "
                        f"(this run: {now or 'none'})")
    return None
