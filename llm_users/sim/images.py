"""Images in a request, as the simulator reads them in every dialect: found, checked (strict
base64, a PNG, JPEG, GIF or WebP header, the declared type where the dialect declares one) and
charged as prompt tokens.

Where each dialect carries them (what the real servers accept):

- OpenAI-style chat (vLLM, OpenAI, TGI Messages, Ollama /v1): ``image_url`` content parts whose
  ``url`` (a string, or ``{"url"}``) is a ``data:image/...;base64,`` URL;
- Anthropic: ``image`` content blocks with a ``base64`` source (``media_type``, ``data``);
- Gemini: parts with ``inlineData``/``inline_data`` (``mimeType``/``mime_type``, ``data`` in the
  standard or the URL-safe base64 alphabet, as protobuf's JSON takes bytes and google-genai sends them);
- Ollama: ``images`` (base64 strings) on chat messages, or on the /api/generate body;
- TGI native: markdown ``![](data:image/...;base64,...)`` in ``inputs`` (taken out of the text).

A URL to fetch is refused (400): the simulator downloads nothing. A bad image is a 400 in the
route's own error shape, with a message naming what is wrong.

**Per-image token cost** (Qwen2-VL's rule, as vLLM counts it for that model): the image is
resized to multiples of 28 pixels (``smart_resize``: each side rounded to the nearest multiple
of 28, then scaled to keep the area between 56x56 and 28x28x16384 pixels) and costs one token per
28x28 block (4 ViT patches of 14x14 merged), plus 2 for its vision start/end markers:
512x512 -> 18x18 blocks = 324 + 2 = 326 tokens. These are added to the prompt tokens the
answer reports, so TTFT grows with them under ``--prefill-us-per-token``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from llm_users.protocols.images import b64decode, sniff

FACTOR = 28
MIN_PIXELS = 56 * 56
MAX_PIXELS = 28 * 28 * 16384
MARKER_TOKENS = 2
_DATA_URL = re.compile(r"data:(image/[a-z0-9.+-]+);base64,(.*)", re.I | re.S)
MARKDOWN_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]*)\)")


def smart_resize(height: int, width: int) -> tuple[int, int]:
    """Qwen2-VL's resize: both sides multiples of 28, the area kept within its bounds."""
    h = max(FACTOR, round(height / FACTOR) * FACTOR)
    w = max(FACTOR, round(width / FACTOR) * FACTOR)
    if h * w > MAX_PIXELS:
        beta = math.sqrt(height * width / MAX_PIXELS)
        h = max(FACTOR, math.floor(height / beta / FACTOR) * FACTOR)
        w = max(FACTOR, math.floor(width / beta / FACTOR) * FACTOR)
    elif h * w < MIN_PIXELS:
        beta = math.sqrt(MIN_PIXELS / (height * width))
        h = math.ceil(height * beta / FACTOR) * FACTOR
        w = math.ceil(width * beta / FACTOR) * FACTOR
    return h, w


def image_tokens(width: int, height: int) -> int:
    """Prompt tokens one image of ``width`` x ``height`` pixels costs (the rule above)."""
    h, w = smart_resize(height, width)
    return (h // FACTOR) * (w // FACTOR) + MARKER_TOKENS


@dataclass(slots=True)
class Images:
    """What a request's images add: how many, their prompt tokens, their decoded bytes."""

    count: int = 0
    tokens: int = 0
    bytes: int = 0

    def add(self, data: Any, where: str, declared: str | None = None, urlsafe: bool = False) -> None:
        if not isinstance(data, str) or not data:
            raise ValueError(f"{where}: image data must be a non-empty base64 string")
        raw = b64decode(data, where, urlsafe)
        mime, width, height = sniff(raw, where)
        if declared is not None and declared.lower() != mime and not (declared.lower() == "image/jpg"
                                                                     and mime == "image/jpeg"):
            raise ValueError(f"{where}: the image is {mime} but the request says {declared}")
        self.count += 1
        self.tokens += image_tokens(width, height)
        self.bytes += len(raw)

    def add_url(self, url: Any, where: str) -> None:
        if isinstance(url, dict):
            url = url.get("url")
        if not isinstance(url, str):
            raise ValueError(f"{where}: image_url needs a url")
        m = _DATA_URL.match(url)
        if m is None:
            raise ValueError(f"{where}: only data:image/...;base64 URLs are served (the simulator fetches "
                             f"nothing), got {url[:40]!r}")
        self.add(m.group(2), where, m.group(1))


def openai_images(messages: list[Any]) -> Images:
    found = Images()
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, dict) and part.get("type") == "image_url":
                    found.add_url(part.get("image_url"), f"messages[{i}].content[{j}]")
    return found


def responses_images(input_: Any) -> Images:
    """The Responses API: ``input_image`` parts (``image_url`` a data URL) of the input items."""
    found = Images()
    for i, item in enumerate(input_ if isinstance(input_, list) else ()):
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, dict) and part.get("type") == "input_image":
                    found.add_url(part.get("image_url"), f"input[{i}].content[{j}]")
    return found


def anthropic_images(messages: list[Any]) -> Images:
    found = Images()
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            for j, block in enumerate(content):
                if isinstance(block, dict) and block.get("type") == "image":
                    where = f"messages.{i}.content.{j}.image.source"
                    source = block.get("source")
                    if not isinstance(source, dict) or source.get("type") != "base64":
                        raise ValueError(f"{where}: only base64 sources are served (the simulator fetches nothing)")
                    found.add(source.get("data"), where, str(source.get("media_type") or ""))
    return found


def gemini_images(contents: list[Any]) -> Images:
    found = Images()
    for i, c in enumerate(contents):
        parts = c.get("parts") if isinstance(c, dict) else None
        for j, part in enumerate(parts if isinstance(parts, list) else ()):
            if not isinstance(part, dict):
                continue
            blob = part.get("inlineData", part.get("inline_data"))
            where = f"contents[{i}].parts[{j}]"
            if blob is not None:
                if not isinstance(blob, dict):
                    raise ValueError(f"{where}.inlineData must be an object")
                mime = str(blob.get("mimeType", blob.get("mime_type")) or "")
                found.add(blob.get("data"), f"{where}.inlineData", mime, urlsafe=True)  # proto JSON bytes
            elif part.get("fileData", part.get("file_data")) is not None:
                raise ValueError(f"{where}: fileData is not served (the simulator fetches nothing); use inlineData")
    return found


def ollama_images(body: dict[str, Any], chat: bool) -> Images:
    found = Images()
    holders = [(f"messages[{i}].", m) for i, m in enumerate(body.get("messages") or [])] if chat else [("", body)]
    for prefix, holder in holders:
        images = holder.get("images") if isinstance(holder, dict) else None
        if images is None:
            continue
        if not isinstance(images, list):
            raise ValueError(f"{prefix}images must be a list of base64 strings")
        for k, data in enumerate(images):
            found.add(data, f"{prefix}images[{k}]")
    return found


def markdown_images(inputs: str) -> tuple[str, Images]:
    """TGI: the markdown images in ``inputs`` and the text without them."""
    found = Images()
    if "![" not in inputs:
        return inputs, found
    for k, m in enumerate(MARKDOWN_IMAGE.finditer(inputs)):
        found.add_url(m.group(1), f"inputs image {k}")
    return MARKDOWN_IMAGE.sub("", inputs), found
