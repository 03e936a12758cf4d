"""Which route modules the simulator serves: every built-in backend's (its descriptor's
``sim_routes``), then those ``--routes`` adds (a backend declared outside the package). A route
module defines ``add_routes(app)``; the simulator's own routes (ground truth, tokenizers,
/metrics) are added by :func:`llm_users.sim.app.build_app` around these.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from llm_users.protocols.backend import all_backends
from llm_users.sim.config import SimConfig


def route_module_names(cfg: SimConfig) -> list[str]:
    """The modules' names, each once, in the order their routes are added."""
    only = set(cfg.only_backends)
    unknown = only - set(all_backends())
    if unknown:
        raise ImportError(f"--only-backends: no backend named {', '.join(sorted(unknown))} "
                          f"(there are {', '.join(all_backends())})")
    names = [b.sim_routes for n, b in all_backends().items() if b.sim_routes and (not only or n in only)]
    return list(dict.fromkeys([*names, *cfg.routes]))


def route_modules(cfg: SimConfig) -> list[ModuleType]:
    """The route modules, imported; ImportError naming the one that cannot be (or lacks add_routes)."""
    out = []
    for name in route_module_names(cfg):
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            raise ImportError(f"--routes: cannot import route module {name!r}: {e}") from e
        if not callable(getattr(module, "add_routes", None)):
            raise ImportError(f"--routes: route module {name!r} has no add_routes(app)")
        out.append(module)
    return out
