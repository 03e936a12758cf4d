"""Hugging Face Text Embeddings Inference (TEI): ``POST /embed`` and ``POST /rerank``.

An embeddings server, no chat: its routes are the non-streaming kinds of
:mod:`~llm_users.protocols.embed` (``embed`` the default, ``rerank``). TEI's answers carry no
token counts (its ``x-compute-tokens`` header does, which the parsers do not see), so a record's
input tokens come from the workload's target where it has one. Its ``/tokenize`` takes
``{"inputs": text}`` and answers a list of token lists. Auth: an optional Bearer key (TEI's
``--api-key``). No official SDK.
"""

from __future__ import annotations

from llm_users.protocols.backend import Backend, BackendDocs, Tokenizer
from llm_users.protocols.embed import RERANK_OPTIONS, tei_routes

TEI = Backend(
    name="tei",
    routes=tei_routes(),
    auth_header="Authorization",
    api_key_env=None,
    default_model="tei",
    overload_statuses=frozenset({429, 503}),
    request_options=RERANK_OPTIONS,
    tokenizers=(Tokenizer("tei", "/tokenize", lambda model, text: {"inputs": text}),),
    probes=("/info",),
    sim_routes="llm_users.sim.routes_embed",
    docs=BackendDocs(
        locustfile="tei.py", user="TEIEmbedUser", auth_env="none (optional `--llm-api-key-env`)",
        sampling="- (`--llm-batch-size` inputs per request)", tokens="the workload's target (TEI's body has none)",
        cannot="no token counts in the answer; no SDK mode",
    ),
)
