"""How a failed request appears in Locust's failure table: one row per category and
normalized message, however many requests failed the same way.

Locust keys its table on ``repr(exception)``. A message that carries the offending payload or a
request id (``malformed_stream: ... is not JSON: b'{"id": "3f9c...", ...'``) would give every
request its own row, so the table gets :class:`LocustFailure`, whose repr is the category and
the message with quoted payloads cut and ids, long numbers and addresses replaced. The full
message stays in the record (requests.jsonl ``error_message``).
"""

from __future__ import annotations

import re

from llm_users.errors import LLMRequestError

_MAX_CHARS = 160
# A quoted payload (Python repr of str/bytes): kept only as a marker, its content varies.
_QUOTED = re.compile(r"""b?'(?:[^'\\]|\\.)*'|b?"(?:[^"\\]|\\.)*\"""")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
# Hex ids of 8+ characters that contain a digit (request ids, hashes), and 0x addresses.
_HEX = re.compile(r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}\b|\b0x[0-9a-fA-F]+\b")
# Numbers of 4+ digits (byte offsets, sizes, timestamps); HTTP statuses (3 digits) stay.
_NUMBER = re.compile(r"\b\d{4,}(?:\.\d+)?\b")


def normalize(message: str) -> str:
    """The message with what varies per request taken out, at most 160 characters."""
    text = _QUOTED.sub("'…'", message)
    text = _UUID.sub("<id>", text)
    text = _HEX.sub("<id>", text)
    text = _NUMBER.sub("<n>", text)
    text = " ".join(text.split())
    return text if len(text) <= _MAX_CHARS else text[: _MAX_CHARS - 1] + "…"


class LocustFailure(Exception):
    """What Locust's ``request`` event gets for a failed request: ``category: normalized``."""

    def __init__(self, category: str, message: str) -> None:
        super().__init__(f"{category}: {message}")
        self.category = category

    def __repr__(self) -> str:
        return str(self)


def for_locust(exc: LLMRequestError) -> LocustFailure:
    return LocustFailure(exc.category, normalize(exc.message))
