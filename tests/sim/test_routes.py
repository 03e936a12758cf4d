"""sim/routes.py: the simulator serves each built-in descriptor's route module, and the modules
``--routes`` names (a backend declared outside the package), each once."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_users.protocols.backend import builtin_backends
from llm_users.sim.app import build_app
from llm_users.sim.cli import config_from_args
from llm_users.sim.config import SimConfig
from llm_users.sim.routes import route_module_names

EXTRA = '''
from aiohttp import web


async def ping(request: web.Request) -> web.Response:
    return web.json_response({"pong": True})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/x/ping", ping)
'''


def _paths(cfg: SimConfig) -> set[str]:
    return {r.resource.canonical for r in build_app(cfg).router.routes() if r.resource is not None}


def test_the_builtin_descriptors_name_the_route_modules() -> None:
    names = route_module_names(SimConfig())
    assert names == list(dict.fromkeys(b.sim_routes for b in builtin_backends().values()))
    assert names == ["llm_users.sim.routes_openai", "llm_users.sim.routes_tgi", "llm_users.sim.routes_ollama",
                     "llm_users.sim.routes_anthropic", "llm_users.sim.routes_gemini", "llm_users.sim.routes_embed"]
    paths = _paths(SimConfig())
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/models", "/generate_stream", "/generate", "/",
                 "/info", "/api/chat", "/api/generate", "/api/tags", "/api/version", "/v1/messages",
                 "/tokenize", "/extras/tokenize", "/version", "/metrics", "/health", "/_sim/trace",
                 "/v1/embeddings", "/v1/rerank", "/rerank", "/api/embed", "/embed"):
        assert path in paths, path


def test_routes_option_adds_modules_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x_routes.py").write_text(EXTRA)
    (tmp_path / "no_routes.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg, _ = config_from_args(["--routes", "x_routes,llm_users.sim.routes_tgi", "--routes", "x_routes"])
    assert cfg.routes == ("x_routes", "llm_users.sim.routes_tgi")
    assert route_module_names(cfg)[-1] == "x_routes" and route_module_names(cfg).count("llm_users.sim.routes_tgi") == 1
    assert "/x/ping" in _paths(cfg) and "/x/ping" not in _paths(SimConfig())
    assert config_from_args([])[0].routes == ()
    for bad, said in (("nowhere_routes", "cannot import route module 'nowhere_routes'"),
                      ("no_routes", "route module 'no_routes' has no add_routes(app)")):
        with pytest.raises(SystemExit):
            config_from_args(["--routes", bad])
        assert f"--routes: {said}" in capsys.readouterr().err
    with pytest.raises(ValueError, match="routes must be module names"):
        SimConfig(routes=("not a module",))



def test_only_backends_serves_one_dialect_and_refuses_an_unknown_name() -> None:
    """Issue 29: ``--only-backends tgi`` is a server that speaks TGI only (the preflight's
    "wrong locustfile" case); a name that is no backend is refused naming the ones there are."""
    import pytest

    from llm_users.sim.cli import config_from_args
    from llm_users.sim.routes import route_module_names

    cfg, _ = config_from_args(["--only-backends", "tgi"])
    assert route_module_names(cfg) == ["llm_users.sim.routes_tgi"]
    both, _ = config_from_args(["--only-backends", "vllm,ollama"])
    assert route_module_names(both) == ["llm_users.sim.routes_openai", "llm_users.sim.routes_ollama"]
    with pytest.raises(SystemExit):
        config_from_args(["--only-backends", "nope"])
