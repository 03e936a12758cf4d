"""sim/state.py: the simulator's shared state: the API key in any of the headers the dialects use
(or Gemini's ?key=), the cold start charged once per TCP connection, the prompt count, the
embeddings cost and the sequence numbers; and admit(), every generation route's prelude."""

from __future__ import annotations

from aiohttp.test_utils import make_mocked_request

from llm_users.sim.config import SimConfig
from llm_users.sim.state import SimState
from tests.sim.inproc import exchange


def _request(path: str = "/v1/chat/completions", headers: dict[str, str] | None = None, transport: object = None):
    extra = {} if transport is None else {"transport": transport}
    return make_mocked_request("POST", path, headers=headers or {}, **extra)


def test_the_key_in_any_dialects_header_or_geminis_query() -> None:
    sim = SimState(SimConfig(require_api_key="sekrit"))
    for headers in ({"Authorization": "Bearer sekrit"}, {"Authorization": "bearer  sekrit "}, {"x-api-key": "sekrit"},
                    {"x-goog-api-key": "sekrit"}):
        assert sim.authorized(_request(headers=headers)), headers
    assert sim.authorized(_request("/v1beta/models/g:generateContent?key=sekrit"))
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "sekrit"}, {"x-api-key": "Sekrit"}):
        assert not sim.authorized(_request(headers=headers)), headers
    assert SimState(SimConfig()).authorized(_request())  # no key required


class Transport:
    """A connection's transport, as the state sees it: something it can hold a weak reference to."""

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default


def test_the_cold_start_is_charged_once_per_connection() -> None:
    sim = SimState(SimConfig(cold_start_ms=30.0))
    first, second = Transport(), Transport()
    assert sim.cold_start(_request(transport=first)) and not sim.cold_start(_request(transport=first))
    assert sim.cold_start(_request(transport=second))
    assert sim.cold_ns == 30_000_000
    assert not SimState(SimConfig()).cold_start(_request(transport=Transport()))  # no --cold-start-ms: never


def test_counts_costs_and_sequence_numbers() -> None:
    sim = SimState(SimConfig(embed_base_ms=5.0, embed_token_ms=0.01, itl_slope_ms=0.25, stall_ms=200.0,
                             prefill_us_per_token=2.0))
    assert sim.count_prompt("three short words") == 3 and sim.count_prompt("") == 1  # words, at least one
    assert sim.token_ids("anything") is None  # no --tokenizer: the toy ids
    assert sim.embed_cost_ns(1000) == 15_000_000  # 5 ms + 0.01 ms x 1000 tokens
    assert (sim.slope_ns, sim.stall_ns, sim.prefill_ns_per_token) == (250_000, 200_000_000, 2000.0)
    assert [sim.next_seq() for _ in range(3)] == [1, 2, 3]
    assert sim.prefix_cache is None and SimState(SimConfig(prefix_cache_block=16)).prefix_cache is not None


def test_admit_checks_the_key_before_it_reads_the_body() -> None:
    no_key, bad_json, not_object, ok = exchange(
        ("POST", "/v1/chat/completions", b"{not json"),
        ("POST", "/v1/chat/completions", b"{not json", {"x-api-key": "k"}),
        ("POST", "/v1/chat/completions", b"[1, 2]", {"x-api-key": "k"}),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, {"x-api-key": "k"}),
        require_api_key="k")
    assert no_key.status == 401  # not 400: the key is checked first
    assert bad_json.status == 400 and "request body is not valid JSON" in bad_json.json()["error"]["message"]
    assert not_object.status == 400 and not_object.json()["error"]["message"] == "request body must be a JSON object"
    assert ok.status == 200
