"""settings.py: what one user runs with (settings_for): class defaults, options over them, keys
from named variables, one-line errors, the batch-size option, and the LLM User classes known by
their ``backend`` attribute."""

from __future__ import annotations

from argparse import Namespace

import pytest

from llm_users.errors import ConfigError
from llm_users.settings import settings_for
from llm_users.users import GeminiEmbedUser, GeminiUser, OpenAIUser, VLLMEmbedUser, VLLMUser


def opts(**kw) -> Namespace:
    return Namespace(**kw)


def test_defaults_are_the_fixed_sampling() -> None:
    s = settings_for(VLLMUser, opts())
    assert (s.sampling.max_tokens, s.sampling.temperature, s.sampling.top_p, s.sampling.ignore_eos) == (512, 0.0, 1.0, True)
    assert s.client == "raw" and s.verify_tls and s.model is None
    assert settings_for(OpenAIUser, opts()).sampling.ignore_eos is False


def test_options_override_class_attributes() -> None:
    s = settings_for(VLLMUser, opts(llm_max_tokens=64, llm_temperature=0.7, llm_ignore_eos="false",
                                    llm_model="x", llm_read_timeout=3.5, llm_insecure="true"))
    assert s.sampling.max_tokens == 64 and s.sampling.temperature == 0.7 and not s.sampling.ignore_eos
    assert s.model == "x" and s.timeouts.read == 3.5 and not s.verify_tls


@pytest.mark.parametrize(("kw", "msg"), [({"llm_ignore_eos": "maybe"}, "true or false"),
                                         ({"llm_client": "curl"}, "raw or sdk"),
                                         ({"llm_top_p": 0.0}, "top_p")])
def test_bad_values(kw, msg) -> None:
    with pytest.raises(ConfigError, match=msg):
        settings_for(VLLMUser, opts(**kw))


def test_api_key_from_named_variables(monkeypatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key")
    s = settings_for(GeminiUser, opts())
    assert s.api_key() == "g-key"
    assert s.api_key_names() == "GEMINI_API_KEY (or GOOGLE_API_KEY)"
    monkeypatch.setenv("MY_KEY", "mine")
    assert settings_for(OpenAIUser, opts(llm_api_key_env="MY_KEY")).api_key() == "mine"


def test_llm_user_classes_are_known_without_importing_them() -> None:
    from locust import User

    from llm_users import users
    from llm_users.settings import is_llm_user

    shipped = [getattr(users, name) for name in users.__all__ if name.endswith("User") and name != "LLMUser"]
    assert len(shipped) >= 6 and all(is_llm_user(c) for c in shipped)
    assert is_llm_user(users.LLMUser) and not is_llm_user(User) and not is_llm_user(3)


class _Opts:
    def __init__(self, **kw: object) -> None:
        self.__dict__.update(kw)


def test_batch_size_option() -> None:
    assert settings_for(VLLMEmbedUser, _Opts(llm_batch_size="8")).batch_size == 8
    assert settings_for(VLLMEmbedUser, None).batch_size == 1
    with pytest.raises(ConfigError, match="--llm-batch-size must be a whole number of inputs per request"):
        settings_for(VLLMEmbedUser, _Opts(llm_batch_size="0"))
    with pytest.raises(ConfigError, match="applies to embeddings and rerank routes, not vllm's 'chat'"):
        settings_for(VLLMUser, _Opts(llm_batch_size="4"))
    with pytest.raises(ConfigError, match="'embed_content' takes at most 1 input"):
        settings_for(GeminiEmbedUser, _Opts(llm_batch_size="2", llm_endpoint="embed_content"))
    assert settings_for(VLLMUser, _Opts(llm_batch_size="4", llm_endpoint="embeddings")).batch_size == 4
