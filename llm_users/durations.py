"""The one duration parser every ``--llm-*`` option uses.

Rule (docs/options.md): a duration is a number followed by a unit, ``ns``, ``us`` (or ``µs``),
``ms``, ``s``, ``m`` or ``h`` (``500ms``, ``30s``, ``1.5m``, ``2h``; spaces allowed between
number and unit). A bare number is refused: the unit is never guessed. The time limits that were always plain
seconds (:func:`parse_seconds`) take a unit too, and their bare seconds still.
"""

from __future__ import annotations

import re

from llm_users.errors import ConfigError

UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
            "m": 60_000_000_000, "h": 3_600_000_000_000}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ns|us|µs|ms|s|m|h)\s*$")
EXAMPLES = "e.g. 500ms, 30s, 2m, 1h; units ns, us, ms, s, m, h"


def parse_duration_ns(text: str, option: str) -> float:
    """``'500ms'`` -> 5e8. Raises :class:`ConfigError` naming ``option`` for anything else."""
    m = _DURATION.match(str(text))
    if not m:
        hint = " (a bare number is not a duration: add its unit)" if _is_number(text) else ""
        raise ConfigError(f"{option}: cannot read {str(text).strip()!r} as a duration{hint}; {EXAMPLES}")
    return float(m.group(1)) * UNITS_NS[m.group(2)]


def parse_duration_s(text: str, option: str) -> float:
    """``'30s'`` -> 30.0 (seconds)."""
    return parse_duration_ns(text, option) / 1e9


def parse_seconds(text: str, option: str) -> float:
    """The time limits' form (``--llm-timeout``, ``--llm-scrape-interval``...): a duration with
    its unit (``30s``, ``500ms``, ``2m``), or a bare number of seconds as these options always
    took (like Locust's ``--stop-timeout``). Raises :class:`ConfigError` naming ``option``."""
    if _is_number(text):
        return float(str(text))
    return parse_duration_s(text, option)


def _is_number(text: str) -> bool:
    try:
        float(str(text))
    except ValueError:
        return False
    return True
