"""llm-compare's configuration diff: what each run was asked to do, read from its summary.json,
shown before any number, and the rule that refuses a verdict between runs that were not asked
the same thing (docs/report.md, "Comparing runs").

Where a value comes from, first found wins: the summary's ``setup`` block (what the run was
asked to do: ``backend``, ``model``, ``load_plan``, ``input_tokens``, ``output_tokens``,
``dataset``, ``turns``, ``prefix_tokens``, ``max_tokens``, ``temperature``, ``ignore_eos``,
``slos_ms``; a structured ``config`` block with such keys is read the same way) when the run
wrote one; else the run's options (``environment.options``, or the older ``config`` block,
which is the options); else what the run recorded (``environment.backends_models``,
``workload.source``, ``overall.slo.limits_ms``). A plain run's load is the users that ran in its
measured window (``window.users``), so two runs of the same ``-u`` whose ramps differ in the
window differ in the load row; a summary without that figure gives the users asked.

A row is *critical* when a difference in it changes what the server was asked to do: the load
(users, stages, steps, sweep, rate), the model, the input and output lengths, the max tokens,
the workload (dataset, turns, shared prefix, embeddings batch size) and the sampling. A pair of
runs that differs in a critical row gets no verdict ("not comparable") unless
``--allow-config-diff``. The others (backend, server, SLOs, duration, client mode, ...) are
shown and marked, never blocking:
comparing two servers or two versions on the same work is what llm-compare is for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: The rows a verdict needs equal (see the module docstring).
CRITICAL = ("load", "model", "input tokens", "output tokens", "max tokens", "workload", "sampling")


@dataclass(frozen=True, slots=True)
class ConfigRow:
    key: str
    values: tuple[str, ...]  # one per run, the baseline first
    critical: bool

    @property
    def differs(self) -> bool:
        return len(set(self.values)) > 1

    def differs_from_baseline(self, i: int) -> bool:
        return self.values[i] != self.values[0]


def _text(v: Any) -> str:
    if v is None or v == "" or v == []:
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_text(x)}" for k, x in v.items()) or "-"
    if isinstance(v, list | tuple):
        return ", ".join(_text(x) for x in v)
    return str(v)


def _options(summary: dict[str, Any]) -> dict[str, Any]:
    env_opts = (summary.get("environment") or {}).get("options")
    if isinstance(env_opts, dict) and env_opts:
        return env_opts
    cfg = summary.get("config")
    return cfg if isinstance(cfg, dict) and ("num_users" in cfg or any(k.startswith("llm_") for k in cfg)) else {}


_STRUCTURED = ("backend", "load_plan", "slos", "slos_ms", "input_tokens", "max_tokens")


def _structured(summary: dict[str, Any]) -> dict[str, Any]:
    """The run's own account of its configuration (``setup``), or {} for an older run."""
    for key in ("setup", "config"):
        block = summary.get(key)
        if isinstance(block, dict) and any(k in block for k in _STRUCTURED):
            return block
    return {}


def _get(cfg: dict[str, Any], key: str, options: dict[str, Any], option: str) -> Any:
    v = cfg.get(key)
    return v if v is not None else options.get(option)


def _measured_users(summary: dict[str, Any], asked: Any) -> str | None:
    """A plain run's users as they ran in its measured window (``window.users``, issue 53 item 1):
    '8 users' at its plateau, '2-8 users (8 asked)' with the ramp in the window, '5 users (8
    asked)' short of its target; None for a summary without the figure (older runs)."""
    users = (summary.get("window") or {}).get("users") or {}
    lo, hi = users.get("min"), users.get("max")
    if hi is None:
        return None
    text = f"{hi} users" if lo == hi else f"{lo}-{hi} users"
    target = users.get("target") if users.get("target") is not None else asked
    return text if lo == hi == target else f"{text} ({target} asked)"


def load_plan(summary: dict[str, Any]) -> str:
    """The load of the run in one phrase: '8 users', 'steps 8:64:8:2s (users)', 'sweep concurrency
    from 4 (target 0.95, 10 points)', '5 req/s poisson', 'trace t.jsonl x2'. A plain run's users are
    those that ran in its measured window where the summary says them, else those asked."""
    plan = _structured(summary).get("load_plan")
    if isinstance(plan, dict) and plan.get("kind") == "users" and plan.get("users") is not None:
        # the spawn rate and -t have their own rows
        return _measured_users(summary, plan["users"]) or f"{plan['users']} users"
    if isinstance(plan, dict) and plan.get("text"):
        return "; ".join(c for c in str(plan["text"]).split("; ") if not c.startswith("for ")) or "-"
    if plan:
        return _text(plan)
    o = _options(summary)
    open_loop = bool(o.get("llm_arrival") or o.get("llm_rate") or (o.get("llm_sweep") == "rate"))
    unit = "req/s" if open_loop else "users"
    if o.get("llm_sweep"):
        return (f"sweep {o['llm_sweep']} from {o.get('llm_sweep_start') or 1} (target "
                f"{o.get('llm_sweep_target') or 0.95}, {o.get('llm_sweep_points') or 12} points)")
    if o.get("llm_stages"):
        return f"stages {o['llm_stages']} ({unit})"
    if o.get("llm_steps"):
        return f"steps {o['llm_steps']} ({unit})"
    if o.get("llm_trace"):
        return f"trace {o['llm_trace']}" + (f" x{o['llm_trace_speedup']}" if o.get("llm_trace_speedup") else "")
    if o.get("llm_rate"):
        cap = f", at most {o['llm_max_inflight']} in flight" if o.get("llm_max_inflight") else ""
        return f"{o['llm_rate']} req/s {o.get('llm_arrival') or 'poisson'}{cap}"
    users = o.get("num_users")
    if users is None:
        sw, stages = summary.get("sweep"), summary.get("stages")
        if sw:
            return f"sweep {sw.get('mode')}"
        if stages:
            return "stages " + ", ".join(_text(s.get("rate", s.get("users"))) for s in stages)
        return "-"
    return f"{users} users"


