"""The one place the bench scripts import llm_users from: every name they use, and the module
it lives in (``_WHERE``). When a module moves inside llm_users, its line here is the only one to
change. The locustfiles the bench runs (``bench/ours_locustfile.py``) import llm_users as a
user's locustfile does, not from here.

Each name is imported when first asked for (``from bench.lib.llm_imports import LagTrace``), so
a script loads only the llm_users modules it uses, when it uses them."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llm_users.client.request_state import RequestState
    from llm_users.client.stream import _Exchange
    from llm_users.durations import parse_duration_s
    from llm_users.health.lagtrace import OFF_CPU, LagTrace
    from llm_users.metrics import RequestRecord
    from llm_users.protocols.ollama import OllamaStreamParser
    from llm_users.protocols.openai import OpenAIStreamParser
    from llm_users.sim.launcher import start_simulator

_WHERE = {
    "OFF_CPU": "llm_users.health.lagtrace",
    "parse_duration_s": "llm_users.durations",
    "LagTrace": "llm_users.health.lagtrace",
    "RequestRecord": "llm_users.metrics",
    "OllamaStreamParser": "llm_users.protocols.ollama",
    "OpenAIStreamParser": "llm_users.protocols.openai",
    "RequestState": "llm_users.client.request_state",
    "start_simulator": "llm_users.sim.launcher",
    "_Exchange": "llm_users.client.stream",
}

__all__ = ["OFF_CPU", "LagTrace", "OllamaStreamParser", "OpenAIStreamParser", "RequestRecord", "RequestState",
           "_Exchange", "parse_duration_s", "start_simulator"]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # asked once
    return value
