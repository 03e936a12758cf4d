"""Issue 31 item 1: each dialect's request with images, judged by its official SDK's own types
and by the simulator's parser (sim/images.py), which must find every image with its tokens."""

from __future__ import annotations

import base64
import io

import orjson
import pytest
from pydantic import TypeAdapter

from llm_users.protocols import anthropic, gemini, ollama, openai, tgi
from llm_users.protocols.backend import RequestSpec, get_backend
from llm_users.protocols.images import Image, sniff
from llm_users.protocols.sampling import Sampling
from llm_users.sim import images as sim_images
from llm_users.workload.images import SyntheticImages

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "describe these"}]


@pytest.fixture(scope="module")
def pics() -> tuple[Image, ...]:
    png = SyntheticImages(2, (448, 300), seed=3).for_request(0, 1)
    return (*png, _jpeg(96, 64))


def _jpeg(w: int, h: int) -> Image:
    from PIL import Image as PILImage

    buf = io.BytesIO()
    PILImage.new("RGB", (w, h), (200, 30, 40)).save(buf, "JPEG")
    return Image.from_bytes(buf.getvalue())


def _tokens(images: tuple[Image, ...]) -> int:
    return sum(sim_images.image_tokens(im.width, im.height) for im in images)


def _body(backend: str, endpoint: str | None, images: tuple[Image, ...]) -> dict:
    route = get_backend(backend).route(endpoint)
    spec = RequestSpec("m", list(MESSAGES), Sampling(max_tokens=8), api_key="k", images=images)
    return orjson.loads(route.build(spec).body)


def test_the_token_rule() -> None:
    assert sim_images.image_tokens(512, 512) == 18 * 18 + 2  # round(512/28) = 18
    assert sim_images.image_tokens(448, 448) == 16 * 16 + 2
    assert sim_images.image_tokens(28, 28) == 4 + 2  # raised to the minimum area, 56x56
    assert sim_images.image_tokens(8000, 8000) <= 16384 + 2  # scaled down to the maximum
    assert sim_images.smart_resize(300, 448) == (308, 448)


def test_openai_vllm_tgi_chat_and_ollama_v1(pics) -> None:
    from openai.types.chat import ChatCompletionContentPartImageParam, ChatCompletionUserMessageParam

    for backend, endpoint in (("vllm", "chat"), ("openai", "chat"), ("tgi", "chat"), ("ollama", "openai")):
        body = _body(backend, endpoint, pics)
        user = body["messages"][-1]
        TypeAdapter(ChatCompletionUserMessageParam).validate_python(user)
        parts = [p for p in user["content"] if p["type"] == "image_url"]
        assert len(parts) == 3 and user["content"][0] == {"type": "text", "text": "describe these"}
        for p in parts:
            TypeAdapter(ChatCompletionContentPartImageParam).validate_python(p, strict=True)
            assert p["image_url"]["url"].startswith(("data:image/png;base64,", "data:image/jpeg;base64,"))
        found = sim_images.openai_images(body["messages"])
        assert (found.count, found.tokens) == (3, _tokens(pics))
        assert body["messages"][0] == MESSAGES[0]  # the system message untouched


def test_responses_input_image(pics) -> None:
    from openai.types.responses import EasyInputMessageParam, ResponseInputImageParam

    for backend in ("vllm", "openai"):
        body = _body(backend, "responses", pics)
        (user,) = [i for i in body["input"] if i["role"] == "user"][-1:]
        TypeAdapter(EasyInputMessageParam).validate_python(user)
        parts = [p for p in user["content"] if p["type"] == "input_image"]
        assert len(parts) == 3 and user["content"][0] == {"type": "input_text", "text": "describe these"}
        for p in parts:
            TypeAdapter(ResponseInputImageParam).validate_python(p, strict=True)
            assert p["image_url"].startswith(("data:image/png;base64,", "data:image/jpeg;base64,"))
        found = sim_images.responses_images(body["input"])
        assert (found.count, found.tokens) == (3, _tokens(pics))


def test_completions_refuse_images(pics) -> None:
    from llm_users.errors import ConfigError

    with pytest.raises(ConfigError, match="--llm-images: /v1/completions takes no images"):
        _body("vllm", "completions", pics)