def _backend(summary: dict[str, Any]) -> str:
    cfg = _structured(summary)
    if cfg.get("backend"):
        return _text(cfg["backend"])
    env = summary.get("environment") or {}
    bm = env.get("backends_models") or []
    return ", ".join(sorted({str(b.get("backend")) for b in bm})) or _text((env.get("server") or {}).get("backend"))


def _model(summary: dict[str, Any]) -> str:
    cfg = _structured(summary)
    if cfg.get("model"):
        return _text(cfg["model"])
    env = summary.get("environment") or {}
    bm = env.get("backends_models") or []
    return (", ".join(sorted({str(b.get("model")) for b in bm})) or _text(_options(summary).get("llm_model"))
            or "-")


def _lengths(summary: dict[str, Any], which: str) -> str:
    given = _get(_structured(summary), f"{which}_tokens", _options(summary), f"llm_{which}_tokens")
    if given is not None:
        return _text(given)
    src = (summary.get("workload") or {}).get("source") or {}
    return _text(src.get(f"{which}_tokens")) if src.get(f"{which}_tokens") is not None else "from the workload"


def _workload(summary: dict[str, Any]) -> str:
    o, cfg = _options(summary), _structured(summary)
    o = {**o, **{f"llm_{k}": cfg[k] for k in ("turns", "prefix_tokens") if cfg.get(k) is not None}}
    src = (summary.get("workload") or {}).get("source") or {}
    if src.get("kind") == "synthetic":
        what = f"synthetic (seed {src.get('seed')})"
    elif src:
        sha = str(src.get("sha256") or "")[:12]
        what = f"{src.get('kind', 'dataset')} {src.get('name') or src.get('path') or ''}" + (f" [{sha}]" if sha else "")
    else:
        what = _text(cfg.get("dataset") or o.get("llm_dataset") or o.get("llm_prompts"))
    extra = [f"{k}={_text(o[f'llm_{k}'])}"
             for k in ("turns", "prefix_tokens", "prefix_count", "think_time", "batch_size", "images", "image_size")
             if o.get(f"llm_{k}") is not None]
    return ", ".join([what.strip(), *extra])


def _sampling(summary: dict[str, Any]) -> str:
    cfg, o = _structured(summary), _options(summary)
    parts = []
    for k in ("temperature", "top_p", "ignore_eos"):
        v = _get(cfg, k, o, f"llm_{k}")
        if v is not None:
            parts.append(f"{k}={_text(v)}")
    return ", ".join(parts) or "server defaults"


def _slos(summary: dict[str, Any]) -> str:
    cfg = _structured(summary)
    if cfg.get("slos_ms"):
        return ", ".join(f"{k}<={v:g}ms" for k, v in cfg["slos_ms"].items())
    if cfg.get("slos"):
        return _text(cfg["slos"])
    limits = ((summary.get("overall") or {}).get("slo") or {}).get("limits_ms")
    return ", ".join(f"{k}<={v:g}ms" for k, v in limits.items()) if limits else "-"


def _server(summary: dict[str, Any]) -> str:
    env = summary.get("environment") or {}
    srv = env.get("server") or {}
    parts = [srv.get("server_header"), srv.get("version") and f"version {srv['version']}"]
    sim = _options(summary).get("llm_sim_args")
    if summary.get("simulator"):
        parts.append("embedded simulator" + (f" ({sim})" if sim else ""))
    return ", ".join(str(p) for p in parts if p) or "-"


def _duration(summary: dict[str, Any]) -> str:
    rt = _options(summary).get("run_time")
    return f"{rt:g} s" if isinstance(rt, int | float) else _text(rt)


def run_config(summary: dict[str, Any]) -> dict[str, str]:
    """The configuration rows of one run, in display order (critical ones first)."""
    o = _options(summary)
    return {
        "load": load_plan(summary),
        "model": _model(summary),
        "input tokens": _lengths(summary, "input"),
        "output tokens": _lengths(summary, "output"),
        "max tokens": _text(_get(_structured(summary), "max_tokens", o, "llm_max_tokens")),
        "workload": _workload(summary),
        "sampling": _sampling(summary),
        "backend": _backend(summary),
        "server": _server(summary),
        "SLOs": _slos(summary),
        "duration (-t)": _duration(summary),
        "spawn rate": _text(o.get("spawn_rate")),
        "client": _text(o.get("llm_client") or "raw"),
        "processes": _text(o.get("processes") or 1),
    }


def config_rows(summaries: list[dict[str, Any]]) -> list[ConfigRow]:
    """One row per configuration key, each run's value, the baseline's first."""
    configs = [run_config(s) for s in summaries]
    return [ConfigRow(k, tuple(c.get(k, "-") for c in configs), k in CRITICAL) for k in configs[0]]


def blocking(rows: list[ConfigRow], i: int) -> list[str]:
    """The critical keys in which run ``i`` differs from the baseline (empty: comparable)."""
    return [r.key for r in rows if r.critical and r.differs_from_baseline(i)]


def describe(rows: list[ConfigRow], i: int) -> str:
    """'load: 4 users vs 8 users; model: a vs b' for run ``i`` against the baseline."""
    return "; ".join(f"{r.key}: {r.values[0]} vs {r.values[i]}" for r in rows
                     if r.critical and r.differs_from_baseline(i))
