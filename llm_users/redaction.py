"""What of a run's configuration may be shown: the options as a dict, secrets left out."""

from __future__ import annotations

import re
from typing import Any

_SECRET_WORDS = ("key", "token", "secret", "password", "auth")
#: option names that say "tokens" (a count: --llm-max-tokens, --llm-input-tokens) hold no secret
_COUNTS = re.compile(r"tokens(_|$)")


def redact_config(options: Any) -> dict[str, Any]:
    """The run's options as a dict, without anything that could be a secret."""
    if options is None:
        return {}
    items = vars(options).items() if hasattr(options, "__dict__") else dict(options).items()
    out: dict[str, Any] = {}
    for k, v in items:
        name = _COUNTS.sub("", k.lower())
        if any(w in name for w in _SECRET_WORDS) and not k.endswith("_env"):
            continue
        if isinstance(v, str | int | float | bool) or v is None:
            out[k] = v
        elif isinstance(v, list | tuple) and all(isinstance(x, str | int | float) for x in v):
            out[k] = list(v)
    return out
