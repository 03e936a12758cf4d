"""The SDK clients a user builds at its start: on the process's shared TLS context, none of them
loads a trust store of its own (each load is certifi's whole store, 20-30 ms of CPU with the loop
held while the users already up are streaming), and each talks to the base URL it was given."""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from llm_users.client.sdk import import_sdk, shared_tls_context
from llm_users.protocols.backend import SDKSetup, all_backends
from llm_users.protocols.sdk_clients import GEMINI_API_VERSION, genai_client


def _bindings() -> list[Any]:
    seen: dict[tuple[str, Any], Any] = {}
    for backend in all_backends().values():
        for route in backend.routes:
            if route.sdk is not None:
                seen.setdefault((route.sdk.module, route.sdk.client), route.sdk)
    return list(seen.values())


def _setup(http_package: str, verify: bool = True) -> SDKSetup:
    return SDKSetup(base_url="http://127.0.0.1:9", api_key="sk-test",
                    httpx_kwargs={"timeout": (1.0, 1.0, 1.0, 1.0), "verify": shared_tls_context(http_package, verify)})


@pytest.fixture
def trust_store_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every load of a trust store into any SSL context, by the method that did it (the real
    methods run; this only counts)."""
    loads: list[str] = []
    for name in ("load_verify_locations", "load_default_certs", "set_default_verify_paths"):
        real = getattr(ssl.SSLContext, name)

        def counted(self: ssl.SSLContext, *a: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            loads.append(_name)
            return _real(self, *a, **kw)

        monkeypatch.setattr(ssl.SSLContext, name, counted)
    return loads


@pytest.mark.parametrize("verify", [True, False])
def test_no_sdk_client_loads_a_trust_store_of_its_own(trust_store_loads: list[str], verify: bool) -> None:
    bindings = _bindings()
    assert {b.module for b in bindings} == {"openai", "anthropic", "google.genai", "ollama"}
    for b in bindings:
        module = import_sdk(b.module)
        b.client(module, _setup(b.http_package, verify))  # the first: the process's shared context made
        trust_store_loads.clear()
        for _ in range(3):
            b.client(module, _setup(b.http_package, verify))
        assert trust_store_loads == [], (b.module, b.client.__name__, trust_store_loads)


def test_genai_client_asks_the_given_base_url_and_version() -> None:
    genai = import_sdk("google.genai")
    setup = _setup("httpx")
    client = genai_client(genai, setup)
    opts = client._api_client._http_options
    assert (opts.base_url, opts.api_version) == ("http://127.0.0.1:9", GEMINI_API_VERSION)
    assert opts.async_client_args["ssl"] is setup.httpx_kwargs["verify"]
    other = genai_client(genai, SDKSetup(base_url="http://127.0.0.1:9", api_key=None, httpx_kwargs={"verify": True},
                                         options={"api_version": "v1"}))
    assert other._api_client._http_options.api_version == "v1"  # a bool, not a context: left to the SDK
