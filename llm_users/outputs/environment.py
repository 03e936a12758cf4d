"""summary.json ``environment``: what a reader needs to reproduce or trust a run.

Tool, Locust and Python versions; the command line and options with secrets removed; the
dataset (path, sha256); the embedded simulator's arguments; the server's model id and version
(response headers and the servers' own endpoints: vLLM ``GET /version`` and ``/v1/models``,
llama.cpp ``GET /props``, TGI ``GET /info``, Ollama ``GET /api/version``), asked once when the
test starts; GPU devices from the sidecar when one is scraped; the client host and CPU.

No secret reaches it: options whose names say key/token/secret/password/auth are dropped, the
values after such flags on the command line are masked, and the value of every environment
variable whose name says KEY/TOKEN/SECRET/PASSWORD is masked wherever it would appear.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import sys
import time
from importlib import metadata
from typing import Any

import orjson

from llm_users.protocols.backend import find_backend
from llm_users.redaction import redact_config

_SECRET = re.compile(r"key|token(?!s)|secret|password|passwd|auth", re.I)  # "output-tokens" is no secret
MASK = "***"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def command_line(argv: list[str]) -> list[str]:
    """``argv`` with the value of every secret-looking flag masked (``--x KEY`` and ``--x=KEY``)."""
    out: list[str] = []
    mask_next = False
    for a in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        name = a.split("=", 1)[0]
        if a.startswith("-") and " " not in name and _SECRET.search(name) and not name.endswith("-env"):
            if "=" in a:
                out.append(a.split("=", 1)[0] + "=" + MASK)
            else:
                out.append(a)
                mask_next = True
            continue
        out.append(a)
    return out


def secret_values() -> list[str]:
    return [v for k, v in os.environ.items() if _SECRET.search(k) and v and len(v) >= 4]


def scrub(obj: Any) -> Any:
    """The same structure with every secret environment value replaced by ``***``."""
    secrets = secret_values()
    if not secrets:
        return obj
    text = orjson.dumps(obj).decode()
    for s in sorted(secrets, key=len, reverse=True):
        text = text.replace(orjson.dumps(s).decode()[1:-1], MASK)
    return orjson.loads(text)


def os_platform() -> str:
    """As ``platform.platform()`` words it (Linux-6.1.0-x86_64-with-glibc2.36) without the
    ``uname -p`` child process its processor field runs (0.3-2 s at every run's end)."""
    u = os.uname()
    libc = "".join(platform.libc_ver()) if u.sysname == "Linux" else ""
    return "-".join(x for x in (u.sysname, u.release, u.machine, f"with-{libc}" if libc else "") if x)


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _get_json(base: str, path: str, timeout: float = 3.0) -> tuple[Any, dict[str, str]]:
    import urllib.request

    req = urllib.request.Request(base.rstrip("/") + path, headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - the run's own target
        return orjson.loads(r.read() or b"null"), {k.lower(): v for k, v in r.headers.items()}


def server_info(host: str | None, backend: str | None) -> dict[str, Any]:
    """Model id and version from the server's own endpoints (the descriptor's ``probes``; best
    effort, a few seconds at most)."""
    info: dict[str, Any] = {"host": host, "backend": backend}
    descriptor = find_backend(backend)
    if not host or descriptor is None or not descriptor.probes:
        return info
    base = host[:-3] if host.rstrip("/").endswith("/v1") else host
    for path in descriptor.probes:
        try:
            data, headers = _get_json(base, path)
        except Exception as e:  # noqa: BLE001 - a server without the endpoint is normal
            info.setdefault("errors", {})[path] = str(e)[:200]
            continue
        if headers.get("server"):
            info["server_header"] = headers["server"]
        if path in ("/version", "/api/version") and isinstance(data, dict):
            info["version"] = data.get("version")
        elif path == "/v1/models" and isinstance(data, dict) and data.get("data"):
            info["model_id"] = data["data"][0].get("id")
            if data["data"][0].get("max_model_len"):
                info["max_model_len"] = data["data"][0]["max_model_len"]
        elif path == "/props" and isinstance(data, dict):
            if data.get("build_info"):
                info.setdefault("version", data["build_info"])
            if data.get("model_path"):
                info["model_file"] = os.path.basename(str(data["model_path"]))
        elif path == "/info" and isinstance(data, dict):
            info["model_id"] = data.get("model_id")
            info["version"] = data.get("version")
            if data.get("sha"):
                info["sha"] = data["sha"]
    return info


def build(environment: Any, run: Any, summary: dict[str, Any], server: dict[str, Any]) -> dict[str, Any]:
    workload_block = summary.get("workload") or {}
    source = workload_block.get("source") or {}
    dataset = None
    src = source.get("turn_source", source)
    if src.get("path"):
        dataset = {"name": src.get("name"), "path": src.get("path"), "sha256": src.get("sha256"),
                   "format": src.get("format")}
    config = getattr(run, "config", None)
    sim_args = getattr(config, "sim_args", None) if config is not None else None
    labels = sorted(set(getattr(run.collector, "labels", {}).values()))
    env = {
        "tool": {"name": "locust-llm", "version": _version("locust-llm")},
        "locust_version": _version("locust"),
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation()},
        "command_line": command_line(list(sys.argv)),
        "options": redact_config(run.current_options),
        "dataset": dataset,
        "simulator": {"embedded": True, "args": sim_args or ""} if summary.get("simulator") else None,
        "server": server,
        "backends_models": [{"backend": b, "model": m} for b, m in labels] or None,
        "gpu": (summary.get("gpu") or {}).get("devices") or None,
        "client": {"hostname": socket.gethostname(), "platform": os_platform(), "cpu": cpu_model(),
                   "cpus": os.cpu_count()},
        "generated_at": time.time(),
    }
    return scrub(env)


def attach(environment: Any, run: Any) -> None:
    """Master or local runner: ask the server at test start, fill ``environment`` at the end
    (after every other section, so the GPU devices are there)."""
    if getattr(run, "collector", None) is None:
        return
    server: dict[str, Any] = {}

    def on_start(**_: Any) -> None:
        import gevent

        def probe() -> None:
            user_cls = next((u for u in environment.user_classes or [] if hasattr(u, "backend")), None)
            server.update(server_info(environment.host, getattr(user_cls, "backend", None)))

        gevent.spawn(probe)

    environment.events.test_start.add_listener(on_start)
    run.summary_hooks.append(lambda summary: summary.__setitem__("environment",
                                                                  build(environment, run, summary, dict(server))))