def test_anthropic(pics) -> None:
    from anthropic.types import ImageBlockParam, MessageParam

    body = _body("claude", None, pics)
    user = body["messages"][-1]
    TypeAdapter(MessageParam).validate_python(user)
    blocks = [b for b in user["content"] if b["type"] == "image"]
    for b in blocks:
        TypeAdapter(ImageBlockParam).validate_python(b, strict=True)
    assert [b["source"]["media_type"] for b in blocks] == ["image/png", "image/png", "image/jpeg"]
    found = sim_images.anthropic_images(body["messages"])
    assert (found.count, found.tokens) == (3, _tokens(pics))
    assert body["system"] == "be brief"


def test_gemini(pics) -> None:
    from google.genai import types

    body = _body("gemini", None, pics)
    content = types.Content.model_validate(body["contents"][-1])
    blobs = [p.inline_data for p in content.parts if p.inline_data is not None]
    assert [b.mime_type for b in blobs] == ["image/png", "image/png", "image/jpeg"]
    assert [sniff(b.data)[1:] for b in blobs] == [(im.width, im.height) for im in pics]  # the SDK decodes our base64
    assert content.parts[0].text == "describe these"
    found = sim_images.gemini_images(body["contents"])
    assert (found.count, found.tokens) == (3, _tokens(pics))
    # what the SDK sends (SDK mode): its JSON dump of the bytes, in the URL-safe alphabet, which
    # Gemini (protobuf's JSON) takes, and so does the simulator
    sent = content.model_dump(mode="json", by_alias=True, exclude_none=True)
    found = sim_images.gemini_images([sent])
    assert (found.count, found.tokens) == (3, _tokens(pics))


@pytest.mark.parametrize("endpoint", ["chat", "generate"])
def test_ollama(pics, endpoint) -> None:
    from ollama._client import _copy_images, _copy_messages  # what Client.chat/generate do with the arguments
    from ollama._types import ChatRequest, GenerateRequest

    body = _body("ollama", endpoint, pics)
    if endpoint == "chat":
        (message,) = _copy_messages(body["messages"][-1:])
        assert message.content == "describe these" and len(message.images) == 3
        request = ChatRequest(model="m", messages=[message])
        serialized = request.model_dump(exclude_none=True)["messages"][0]["images"]
    else:
        request = GenerateRequest(model="m", prompt=body["prompt"], images=list(_copy_images(body["images"])))
        serialized = request.model_dump(exclude_none=True)["images"]
    assert serialized == [im.data for im in pics]  # the SDK's serializer sends our base64 as it is
    found = sim_images.ollama_images(body, endpoint == "chat")
    assert (found.count, found.tokens) == (3, _tokens(pics))


@pytest.mark.parametrize("endpoint", ["generate_stream", "root"])
def test_tgi_native_markdown(pics, endpoint) -> None:
    body = _body("tgi", endpoint, pics)
    text, found = sim_images.markdown_images(body["inputs"])
    assert (found.count, found.tokens) == (3, _tokens(pics))
    assert "base64" not in text and text.endswith("describe these")


def test_sdk_arguments_carry_the_parts(pics) -> None:
    """SDK mode sends the builder's body: the openai and anthropic calls take the messages as
    they are (their signatures name ``messages``), so the parts reach the SDK unchanged."""
    from llm_users.protocols.backend import sdk_arguments

    body = _body("vllm", "chat", pics)
    import openai as sdk

    client = sdk.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="x", max_retries=0)
    args = sdk_arguments(client.chat.completions.create, body)
    assert args["messages"] is body["messages"] and "extra_body" in args  # ignore_eos rides in extra_body
    assert len(args["messages"][-1]["content"]) == 4


def test_the_simulator_refuses_bad_images() -> None:
    good = SyntheticImages(1, (64, 64), seed=0).for_request(0, 1)[0]
    with pytest.raises(ValueError, match="not valid base64"):
        sim_images.openai_images([{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}]}])
    with pytest.raises(ValueError, match="not a PNG, JPEG, GIF or WebP"):
        sim_images.ollama_images({"images": [base64.b64encode(b"hello world!").decode()]}, chat=False)
    with pytest.raises(ValueError, match="fetches nothing"):
        sim_images.openai_images([{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}])
    with pytest.raises(ValueError, match="is image/png but the request says image/jpeg"):
        sim_images.anthropic_images([{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": good.data}}]}])
    with pytest.raises(ValueError, match="cut short|not a PNG"):
        sim_images.gemini_images([{"parts": [{"inlineData": {"mimeType": "image/png", "data": good.data[:20]}}]}])
    assert openai is not None and anthropic is not None and gemini is not None and ollama is not None and tgi
