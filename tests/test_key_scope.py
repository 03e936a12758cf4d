"""Where an API key may go (llm_users/key_scope.py): the hosts given at start and those allowed
with --llm-api-key-hosts, matched by scheme, host and port; and the Settings that carry it."""

from __future__ import annotations

from argparse import Namespace

import pytest

from llm_users.errors import ConfigError
from llm_users.key_scope import KeyScope, add_host, fix_at_start, parse_entry, scope_of, withheld_line
from llm_users.settings import settings_for
from locustfiles.vllm import VLLMUser


def test_a_url_entry_is_its_origin_and_a_host_entry_any_scheme() -> None:
    scope = KeyScope.parse("https://api.openai.com, gpu-1:8000,Inference.Local")
    assert scope.allows("https://api.openai.com/v1") and scope.allows("https://API.openai.com:443")
    assert not scope.allows("http://api.openai.com")  # the scheme the entry named
    assert not scope.allows("https://api.openai.com:8443")
    assert scope.allows("http://gpu-1:8000") and scope.allows("https://gpu-1:8000")
    assert not scope.allows("http://gpu-1:8001") and not scope.allows("http://gpu-10:8000")
    assert scope.allows("http://inference.local:1234") and scope.allows("https://inference.local")
    assert not scope.allows("http://inference.local.evil.example")
    assert not scope.allows(None) and not scope.allows("") and not scope.allows("ftp://gpu-1:8000")


def test_the_empty_scope_allows_nothing_and_star_everything() -> None:
    assert not KeyScope.parse("").allows("http://127.0.0.1:8000")
    assert KeyScope.parse("*").allows("http://anywhere:1") and KeyScope.parse("*").text() == "*"


@pytest.mark.parametrize("bad", ["http://", "ftp://x", "host/path", "user@host", "host:99999", "http://h:x"])
def test_a_bad_entry_is_one_line_naming_the_option(bad: str) -> None:
    with pytest.raises(ConfigError, match="^--llm-api-key-hosts: "):
        parse_entry(bad)


def test_the_text_reads_back_as_the_same_scope() -> None:
    scope = KeyScope.parse("http://127.0.0.1:8000,https://[::1]:9000,h:1,plain,https://x.example")
    assert scope.text() == "http://127.0.0.1:8000,https://[::1]:9000,h:1,plain,https://x.example"
    assert KeyScope.parse(scope.text()) == scope


def test_fixed_at_start_from_the_host_the_classes_and_the_option() -> None:
    class Own:
        host = "http://own-host:7000/base"

    options = Namespace(llm_api_key_hosts="api.example")
    fix_at_start(options, "http://127.0.0.1:8000", [Own, VLLMUser])
    assert options.llm_api_key_hosts == "api.example,http://127.0.0.1:8000,http://own-host:7000"
    add_host(options, "http://127.0.0.1:9999")
    scope = scope_of(options)
    assert scope is not None and scope.allows("http://127.0.0.1:9999") and not scope.allows("http://127.0.0.2:8000")
    empty = Namespace(llm_api_key_hosts=None)
    fix_at_start(empty, None, [])
    assert empty.llm_api_key_hosts == "" and scope_of(empty) == KeyScope()  # fixed: nothing allowed


def test_settings_send_the_key_only_inside_their_scope(monkeypatch) -> None:
    monkeypatch.setenv("SCOPE_TEST_KEY", "sk-scope-test-0123456789")
    given = dict(llm_api_key_env="SCOPE_TEST_KEY", llm_max_tokens=None)
    scoped = settings_for(VLLMUser, Namespace(**given, llm_api_key_hosts="http://127.0.0.1:8000"))
    assert scoped.api_key_for("http://127.0.0.1:8000") == "sk-scope-test-0123456789"
    assert scoped.api_key_for("http://127.0.0.1:1") is None and scoped.key_withheld("http://127.0.0.1:1")
    assert not scoped.key_withheld("http://127.0.0.1:8000")
    unscoped = settings_for(VLLMUser, Namespace(**given))  # no plugin start: the User's own host, as before
    assert unscoped.key_scope is None and unscoped.api_key_for("http://anywhere:1") == "sk-scope-test-0123456789"
    line = withheld_line("http://10.9.9.9:81/v1", scoped.api_key_names(), scoped.key_scope)
    assert line == ("the API key (SCOPE_TEST_KEY) is not sent to http://10.9.9.9:81: it goes only to the hosts "
                    "given when locust started (http://127.0.0.1:8000); to send it there, start locust with "
                    "--llm-api-key-hosts http://10.9.9.9:81")
