"""Issue 26: a seventh backend is one protocol module, one locustfile and one simulator route
module, nothing else. A toy dialect (NDJSON lines ``{"t": "text"}`` ... ``{"done": true,
"usage": {...}}`` on ``POST /toy/generate``) is written to a temporary directory and run end to
end in a real locust process, raw mode, against the simulator the plugin auto-starts with the
toy's routes (``llm-sim --routes``, from the descriptor's ``sim_routes``)."""

from __future__ import annotations

import json
import subprocess
from itertools import accumulate
from pathlib import Path

import pytest

from llm_users.metrics import Distribution
from tests.helpers import LOCUST, ROOT, read_records, read_summary

pytestmark = pytest.mark.slow

PROTOCOL = '''
"""Toy dialect: POST /toy/generate {"model", "prompt", "max"}; NDJSON {"t": text} lines, then
{"done": true, "usage": {"in": N, "out": M}}; an {"error": ...} line mid-stream."""

import orjson

from llm_users.errors import ProtocolError
from llm_users.protocols.backend import Backend, RequestSpec, Route, register
from llm_users.protocols.base import Content, Finish, HTTPRequest, ServerError, Usage, json_post


def build(spec: RequestSpec) -> HTTPRequest:
    prompt = "\\n".join(str(m["content"]) for m in spec.messages)
    body = {"model": spec.model, "prompt": prompt, "max": spec.sampling.max_tokens}
    return json_post("/toy/generate", body, accept="application/x-ndjson")


class ToyParser:
    def __init__(self) -> None:
        self.complete = False
        self.frames = 0
        self._buf = b""

    def feed(self, data: bytes) -> list:
        *lines, self._buf = (self._buf + data).split(b"\\n")
        return [e for line in lines if line.strip() for e in self._line(line)]

    def close(self) -> list:
        rest, self._buf = self._buf, b""
        return self._line(rest) if rest.strip() else []

    def _line(self, line: bytes) -> list:
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise ProtocolError(f"toy line is not JSON: {line[:80]!r}") from None
        return self.payload(obj)

    def payload(self, obj: dict, name: bytes | None = None) -> list:
        self.frames += 1
        if "error" in obj:
            return [ServerError(str(obj["error"]))]
        if obj.get("done"):
            self.complete = True
            usage = obj["usage"]
            return [Usage(input_tokens=usage["in"], output_tokens=usage["out"]), Finish("done")]
        return [Content(obj["t"])] if obj.get("t") else []


TOY = register(Backend(
    name="toy",
    routes=(Route("generate", "/toy/generate", build, ToyParser, protocol="toy"),),
    auth_header=None,
    api_key_env=None,
    default_model="toy-model",
    sim_routes="toy_sim_routes",
))
'''

SIM_ROUTES = '''
"""The toy dialect in the simulator: POST /toy/generate, timed by the shared lifecycle."""

import orjson
from aiohttp import web

from llm_users.sim.base import Dialect, Renderer
from llm_users.sim.lifecycle import new_job, serve
from llm_users.sim.state import admit


class ToyDialect(Dialect):
    name = "toy"


DIALECT = ToyDialect()


class ToyRenderer(Renderer):
    content_type = "application/x-ndjson"

    def chunk(self, i: int, j: int, last: bool) -> bytes:
        line = orjson.dumps({"t": self.job.text(i, j).decode()}) + b"\\n"
        if last:
            p, c, _ = self.job.reported()
            line += orjson.dumps({"done": True, "usage": {"in": p, "out": c}}) + b"\\n"
        return line

    def error_frame(self) -> bytes:
        return b'{"error": "simulated midstream_error fault"}\\n'

    def malformed(self) -> bytes:
        return b'{"t": \\n'

    def body(self) -> bytes:
        p, c, _ = self.job.reported()
        return orjson.dumps({"t": self.job.text().decode(), "done": True, "usage": {"in": p, "out": c}})


async def generate(request: web.Request) -> web.StreamResponse:
    admitted = await admit(request, DIALECT)
    if isinstance(admitted, web.Response):
        return admitted
    arrival, sim, body = admitted
    job = new_job(sim, protocol="toy", route="/toy/generate", model=str(body.get("model") or sim.cfg.model),
                  prompt=str(body.get("prompt") or ""), max_tokens=int(body.get("max") or 512), stream=True,
                  arrival_ns=arrival)
    return await serve(sim, request, job, ToyRenderer(job), DIALECT)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/toy/generate", generate)
'''

LOCUSTFILE = '''
"""Load-test the toy backend (the embedded simulator serves it when no --host is given)."""

from locust import events

import toy_protocol
from llm_users import plugin
from llm_users.users import LLMUser

plugin.register(events)


class Toy(LLMUser):
    descriptor = toy_protocol.TOY
'''

