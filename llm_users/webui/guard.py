"""The web UI's rules for a visitor: which options a form may set, from which origin, and where
the API key goes.

Locust's ``POST /swarm`` writes every field that names one of its options into
``parsed_options`` (not only the fields its form shows), ``POST /user`` sets any attribute of
a User class, and the plugin reads its options again as each test starts. Hiding a field is no
defence, so the rules hold here, on the server side, before Locust's handlers run:

- ``POST /swarm`` may set Locust's own start fields, the custom parameters Locust's form shows,
  and the LLM group's fields (:func:`llm_users.webui.form.web_fields`); a field naming any other
  option is refused with one line. The LLM group holds no option that names the API key's
  variable, reads a local file to send it, or weakens TLS; its dataset field takes a shipped
  dataset's name (or the run's own, unchanged) and its answer format ``json``.
- ``POST /user`` (Locust's User class editor) may set a class's host, weight, fixed count
  and tasks, nothing else.
- A POST from another origin (a page the operator visits, posting to ``localhost:8089``) is
  refused with 403, by its ``Origin`` or ``Sec-Fetch-Site`` header.
- A host typed in the form gets the load but not the API key, unless it was given at start
  or allowed with ``--llm-api-key-hosts`` (:mod:`llm_users.key_scope`): the answer to the
  form, the Logs tab and the LLM tab's notes say so.

At start, when a key is loaded and the UI listens beyond loopback without ``--web-login``,
one line says so and names ``--web-host 127.0.0.1`` (:func:`exposure_line`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from llm_users.key_scope import origin, withheld_line
from llm_users.options import check_url, current_options
from llm_users.webui.form import value_of, web_fields

log = logging.getLogger(__name__)

#: the fields of Locust's own start and edit forms (``/swarm``)
LOCUST_FIELDS = frozenset({"user_count", "spawn_rate", "host", "run_time", "user_classes", "shape_class", "profile"})
#: the fields of Locust's User class editor (``/user``): ``User.json()`` and the class's name
USER_CLASS_FIELDS = frozenset({"user_class_name", "host", "weight", "fixed_count", "tasks"})
#: a value the web may give these LLM fields besides the run's own (unchanged)
_JSON_ONLY = ("", "json")
_SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
_LOOPBACK = ("127.", "localhost", "::1", "[::1]")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def refused_field(fields: Iterable[str], options: Mapping[str, Any], custom: Iterable[str]) -> str | None:
    """The line refusing a ``/swarm`` form that sets an option the web may not set, or None:
    ``options`` Locust's options (what ``/swarm`` would write), ``custom`` the custom
    parameters Locust's form shows."""
    allowed = LOCUST_FIELDS | web_fields() | {c for c in custom if not c.startswith("llm_")}
    for name in fields:
        if name in allowed or (name not in options and not name.startswith("llm_")):
            continue  # a field that is no option: Locust ignores it
        why = " (the API key's variable is chosen on the command line only)" if name == "llm_api_key_env" else ""
        return f"{_flag(name)} cannot be set from the web UI: give it on the command line{why}"
    return None


def refused_value(form: Mapping[str, Any], options: Mapping[str, Any], shipped: Iterable[str]) -> str | None:
    """The line refusing a dataset that is not shipped (a path on the machine, whose lines
    would be sent to whatever host the form names) or a schema file, or None. The run's own
    value, shown in the form and sent back unchanged, is always accepted."""
    dataset = str(form.get("llm_dataset", "") or "").strip()
    names = set(shipped) | {n.rsplit(".", 1)[0] for n in shipped}
    if dataset and dataset != value_of(options, "--llm-dataset").strip() and dataset not in names:
        return (f"--llm-dataset from the web UI takes a shipped dataset ({', '.join(sorted(shipped))}); "
                f"give a file on the command line")
    fmt = str(form.get("llm_response_format", "") or "").strip()
    if fmt not in _JSON_ONLY and fmt != value_of(options, "--llm-response-format").strip():
        return "--llm-response-format from the web UI takes json; give schema:FILE on the command line"
    return None


def refused_host(host: str | None, classes_have_hosts: bool) -> str | None:
    """The line refusing the form's Host: empty where a User class has none of its own, or no
    http(s) URL. Locust would start the test and a user would fail on it."""
    text = (host or "").strip()
    if not text:
        return None if classes_have_hosts else "give the server's URL as Host, e.g. http://localhost:8000"
    try:
        check_url(text, "Host")
    except Exception as e:  # noqa: BLE001 - ConfigError's one line
        return str(e)
    return None


def refused_users(value: str | None) -> str | None:
    """The line refusing a negative user count (Locust's dispatcher would raise mid-spawn and
    leave the UI spawning forever), or None; a count that is no number Locust refuses itself."""
    try:
        return "the number of users must be 0 or more" if value is not None and int(value) < 0 else None
    except ValueError:
        return None


def refused_user_class(settings: Mapping[str, Any]) -> str | None:
    """The line refusing a ``/user`` edit that sets anything but the class editor's fields."""
    extra = sorted(set(settings) - USER_CLASS_FIELDS)
    if extra:
        return f"the web UI may change a User class's host, weight, fixed_count and tasks only, not {', '.join(extra)}"
    return None


