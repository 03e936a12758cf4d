"""Images in the prompt: synthetic PNGs (``--llm-images N --llm-image-size WxH``), built before
the run, and the source wrapper that puts them on every work item.

Synthetic images are valid RGB PNGs made with the standard library (zlib), deterministic from
the workload seed: image ``k`` of every request has the same pixels (seeded noise of 8 levels on
colour bands, which compresses to about 40% of the raw pixels, near a photo's PNG) except its
last row, which carries a stamp unique to the request (seed, a per-process nonce, lane, request
number, image index). So no two requests send the same image: a server's prefix cache and its
image-encoder cache never hit by accident, as with the synthetic text.

The stamp costs microseconds, not a new compression: each image is prebuilt as a template whose
pixel rows except the last are one finished deflate stream (a full flush, byte-aligned); the
last row is a stored deflate block, so a request's image is the template's base64 text (kept
whole; the template's length is a multiple of 3 bytes) + the base64 of the last row, the
zlib Adler-32 and the IDAT CRC-32 continued from the template's, and the IEND chunk.
"""

from __future__ import annotations

import base64
import hashlib
import random
import re
import struct
import uuid
import zlib
from dataclasses import dataclass
from typing import Any

from llm_users.errors import ConfigError
from llm_users.protocols.images import Image
from llm_users.workload.source import Lane, RequestSource, WorkItem, WrappedSource

MIN_SIDE = 8
MAX_SIDE = 4096
MAX_IMAGES = 64
DEFAULT_SIZE = (512, 512)
STAMP_BYTES = 12
_IEND = struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))