TTFT_MS, ITL_MS, OUTPUT_TOKENS = 50, 5, 16


@pytest.mark.serial  # its first stamp before the simulator's last write (a 75 ms window): run alone (r81 on CI load: 101 ms)
def test_a_toy_seventh_backend_runs_end_to_end(tmp_path: Path) -> None:
    toy = tmp_path / "toy"
    toy.mkdir()
    (toy / "toy_protocol.py").write_text(PROTOCOL)
    (toy / "toy_sim_routes.py").write_text(SIM_ROUTES)
    (toy / "locustfile.py").write_text(LOCUSTFILE)
    assert sorted(p.name for p in toy.iterdir()) == ["locustfile.py", "toy_protocol.py", "toy_sim_routes.py"]
    report = tmp_path / "r"
    trace = tmp_path / "sim-trace.jsonl"  # what the embedded simulator wrote, and when, per request
    cmd = [LOCUST, "-f", str(toy / "locustfile.py"), "--headless", "--only-summary", "--loglevel", "WARNING",
           "-u", "4", "-r", "4", "-t", "6s", "--stop-timeout", "10", "--llm-report", str(report),
           "--llm-sim-args", f"--ttft-ms {TTFT_MS} --itl-ms {ITL_MS} --output-tokens {OUTPUT_TOKENS} "
                             f"--trace-file {trace}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [ln for ln in proc.stdout.splitlines() if "started the embedded simulator" in ln]
    assert len(said) == 1, proc.stdout[-2000:]

    records = read_records(report)
    assert len(records) >= 12
    assert not [r for r in records if r["status"] != "ok"], records[:2]
    assert {(r["backend"], r["model"], r["name"]) for r in records} == {("toy", "toy-model", "/toy/generate")}
    assert all(r["tokens_source"] == "usage" and r["output_tokens"] == OUTPUT_TOKENS for r in records), records[:2]
    assert all(r["input_tokens"] and r["input_tokens"] > 0 for r in records)
    measured = [r for r in records if not r["warmup"] and not r["cooldown"]]
    assert measured
    assert all(len(r["itl_ns"]) == OUTPUT_TOKENS - 1 for r in measured)  # one token per chunk
    # the toy's chunks timed as they arrived, judged against the simulator's trace on the one
    # monotonic clock both stamp with (how close the stamps come is tests/e2e/test_fidelity.py's):
    # none before the simulator wrote it, the first before it wrote the last (a parser that waited
    # for the end would stamp them all after it), TTFT at least the simulator's 50 ms
    wrote = {t["request_id"]: [c[0] for c in t["chunks"]] for t in map(json.loads, trace.read_text().splitlines())}
    for r in measured:
        stamped = list(accumulate(r["itl_ns"], initial=r["t0_ns"] + r["ttft_ns"]))
        w = wrote[r["request_id"]]
        assert len(w) == len(stamped) == OUTPUT_TOKENS
        assert all(ours >= theirs for ours, theirs in zip(stamped, w, strict=True)), (stamped, w)
        assert stamped[0] < w[-1], (stamped[0] - w[0], w[-1] - w[0])
    ttft = [r["ttft_ns"] / 1e6 for r in measured]
    assert min(ttft) >= TTFT_MS - 1, sorted(ttft)[:: max(1, len(ttft) // 10)]

    summary = read_summary(report)
    overall = summary["overall"]
    assert overall["requests"] > 0 and overall["failures"] == 0
    assert overall["output_tokens"] == OUTPUT_TOKENS * overall["successes"]
    # the summary's figures are the records' own
    ttft_d, itl_d = Distribution(), Distribution()
    for r in measured:
        ttft_d.add(r["ttft_ns"])
        itl_d.add_many(r["itl_ns"])
    assert overall["ttft"]["count"] == len(measured) and overall["ttft"]["p50"] == ttft_d.summary_ms()["p50"]
    assert overall["itl"]["count"] == len(measured) * (OUTPUT_TOKENS - 1)
    assert overall["itl"]["p50"] == itl_d.summary_ms()["p50"]
    env = summary["environment"]  # the per-backend block names the toy backend, and its endpoint
    assert env["backends_models"] == [{"backend": "toy", "model": "toy-model"}]
    assert env["server"]["backend"] == "toy"
    toy_block = summary["by_name"]["/toy/generate"]
    assert list(summary["by_name"]) == ["/toy/generate"] and toy_block["failures"] == 0
    assert toy_block["output_tokens"] == OUTPUT_TOKENS * toy_block["successes"] > 0
