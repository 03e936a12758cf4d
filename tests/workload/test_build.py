"""workload/build.py: the workload options checked at start (a local tokenizer file, a route that
must take the images asked for)."""

from __future__ import annotations

import pytest

from llm_users.errors import ConfigError
from llm_users.protocols.backend import get_backend
from llm_users.workload.build import WorkloadOptions, check, workload_options


def test_the_option_is_checked_at_start(tok_path, tmp_path) -> None:
    class Opts:
        llm_tokenizer = str(tok_path)
        llm_input_tokens = "512"

    assert workload_options(Opts()).tokenizer == str(tok_path)
    Opts.llm_input_tokens = None
    with pytest.raises(ConfigError, match="give --llm-input-tokens"):
        workload_options(Opts())
    Opts.llm_input_tokens, Opts.llm_tokenizer = "512", str(tmp_path / "missing")
    with pytest.raises(ConfigError, match="no tokenizer file"):
        workload_options(Opts())


def test_a_route_without_images_refuses_them_at_start() -> None:
    w = WorkloadOptions(images=1, image_size=(16, 16))
    check(w, get_backend("vllm"), "chat")
    with pytest.raises(ConfigError, match="--llm-images: /v1/completions takes no images; use --llm-endpoint chat"):
        check(w, get_backend("vllm"), "completions")
    check(WorkloadOptions(), get_backend("vllm"), "completions")  # no images: nothing to refuse
    check(w, get_backend("openai"), "responses")  # input_image parts
    with pytest.raises(ConfigError, match=r"--llm-images: the embeddings route \(embed\) takes no images"):
        check(w, get_backend("vllm"), "embeddings")
