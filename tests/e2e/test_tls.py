"""HTTPS end to end: the simulator serving TLS (``--tls-cert``/``--tls-key``) with a self-signed
certificate, and real ``locust`` runs through both clients. Trusted only with ``--llm-insecure true``:
every request streams and is counted once; without it every request is a ``tls_error`` in both
modes (the SDK's handshake failure is mapped like raw mode's), and with the preflight on (the
default) the run stops before the load with one line naming the fix. SDK users share one TLS context
per process (a context per user cost 20-50 ms of CPU on the loop per user spawned).

The locust runs are the module's pool (tests/e2e/locust_pool.py): each once, a few at a time."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_users.client.sdk import import_sdk, shared_tls_context
from llm_users.protocols.backend import all_backends
from tests.e2e.locust_pool import Pool, Run, Scenario, params, pool_in
from tests.helpers import read_records, read_summary

pytestmark = pytest.mark.slow

KEYS = {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test", "GEMINI_API_KEY": "gm-test"}


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    assert openssl, "the openssl command is needed (Debian package openssl; .ci/run installs it)"
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def _served(url: str) -> int:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(url + "/_sim/stats", context=ctx, timeout=5) as r:
        return int(json.load(r)["served"])


TRUSTED = [
    ("openai.py", "raw"), ("openai.py", "sdk"),
    ("claude.py", "sdk"), ("gemini.py", "sdk"), ("ollama.py", "sdk"),  # httpx2, google-genai's and ollama's clients
]
CLIENTS = ["raw", "sdk"]
SIM = ("--ttft-ms", "20", "--itl-ms", "5", "--output-tokens", "12")


def _needs(item: Any) -> list[str]:
    p = params(item)
    return {
        "test_https_streams_with_insecure_and_every_request_counts": lambda: [f"insecure-{p.get('locustfile')}-"
                                                                             f"{p.get('client')}"],
        "test_https_with_an_untrusted_certificate_is_a_tls_error": lambda: [f"untrusted-{p.get('client')}"],
        "test_the_preflight_names_the_fix_for_a_self_signed_certificate": lambda: ["preflight"],
    }.get(item.originalname, list)()


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, certificate: tuple[Path, Path],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """Each run once, a few at a time. A trusting run has a simulator of its own (a distinct trace
    limit: the pool shares one between equal argument lists): its served count is its run's. The
    untrusted runs and the preflight's share one, which must serve none of them. An SDK run that must
    make requests in its -t runs alone, as it did before the pool: its users start 1-3 s late on a busy
    machine (the SDK's import), later still beside other runs (not a timing bound: counts)."""
    tls = ("--tls-cert", str(certificate[0]), "--tls-key", str(certificate[1]))
    out: dict[str, Scenario] = {}
    for i, (locustfile, client) in enumerate(TRUSTED):
        # without the preflight request, each request served is a record
        args = ("-u", "3", "-r", "3", "-t", "4s", "--stop-timeout", "5", "--llm-client", client, "--llm-insecure",
                "true", "--llm-warmup", "0", "--llm-preflight", "off")
        out[f"insecure-{locustfile}-{client}"] = Scenario(locustfile, args, sim=(*tls, *SIM, "--trace-limit",
                                                                                  str(1000 + i)), env=KEYS,
                                                          alone=client == "sdk")
    untrusted = (*tls, *SIM, "--trace-limit", "999")
    for client in CLIENTS:
        args = ("-u", "2", "-r", "2", "-t", "2s", "--stop-timeout", "5", "--llm-client", client, "--llm-warmup", "0",
                "--llm-backoff", "off", "--llm-preflight", "off")
        out[f"untrusted-{client}"] = Scenario("openai.py", args, sim=untrusted, env=KEYS, alone=client == "sdk")
    out["preflight"] = Scenario("openai.py", ("-u", "1", "-t", "2s", "--llm-client", "sdk"), sim=untrusted, env=KEYS)
    yield from pool_in(request, tmp_path_factory.mktemp("tls-runs"), out, _needs, parallel=3)


def _tail(run: Run) -> str:
    return f"stdout tail:\n{run.proc.stdout[-2000:]}\nstderr tail:\n{run.proc.stderr[-3000:]}"


@pytest.mark.parametrize(("locustfile", "client"), TRUSTED)
def test_https_streams_with_insecure_and_every_request_counts(locustfile, client, runs) -> None:
    run = runs.run(f"insecure-{locustfile}-{client}")
    proc, report = run.proc, run.report
    assert run.sim_url is not None and run.sim_url.startswith("https://127.0.0.1:")
    assert proc.returncode == 0, _tail(run)
    records = read_records(report)
    assert len(records) >= 6 and all(r["status"] == "ok" and r["output_tokens"] == 12 for r in records), records[:2]
    assert all(15e6 < r["ttft_ns"] < 2e9 and r["chunks"] >= 3 for r in records), records[:1]
    assert len(records) == _served(run.sim_url)
    # each user's first request opened its connection (TCP and the TLS handshake): connect_ns, in
    # every client; the openai SDK closes its connection at [DONE], so each of its requests opens one
    opened = [r for r in records if r["connect_ns"] is not None]
    assert len(opened) >= 3 and all(0 < r["connect_ns"] < 10e9 for r in opened), [r["connect_ns"] for r in records]
    measured = [r for r in opened if not r["warmup"] and not r["cooldown"]]
    assert read_summary(report)["overall"]["connections_opened"] == len(measured)
    if (locustfile, client) == ("openai.py", "sdk"):
        assert len(opened) == len(records)
        assert "requests opened their own connection (connect p50" in proc.stdout + proc.stderr


@pytest.mark.parametrize("client", CLIENTS)
def test_https_with_an_untrusted_certificate_is_a_tls_error(client, runs) -> None:
    run = runs.run(f"untrusted-{client}")
    assert run.proc.returncode == 1, _tail(run)
    records = read_records(run.report)
    assert records and {r["error_category"] for r in records} == {"tls_error"}, records[:2]
    assert all("certificate" in r["error_message"].lower() for r in records), records[0]["error_message"]
    assert run.sim_url is not None and _served(run.sim_url) == 0  # nor any other run on this simulator


def test_the_preflight_names_the_fix_for_a_self_signed_certificate(runs) -> None:
    run = runs.run("preflight")
    proc = run.proc
    assert proc.returncode == 1, _tail(run)
    line = [x for x in proc.stderr.splitlines() if x.startswith("locust-llm:")]
    assert len(line) == 1 and "certificate verify failed" in line[0] and "--llm-insecure true" in line[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_sdk_clients_share_one_tls_context_per_setting() -> None:
    strict, again, lax = (shared_tls_context("httpx", True), shared_tls_context("httpx", True),
                          shared_tls_context("httpx", False))
    assert strict is again and strict is not lax
    assert strict.verify_mode == ssl.CERT_REQUIRED and strict.check_hostname
    assert lax.verify_mode == ssl.CERT_NONE and not lax.check_hostname
    assert shared_tls_context("httpx2", True) is not strict  # the anthropic SDK's httpx2: its own
    assert shared_tls_context("no_such_http_package", True) is True  # left to the SDK


def test_each_sdk_binding_names_the_httpx_package_its_client_is_built_on() -> None:
    """The shared context comes from that package's ``create_ssl_context``: its trust store."""
    seen = set()
    for backend in all_backends().values():
        for route in backend.routes:
            b = route.sdk
            if b is None or (b.module, b.http_package) in seen:
                continue
            seen.add((b.module, b.http_package))
            default = getattr(import_sdk(b.module), "DefaultHttpxClient", None)  # openai, anthropic
            built_on = {c.__module__.split(".")[0] for c in default.__mro__[1:-1]} if default else {"httpx"}
            assert b.http_package in built_on, (b.module, b.http_package, built_on)
    assert {m for m, _ in seen} == {"openai", "anthropic", "google.genai", "ollama"}
