"""Images in the prompt: the :class:`Image` a request spec carries, and one function per dialect
that turns the spec's images into that dialect's parts (the seam every builder uses).

An image travels inline, base64-encoded, never as a URL (a load test must not depend on a
third server). Each request's images go with its LAST user message, AFTER that message's text,
in every dialect: a shared text prefix (``--llm-prefix-tokens``) stays a prefix, so a server's
prefix cache sees what it would see without images.

- OpenAI, vLLM, TGI's Messages API, Ollama's /v1 (chat): ``content`` becomes a list of parts,
  ``{"type": "text", "text"}`` then ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``
  (:func:`openai_content`);
- Anthropic: ``content`` blocks, the text then ``{"type": "image", "source": {"type": "base64",
  "media_type", "data"}}`` (:func:`anthropic_content`);
- Gemini: ``parts``, ``{"text"}`` then ``{"inlineData": {"mimeType", "data"}}`` (:func:`gemini_parts`);
- Ollama native: the message's (or, on /api/generate, the body's) ``images``: a list of base64
  strings (:func:`ollama_images`);
- TGI native (``/generate_stream``, ``/``): markdown image links in ``inputs``, ``![](data:...)``,
  as TGI's vision models read them (:func:`markdown_images`).

- the Responses API: the message's ``content`` parts, ``{"type": "input_text", "text"}`` then
  ``{"type": "input_image", "image_url": "data:image/png;base64,...", "detail": "auto"}``
  (:func:`responses_content`).

Pure: no I/O beyond what the caller hands in.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MIME_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_URLSAFE = re.compile(r"[A-Za-z0-9_-]*={0,2}")


@dataclass(frozen=True, slots=True)
class Image:
    """One image as sent: its MIME type, base64 text, and pixel size (from its header)."""

    mime: str
    data: str  # base64, standard alphabet, padded
    width: int
    height: int

    @property
    def wire_bytes(self) -> int:
        """Bytes this image puts on the wire: its base64 text (4/3 of the file's size)."""
        return len(self.data)

    @classmethod
    def from_bytes(cls, raw: bytes, where: str = "image") -> Image:
        """An image file's bytes (PNG, JPEG, GIF or WebP; ValueError naming ``where`` otherwise)."""
        mime, width, height = sniff(raw, where)
        return cls(mime, base64.b64encode(raw).decode("ascii"), width, height)


def data_url(image: Image) -> str:
    return f"data:{image.mime};base64,{image.data}"


def _last_user(messages: list[dict[str, Any]]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role", "user") == "user":
            return i
    return len(messages) - 1


def with_images(messages: list[dict[str, Any]], images: tuple[Image, ...],
                content: Callable[[str, tuple[Image, ...]], Any], key: str = "content") -> list[dict[str, Any]]:
    """``messages`` with the last user message's ``key`` replaced by ``content(text, images)``
    (the messages themselves are not changed)."""
    if not images:
        return messages
    i = _last_user(messages)
    out = list(messages)
    out[i] = {**messages[i], key: content(str(messages[i].get("content", "")), images)}
    return out


def openai_content(text: str, images: tuple[Image, ...]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    parts += [{"type": "image_url", "image_url": {"url": data_url(im)}} for im in images]
    return parts


def responses_content(text: str, images: tuple[Image, ...]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "input_text", "text": text}] if text else []
    parts += [{"type": "input_image", "image_url": data_url(im), "detail": "auto"} for im in images]
    return parts


def anthropic_content(text: str, images: tuple[Image, ...]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks += [{"type": "image", "source": {"type": "base64", "media_type": im.mime, "data": im.data}}
               for im in images]
    return blocks


def gemini_parts(text: str, images: tuple[Image, ...]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    parts += [{"inlineData": {"mimeType": im.mime, "data": im.data}} for im in images]
    return parts


def ollama_images(images: tuple[Image, ...]) -> list[str]:
    return [im.data for im in images]


def markdown_images(text: str, images: tuple[Image, ...]) -> str:
    return text + "".join(f"![]({data_url(im)})" for im in images)


# the image header: type and pixel size ---------------------------------------------------------

def b64decode(data: str, where: str = "image", urlsafe: bool = False) -> bytes:
    """Strict base64 (what the servers accept), or ValueError naming ``where``. ``urlsafe``:
    also the URL-safe alphabet, padded or not (protobuf's JSON mapping of bytes, which Gemini
    takes and the google-genai SDK sends)."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as e:
        if urlsafe and _URLSAFE.fullmatch(data):
            return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
        raise ValueError(f"{where}: not valid base64 ({e})") from None


def sniff(raw: bytes, where: str = "image") -> tuple[str, int, int]:
    """(MIME type, width, height) from an image file's header: PNG, JPEG, GIF or WebP. Raises
    ValueError naming ``where`` for anything else or a header cut short."""
    try:
        if raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR":
            w, h = struct.unpack(">II", raw[16:24])
            return _checked("image/png", w, h, where)
        if raw[:3] == b"\xff\xd8\xff":
            return _checked("image/jpeg", *_jpeg_size(raw), where)
        if raw[:6] in (b"GIF87a", b"GIF89a"):
            w, h = struct.unpack("<HH", raw[6:10])
            return _checked("image/gif", w, h, where)
        if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
            return _checked("image/webp", *_webp_size(raw), where)
    except struct.error:
        raise ValueError(f"{where}: the image header is cut short") from None
    raise ValueError(f"{where}: not a PNG, JPEG, GIF or WebP image (starts {raw[:8]!r})")


def _checked(mime: str, w: int, h: int, where: str) -> tuple[str, int, int]:
    if w < 1 or h < 1:
        raise ValueError(f"{where}: the {mime} header says {w}x{h} pixels")
    return mime, w, h


def _jpeg_size(raw: bytes) -> tuple[int, int]:
    """The frame header (SOF0..SOF15 but DHT/JPG/DAC) of a JPEG: walk the marker segments."""
    i = 2
    n = len(raw)
    while i + 4 <= n:
        if raw[i] != 0xFF:
            raise ValueError("not a JPEG marker")
        marker = raw[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            i += 2
            continue
        (length,) = struct.unpack(">H", raw[i + 2:i + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", raw[i + 5:i + 9])
            return w, h
        i += 2 + length
    raise struct.error("no JPEG frame header")


def _webp_size(raw: bytes) -> tuple[int, int]:
    kind = raw[12:16]
    if kind == b"VP8 ":
        w, h = struct.unpack("<HH", raw[26:30])
        return w & 0x3FFF, h & 0x3FFF
    if kind == b"VP8L":
        b = int.from_bytes(raw[21:25], "little")
        return (b & 0x3FFF) + 1, ((b >> 14) & 0x3FFF) + 1
    if kind == b"VP8X":
        return int.from_bytes(raw[24:27], "little") + 1, int.from_bytes(raw[27:30], "little") + 1
    raise struct.error("unknown WebP chunk")
