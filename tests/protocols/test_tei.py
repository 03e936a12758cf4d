"""protocols/tei.py: the TEI descriptor: an embeddings server (embed by default, rerank), its
tokenizer's shape, an optional Bearer key, no SDK, and the simulator's embeddings routes."""

from __future__ import annotations

from llm_users.protocols.embed import RERANK_OPTIONS
from llm_users.protocols.tei import TEI


def test_an_embeddings_server_with_embed_first_and_no_sdk() -> None:
    assert TEI.endpoints == ("embed", "rerank") and TEI.default_endpoint == "embed"
    assert [(r.path, r.kind, r.protocol) for r in TEI.routes] == [("/embed", "embed", "tei"),
                                                                  ("/rerank", "rerank", "tei")]
    assert TEI.sdk_module is None and not TEI.discover_model and TEI.default_model == "tei"
    assert TEI.request_options == RERANK_OPTIONS  # the rerank query, a User attribute


def test_an_optional_bearer_key_and_teis_own_tokenizer_and_probe() -> None:
    assert (TEI.auth_header, TEI.api_key_env, TEI.requires_api_key) == ("Authorization", None, False)
    [tok] = TEI.tokenizers
    assert (tok.name, tok.path, tok.body("any-model", "two words")) == ("tei", "/tokenize", {"inputs": "two words"})
    assert TEI.probes == ("/info",) and TEI.overload_statuses == frozenset({429, 503})
    assert TEI.sim_routes == "llm_users.sim.routes_embed"
