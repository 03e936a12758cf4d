"""What of a run's configuration may be shown, and keeping secrets out of everything we print.

Secrets are known by what they are, not guessed from option names (``llm_max_tokens`` is a
setting, not a token): the values of the API-key variables the users read, the value after a
key-like flag inside a nested argument string (``--llm-sim-args "--require-api-key sk-..."``),
and the value of an Authorization-like header written into an option. :class:`Redactor`
replaces each of them with ``***`` wherever it appears.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable
from typing import Any

MASK = "***"
#: A flag whose value is a secret: --require-api-key, --api-key, --token, --password, --auth ...
SECRET_FLAG = re.compile(r"^--?[\w-]*(?:api[-_]?key|token|secret|password|passwd|auth(?:orization|[-_]?token)?)$",
                         re.I)
#: "Authorization: Bearer x", "x-api-key=x" written into an option's value.
SECRET_HEADER = re.compile(r"(?i)\b(?:authorization|proxy-authorization|x-api-key|api-key|x-goog-api-key)"
                           r"\s*[:=]\s*(?:bearer\s+|basic\s+)?([^\s,;\"']+)")
_MIN_LEN = 4  # shorter values would blank out ordinary text


def secrets_in_args(text: str) -> set[str]:
    """Values that follow a key-like flag in an argument string, and header values in it."""
    out = {m.group(1) for m in SECRET_HEADER.finditer(text)}
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    for i, w in enumerate(words):
        flag, eq, value = w.partition("=")
        if not SECRET_FLAG.match(flag):
            continue
        if eq:
            out.add(value)
        elif i + 1 < len(words) and not words[i + 1].startswith("--"):
            out.add(words[i + 1])
    return out


def key_variable_names(user_settings: Iterable[Any]) -> set[str]:
    names: set[str] = set()
    for s in user_settings:
        names.update(n.strip() for n in str(getattr(s, "api_key_env", None) or "").split(",") if n.strip())
    return names


class Redactor:
    """Masks known secret values in text and in the configuration written to the summary."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = sorted({s for s in secrets if s and len(s) >= _MIN_LEN}, key=len, reverse=True)

    @classmethod
    def for_run(cls, options: Any, user_settings: Iterable[Any] = ()) -> Redactor:
        found: set[str] = set()
        for name in key_variable_names(user_settings):
            value = os.environ.get(name)
            if value:
                found.add(value)
        for value in _option_items(options).values():
            if isinstance(value, str):
                found |= secrets_in_args(value)
        return cls(found)

    def text(self, value: str) -> str:
        for s in self.secrets:
            value = value.replace(s, MASK)
        return value

    def scrub(self, obj: Any) -> Any:
        """The same JSON-ready structure with every secret value masked wherever it appears."""
        if not self.secrets:
            return obj
        import orjson

        text = orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode()
        for s in self.secrets:
            text = text.replace(orjson.dumps(s).decode()[1:-1], MASK)
        return orjson.loads(text)

    def config(self, options: Any) -> dict[str, Any]:
        """Every option as a dict, secret values masked; an option that is itself a key (its
        name is a key-like flag: ``api_key``, ``auth_token``) is left out, but never one that
        merely contains such a word (``llm_max_tokens``, ``llm_api_key_env``)."""
        out: dict[str, Any] = {}
        for k, v in _option_items(options).items():
            if SECRET_FLAG.match("--" + k.replace("_", "-")):  # an option that holds a key itself
                continue
            if isinstance(v, str):
                out[k] = self.text(v)
            elif isinstance(v, int | float | bool) or v is None:
                out[k] = v
            elif isinstance(v, list | tuple) and all(isinstance(x, str | int | float) for x in v):
                out[k] = [self.text(x) if isinstance(x, str) else x for x in v]
        return out


def _option_items(options: Any) -> dict[str, Any]:
    if options is None:
        return {}
    return dict(vars(options)) if hasattr(options, "__dict__") else dict(options)


def redact_config(options: Any, redactor: Redactor | None = None) -> dict[str, Any]:
    """The run's options as a dict with every known secret masked."""
    return (redactor or Redactor.for_run(options)).config(options)
