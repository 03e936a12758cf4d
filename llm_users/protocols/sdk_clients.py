"""The SDK clients of ``--llm-client sdk`` mode that several routes share (chat, completions,
embeddings): openai's, ollama's and google-genai's, each made on the httpx(-compatible) client
that carries our time limits and stamps (``SDKSetup.httpx_kwargs``). No SDK import here: the
SDK module comes in as an argument."""

from __future__ import annotations

import importlib
import ssl
from typing import Any

from llm_users.protocols.backend import SDKSetup

#: the Gemini API version the SDK's client asks for unless the user's ``api_version`` says
GEMINI_API_VERSION = "v1beta"


def openai_client(openai: Any, setup: SDKSetup) -> Any:
    http = openai.DefaultHttpxClient(**setup.httpx_kwargs)
    return openai.OpenAI(base_url=setup.base_url + "/v1", api_key=setup.api_key or "EMPTY", max_retries=0,
                         timeout=http.timeout, http_client=http)


def ollama_client(ollama: Any, setup: SDKSetup) -> Any:
    headers = {"Authorization": f"Bearer {setup.api_key}"} if setup.api_key else None
    return ollama.Client(host=setup.base_url, headers=headers, **setup.httpx_kwargs)


def genai_client(genai: Any, setup: SDKSetup) -> Any:
    """A google-genai client on our httpx client. The process's shared TLS context goes to the
    SDK's other transports too (its async httpx client, aiohttp, websockets): left to itself the
    SDK builds a context for each, loading certifi's store three times, about 70 ms of CPU per
    user spawned with the loop held (google-genai 3.6.1; 0.7 ms with the context handed in)."""
    types = importlib.import_module(genai.__name__ + ".types")
    httpx = importlib.import_module("httpx")
    tls = setup.httpx_kwargs.get("verify")
    shared = ({"client_args": {"verify": tls}, "async_client_args": {"verify": tls, "ssl": tls}}
              if isinstance(tls, ssl.SSLContext) else {})
    opts = types.HttpOptions(base_url=setup.base_url, httpx_client=httpx.Client(**setup.httpx_kwargs),
                             api_version=setup.options.get("api_version", GEMINI_API_VERSION), **shared)
    return genai.Client(api_key=setup.api_key or "EMPTY", http_options=opts)
