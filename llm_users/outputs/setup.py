"""summary.json's ``setup`` block: what the run was asked to do, read from its configuration
(:class:`~llm_users.options.RunConfig`) so the report's header can say it once: backend, model,
load plan (the load profiles' own words, :meth:`LoadProfile.describe`, or users and spawn rate
for a plain run), prompt and output lengths or the dataset, max tokens and sampling, SLOs,
run time (warm-up and cool-down: the ``window`` block).

It reads the configuration only (never the measured results); the header adds what the server
said of itself (``environment.server``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

from llm_users.load.registry import describe, profiles


def _users_clause(options: Mapping[str, Any]) -> str:
    users, rate = options.get("num_users"), options.get("spawn_rate")
    if users is None:
        return "users as the web UI starts them"
    text = f"{users} users"
    if isinstance(rate, int | float):
        text += f", spawned at {rate:g}/s"
    return text


def _plain(v: Any) -> Any:
    """A profile's config as JSON-able values (dataclasses to dicts, tuples to lists)."""
    if is_dataclass(v) and not isinstance(v, type):
        return _plain(asdict(v))
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


def load_plan(config: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """``{"text", "kind", "profiles", "users", "spawn_rate", "run_time_s"}``: the plan in words
    (the load profiles' clauses, else users and spawn rate) and its structured parts."""
    study = getattr(config, "study", None)
    clauses = describe(study) if study is not None else {}
    run_time = getattr(config, "run_time_s", None)
    text = "; ".join(clauses.values()) if clauses else _users_clause(options)
    if run_time and not clauses.get("sweep"):
        text += f"; for {run_time:g} s"
    elif run_time:
        text += f"; {run_time:g} s in all"
    parts = {p.name: _plain(study.part(p.name)) for p in profiles() if p.name in clauses} if study else {}
    return {
        "text": text,
        "kind": next(iter(clauses), "users"),
        "profiles": parts,
        "open_loop": bool(study and study.open_loop),
        "users": options.get("num_users"),
        "spawn_rate": options.get("spawn_rate"),
        "run_time_s": run_time,
    }


def _one(values: list[Any]) -> Any:
    """One value when every User class agrees, else them all, joined."""
    seen = list(dict.fromkeys(v for v in values if v is not None))
    if not seen:
        return None
    return seen[0] if len(seen) == 1 else ", ".join(map(str, seen))


def setup_block(config: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """The ``setup`` block of summary.json (see the module docstring)."""
    classes = list(getattr(config, "user_settings", {}) or {})
    settings = [config.user_settings[c] for c in classes]
    workloads = [config.workload_for(c) for c in classes] if classes else [getattr(config, "workload", None)]
    workloads = [w for w in workloads if w is not None]
    lengths = [w.input_tokens.text for w in workloads if w.input_tokens is not None]
    outs = [w.output_tokens.text for w in workloads if w.output_tokens is not None]
    slos = {k: v / 1e6 for k, v in (getattr(config, "slos", None) or {}).items()}
    return {
        "backend": _one([getattr(c, "backend", None) for c in classes]),
        "model": _one([s.model for s in settings]),
        "user_classes": [c.__name__ for c in classes],
        "endpoint": _one([s.endpoint for s in settings]),
        "client": _one([s.client for s in settings]),
        "load_plan": load_plan(config, options),
        "input_tokens": _one(lengths),
        "output_tokens": _one(outs),
        "dataset": None if lengths else _one([w.dataset or "short (shipped)" for w in workloads]),
        "turns": _one([w.turns or None for w in workloads]),
        "prefix_tokens": _one([w.prefix_tokens or None for w in workloads]),
        "images": _one([f"{w.images} x {w.image_size[0]}x{w.image_size[1]}" if w.images else None for w in workloads]),
        "max_tokens": _one([s.sampling.max_tokens for s in settings]),
        "temperature": _one([s.sampling.temperature for s in settings]),
        "ignore_eos": _one([s.sampling.ignore_eos for s in settings]),
        "slos_ms": slos,
        "cancel": _one([s.cancel.describe() if getattr(s, "cancel", None) else None for s in settings]),
    }
