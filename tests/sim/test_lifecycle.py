"""sim/lifecycle.py: one request's life, the same for every route: the job planned (its length,
how it ends, its prompt count, what --ignore-max-tokens, --answer-model, --reasoning-tokens,
--usage-zero and the prefix cache change), then served: a fault header refused or obeyed, the
outcome counted and the ground-truth record closed (completed only for a whole, valid answer)."""

from __future__ import annotations

from llm_users.sim.config import SimConfig
from llm_users.sim.images import Images
from llm_users.sim.lifecycle import new_job
from llm_users.sim.state import SimState
from llm_users.sim.text import TokenSource
from tests.sim.inproc import exchange


def _job(cfg: SimConfig, max_tokens: int = 8, **kw):
    kw = {"protocol": "openai", "route": "/v1/chat/completions", "model": "asked", "prompt": "a b c",
          "max_tokens": max_tokens, "stream": True, "arrival_ns": 7, **kw}
    return new_job(SimState(cfg), **kw)


def test_the_answers_length_and_how_it_ends() -> None:
    full = _job(SimConfig())  # no --output-tokens: as many as the request allows
    assert (full.n, full.finish, full.input_tokens, full.model, full.k, full.seq) == (8, "length", 3, "asked", 1, 1)
    assert full.indices == TokenSource(0).indices("a b c", 8)  # the seed's tokens for this prompt
    short = _job(SimConfig(output_tokens=5))
    assert (short.n, short.finish) == (5, "stop")  # the model stopped before the max
    capped = _job(SimConfig(output_tokens=50))
    assert (capped.n, capped.finish) == (8, "length")
    ignoring = _job(SimConfig(ignore_max_tokens=20))  # a server that ignores the request's field
    assert (ignoring.max_tokens, ignoring.n) == (20, 20)
    assert _job(SimConfig(tokens_per_chunk=3)).k == 3 and _job(SimConfig(), k=4).k == 4


def test_the_prompt_count_and_what_the_settings_change() -> None:
    cfg = SimConfig(template_tokens=5, answer_model="served", reasoning_tokens=3, usage_zero="output")
    job = _job(cfg, messages=2)
    assert job.input_tokens == 3 + 2 * 5 and job.model == "served" and job.reasoning == 3
    assert (job.zero_input, job.zero_output) == (False, True)
    assert job.reported() == (13, 0, 0)  # what the answer says; the job keeps the truth
    assert _job(SimConfig(reasoning_tokens=30)).reasoning == 8  # at most the answer
    assert _job(SimConfig(reasoning_tokens=3, reasoning_stream="summary")).shown == "summary"  # the renderer applies it
    assert _job(SimConfig(), input_tokens=42).input_tokens == 42  # a prompt of token ids: its own count
    state = SimState(SimConfig())
    job = new_job(state, protocol="openai", route="/r", model="m", prompt="look", max_tokens=2, stream=False,
                  arrival_ns=0, images=Images(count=2, tokens=600))
    assert (job.input_tokens, job.images, job.image_tokens) == (601, 2, 600)
    assert (state.stats.images, state.stats.image_tokens) == (2, 600)


def test_the_prefix_cache_finds_what_an_earlier_prompt_left() -> None:
    state = SimState(SimConfig(prefix_cache_block=2))
    kw = {"protocol": "openai", "route": "/r", "model": "m", "max_tokens": 2, "stream": True, "arrival_ns": 0}
    assert new_job(state, prompt="a b c d e", **kw).cached_tokens == 0
    assert new_job(state, prompt="a b c d x y", **kw).cached_tokens == 4  # two whole blocks in common
    assert new_job(state, prompt="a b c d x y", **kw).seq == 3


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "stream": True}


def test_a_fault_header_is_refused_or_obeyed_and_the_outcome_counted() -> None:
    refused, bad, malformed, ok, trace, stats = exchange(
        ("POST", "/v1/chat/completions", CHAT, {"X-Request-Id": "r429", "X-Sim-Fault": "http_429"}),
        ("POST", "/v1/chat/completions", CHAT, {"X-Request-Id": "rbad", "X-Sim-Fault": "explode"}),
        ("POST", "/v1/chat/completions", CHAT, {"X-Request-Id": "rmal", "X-Sim-Fault": "malformed;after=1"}),
        ("POST", "/v1/chat/completions", CHAT, {"X-Request-Id": "rok"}),
        ("GET", "/_sim/trace", None),
        ("GET", "/_sim/stats", None))
    assert refused.status == 429 and refused.headers["Retry-After"] == "1"
    assert bad.status == 400 and "X-Sim-Fault: unknown kind 'explode'" in bad.json()["error"]["message"]
    assert malformed.status == 200 and ok.status == 200
    recs = {r["request_id"]: r for r in trace.json()}
    assert (recs["r429"]["outcome"], recs["r429"]["status"], recs["r429"]["fault"]) == ("refused", 429, "http_429")
    assert recs["rbad"]["outcome"] == "refused" and recs["rbad"]["status"] == 400
    assert recs["rmal"]["outcome"] == "ok" and not recs["rmal"]["completed"]  # every byte came, one line spoilt
    assert recs["rok"]["completed"] and recs["rok"]["output_tokens"] == 4 and recs["rok"]["finish_reason"] == "length"
    s = stats.json()
    assert (s["started"], s["served"], s["errors"], s["faults"]) == (4, 1, 2, {"http_429": 1, "malformed": 1})