def parse_size(text: str) -> tuple[int, int]:
    """``'512x384'`` -> (512, 384): width x height in pixels."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", str(text))
    if not m:
        raise ConfigError(f"--llm-image-size must be WIDTHxHEIGHT in pixels, e.g. 512x512, got {text!r}")
    w, h = int(m.group(1)), int(m.group(2))
    if not (MIN_SIDE <= w <= MAX_SIDE and MIN_SIDE <= h <= MAX_SIDE):
        raise ConfigError(f"--llm-image-size: each side must be {MIN_SIDE}..{MAX_SIDE} pixels, got {w}x{h}")
    return w, h


def parse_count(value: Any) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"--llm-images must be a whole number of images per request, got {value!r}") from None
    if not 0 <= n <= MAX_IMAGES:
        raise ConfigError(f"--llm-images must be 0..{MAX_IMAGES} images per request, got {n}")
    return n


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@dataclass(frozen=True, slots=True)
class PNGTemplate:
    """One synthetic image, all but its last row finished (see the module docstring)."""

    width: int
    height: int
    head_b64: str  # base64 of every byte before the last row's data (a multiple of 3 bytes)
    adler: int  # Adler-32 of the rows before the last
    crc: int  # CRC-32 of the IDAT chunk's type and data so far
    file_bytes: int  # the whole file's size

    @classmethod
    def build(cls, width: int, height: int, rng: random.Random) -> PNGTemplate:
        row = 3 * width
        bases = [rng.randrange(0, 248) for _ in range(8)]
        tables = [bytes((b + (v & 7)) & 0xFF for v in range(256)) for b in bases]
        band = max(1, height // 8)
        rows = b"".join(b"\x00" + rng.randbytes(row).translate(tables[(y // band) % 8]) for y in range(height - 1))
        comp = zlib.compressobj(6)
        z = comp.compress(rows) + comp.flush(zlib.Z_FULL_FLUSH)  # ends byte-aligned, stream open
        last = 1 + row
        stored = b"\x01" + struct.pack("<HH", last, last ^ 0xFFFF)  # the final block: stored, BFINAL
        sig = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        for _ in range(3):  # an empty stored block (5 bytes) until the head is a whole number of base64 quanta
            head_len = len(sig) + 8 + len(z) + len(stored)
            if head_len % 3 == 0:
                break
            z += b"\x00\x00\x00\xff\xff"
        idat = z + stored
        length = len(idat) + last + 4
        head = sig + struct.pack(">I", length) + b"IDAT" + idat
        assert len(head) % 3 == 0
        return cls(width, height, base64.b64encode(head).decode("ascii"), zlib.adler32(rows),
                   zlib.crc32(b"IDAT" + idat), len(head) + last + 4 + 4 + len(_IEND))

    def image(self, stamp: bytes) -> Image:
        """This image with ``stamp`` at the start of its last row."""
        row = b"\x00" + stamp + bytes(3 * self.width - len(stamp))
        tail = row + struct.pack(">I", zlib.adler32(row, self.adler))
        tail += struct.pack(">I", zlib.crc32(tail, self.crc)) + _IEND
        return Image("image/png", self.head_b64 + base64.b64encode(tail).decode("ascii"), self.width, self.height)


class SyntheticImages:
    """``count`` images per request of ``size``, from ``seed``: templates built once, stamped per request."""

    def __init__(self, count: int, size: tuple[int, int], seed: int) -> None:
        if 3 * size[0] < STAMP_BYTES:
            raise ConfigError(f"--llm-image-size: at least {STAMP_BYTES // 3} pixels wide")
        self.count = count
        self.size = size
        self.seed = seed
        self.templates = [PNGTemplate.build(size[0], size[1], random.Random(f"{seed}:image:{k}"))
                          for k in range(count)]
        self._run = uuid.uuid4().bytes[:6]  # two processes never send the same "unique" image

    def for_request(self, lane: int, n: int) -> tuple[Image, ...]:
        key = b"%d:%b:%d:%d:" % (self.seed, self._run, lane, n)
        return tuple(t.image(hashlib.blake2b(key + b"%d" % k, digest_size=STAMP_BYTES).digest())
                     for k, t in enumerate(self.templates))

    def describe(self) -> dict[str, Any]:
        return {"kind": "synthetic", "per_request": self.count, "size": f"{self.size[0]}x{self.size[1]}",
                "format": "png", "file_bytes": [t.file_bytes for t in self.templates]}


class ImageSource(WrappedSource):
    """Adds ``images`` synthetic images to every item of ``inner``."""

    def __init__(self, inner: RequestSource, images: SyntheticImages) -> None:
        super().__init__(inner)
        self.images = images

    def lane(self, index: int) -> Lane:
        return _ImageLane(self.inner.lane(index), self.images, index)

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "images": self.images.describe()}


class _ImageLane(Lane):
    def __init__(self, inner: Lane, images: SyntheticImages, index: int) -> None:
        self.inner = inner
        self.images = images
        self.index = index
        self.n = 0
        self.user_turn = getattr(inner, "user_turn", None)  # sessions' later turns (workload/sessions.py)

    def next(self) -> WorkItem:
        item = self.inner.next()
        self.n += 1
        item.images = item.images + self.images.for_request(self.index, self.n)
        return item

    def reply(self, item: WorkItem, text: str | None) -> None:
        self.inner.reply(item, text)


def images_of(items: Any) -> tuple[int, int]:
    """(images, distinct image files) over dataset items (for the workload's description)."""
    total = 0
    seen: set[int] = set()
    for item in items:
        total += len(item.images)
        seen.update(id(im) for im in item.images)
    return total, len(seen)


# images named by a dataset item ----------------------------------------------------------------

def dataset_images(obj: Any, base: str | None, where: str, cache: dict[str, Image]) -> tuple[Image, ...]:
    """The images a dataset item names: ``"image": PATH`` (ShareGPT-4V, LLaVA; a list too) or
    ``"images": [PATH, ...]``, each relative to the dataset file's folder (or absolute), read once (``cache``)
    and checked (PNG, JPEG, GIF or WebP). A ConfigError names the file and line."""
    if not isinstance(obj, dict):
        return ()
    one, many = obj.get("image"), obj.get("images")
    if one is None and many is None:
        return ()
    if one is not None and many is not None:
        raise ConfigError(f"{where}: give 'image' or 'images', not both")
    paths = (one if isinstance(one, list) else [one]) if one is not None else many
    if not isinstance(paths, list) or not all(isinstance(p, str) and p.strip() for p in paths):
        raise ConfigError(f"{where}: 'image' must be a path (or a list of them) and 'images' a list of paths")
    out = []
    for p in paths:
        if re.match(r"^[a-z][a-z0-9+.-]*://", p, re.I) or p.startswith("data:"):
            raise ConfigError(f"{where}: image {p[:60]!r}: give a file path (images are read before the run "
                              "and sent inline; nothing is downloaded)")
        from pathlib import Path

        full = Path(p).expanduser()
        if not full.is_absolute() and base is not None:
            full = Path(base) / full
        key = str(full)
        image = cache.get(key)
        if image is None:
            try:
                raw = full.read_bytes()
            except OSError as e:
                raise ConfigError(f"{where}: cannot read image {p!r} ({e.strerror or e})") from None
            try:
                image = cache[key] = Image.from_bytes(raw, f"image {p!r}")
            except ValueError as e:
                raise ConfigError(f"{where}: {e}") from None
        out.append(image)
    return tuple(out)