def cross_origin(method: str, headers: Mapping[str, str], host_url: str) -> bool:
    """A state-changing request sent by a page of another origin: its ``Origin`` differs from
    the UI's own (``host_url``, or the ``X-Forwarded-Host`` a proxy names), or the browser says
    ``Sec-Fetch-Site: cross-site``/``same-site``. A request with neither header (curl, a
    script) is no browser's cross-site request and passes."""
    if method.upper() in _SAFE_METHODS:
        return False
    sent = headers.get("Origin")
    if sent is not None:
        own = {origin(host_url)}
        forwarded = headers.get("X-Forwarded-Host")
        if forwarded:
            scheme = headers.get("X-Forwarded-Proto", "http").split(",")[0].strip()
            own.add(origin(f"{scheme}://{forwarded.split(',')[0].strip()}"))
        o = origin(sent)
        return o is None or o not in own
    return headers.get("Sec-Fetch-Site", "same-origin").lower() not in ("same-origin", "none")


def key_notes(run_config: Any, host: str | None) -> list[str]:
    """One line per API key that a run at ``host`` goes without (a key is loaded, the host is
    outside the key's scope): each User class's effective host is ``host`` or its own."""
    lines = []
    for cls, settings in run_config.user_settings.items():
        target = host or getattr(cls, "host", None)
        if settings.key_scope is not None and settings.key_withheld(target):
            lines.append(withheld_line(target, settings.api_key_names(), settings.key_scope))
    return list(dict.fromkeys(lines))


def exposure_line(options: Mapping[str, Any], run_config: Any) -> str | None:
    """The start line when an API key is loaded and the UI listens beyond loopback without
    ``--web-login``: anyone who reaches it can start runs that carry the key to its hosts."""
    web_host = str(options.get("web_host") or "").strip()
    if options.get("web_login") or web_host.startswith(_LOOPBACK):
        return None
    names = [s.api_key_names() for s in run_config.user_settings.values() if s.api_key() is not None]
    if not names:
        return None
    where = "all interfaces" if web_host in ("", "*", "0.0.0.0", "::") else web_host
    port = options.get("web_port") or 8089
    return (f"the web UI listens on {where}:{port} without --web-login and an API key ({', '.join(dict.fromkeys(names))}) "
            f"is loaded: whoever reaches it can start runs that use the key; add --web-host 127.0.0.1 (or --web-login)")


def install(web_ui: Any, run: Any) -> None:
    """The rules above on a Locust WebUI, before any route of Locust's or the tab's."""
    from flask import jsonify, request

    from llm_users.workload.datasets import shipped_names

    environment = run.environment
    app = web_ui.app
    custom: list[frozenset[str]] = []

    def custom_parameters() -> frozenset[str]:  # what Locust's form shows under "Custom parameters"
        if not custom:
            try:
                from locust.argument_parser import ui_extra_args_dict

                custom.append(frozenset(ui_extra_args_dict()))
            except (Exception, SystemExit):  # noqa: BLE001 - none then: only Locust's and ours
                custom.append(frozenset())
        return custom[0]

    def refuse(message: str, status: int = 200) -> Any:
        log.warning("locust-llm: web UI: refused %s %s: %s", request.method, request.path, message)
        response = jsonify({"success": False, "message": message, "host": environment.host})
        response.status_code = status
        return response

    @app.before_request
    def _guard() -> Any:
        if cross_origin(request.method, request.headers, request.host_url):
            return refuse("refused: a request from another origin (a web page may not drive this UI)", 403)
        if request.method != "POST":
            return None
        if request.path.endswith("/user"):
            settings = request.get_json(silent=True, force=True)
            reason = refused_user_class(settings) if isinstance(settings, dict) else "a JSON object expected"
            return refuse(reason, 400) if reason else None
        if not request.path.endswith("/swarm"):
            return None
        options = current_options(environment)
        reason = refused_field(request.form.keys(), options, custom_parameters())
        reason = reason or refused_value(request.form, options, shipped_names()) or refused_users(
            request.form.get("user_count"))
        if reason is None and "host" in request.form:
            classes = list(environment.user_classes or [])
            reason = refused_host(request.form.get("host"), bool(classes) and all(getattr(c, "host", None)
                                                                                  for c in classes))
        return refuse(reason) if reason else None

    @app.after_request
    def _say_key(response: Any) -> Any:
        if request.method == "POST" and request.path.endswith("/swarm") and response.status_code == 200:
            data = response.get_json(silent=True)
            notes = key_notes(run.current_config, environment.host)
            if isinstance(data, dict) and data.get("success") and notes:
                for line in notes:
                    log.warning("locust-llm: %s", line)  # the Logs tab
                data["message"] = "; ".join([str(data.get("message") or ""), *notes]).lstrip("; ")
                response.set_data(jsonify(data).get_data())
        return response

    line = exposure_line(current_options(environment), run.config)
    if line:
        print(f"locust-llm: {line}", file=sys.stderr, flush=True)
