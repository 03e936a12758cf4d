"""Dataset files: our prompts JSON, JSONL, and ShareGPT JSON, read into :class:`Item` s.

- prompts JSON: a list, or an object whose ``"prompts"`` key holds the list; items are a
  string, ``{"prompt", "system"?}`` or ``{"messages": [...]}``, each optionally with
  ``max_tokens`` (or ``output_tokens``);
- JSONL (``.jsonl``/``.ndjson``): one such object per line;
- ShareGPT: a list of ``{"conversations": [{"from": "human"|"gpt"|"system", "value": ...}]}``
  (also accepted one per JSONL line). The human turns are the conversation's user turns; the
  recorded gpt replies are not sent (the server's own replies are, in sessions).

Any object item may name images: ``"image": PATH`` (ShareGPT-4V / LLaVA style, whose ``<image>``
placeholders are taken out of the text) or ``"images": [PATH, ...]``, relative to the dataset
file's folder; they are read and checked here, at start (:func:`~llm_users.workload.images.dataset_images`).

A name that is not an existing file is looked up among the files shipped in the package
(``llm_users/data/prompts``, via importlib.resources), so ``--llm-dataset short`` works from a
non-editable install. Every malformed item is a :class:`ConfigError` naming file and line.

A file is refused at start in one line naming ``--llm-dataset`` (issue 54 item 6) when it is no
regular file (a directory, ``/dev/zero``, a pipe), cannot be read, or holds a line over
:data:`MAX_LINE_BYTES` (16 MiB: one item per line, and a prompt that large is past any server's
request-size limit, HTTP 413); it is read in chunks, so such a line costs at most the bound and a
chunk, not the whole line (a 100 MB line cost 1.9 GB).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from llm_users.errors import ConfigError
from llm_users.protocols.images import Image
from llm_users.workload.images import dataset_images
from llm_users.workload.source import Messages

DEFAULT_DATASET = "short"
#: The longest line a dataset file may hold (docs/prompts.md).
MAX_LINE_BYTES = 16 * 1024 * 1024
_CHUNK = 1024 * 1024
_ROLES = {"system", "user", "assistant"}
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "chatgpt": "assistant", "bard": "assistant", "bing": "assistant", "model": "assistant",
                   "system": "system"}


@dataclass(frozen=True, slots=True)
class Item:
    """One dataset entry: the first request's messages, optional max output tokens, and (for
    conversations) the later user turns."""

    messages: tuple[dict[str, str], ...]
    max_tokens: int | None = None
    followups: tuple[str, ...] = ()
    where: str = ""
    images: tuple[Image, ...] = ()  # sent with the first request

    def first(self) -> Messages:
        return [dict(m) for m in self.messages]


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str  # what the user gave
    path: str  # where it was read from (a file, or package:llm_users/data/prompts/NAME)
    sha256: str
    format: str  # "prompts" | "jsonl" | "sharegpt"
    items: tuple[Item, ...]
    skipped: int = 0  # ShareGPT conversations without a human turn

    def describe(self) -> dict[str, Any]:
        d = {"name": self.name, "path": self.path, "sha256": self.sha256, "format": self.format,
             "items": len(self.items), "skipped": self.skipped}
        images = sum(len(i.images) for i in self.items)
        if images:
            d["images"] = images
            d["image_files"] = len({id(im) for i in self.items for im in i.images})
        return d


def shipped_names() -> list[str]:
    """The dataset files shipped inside the package."""
    root = resources.files("llm_users.data") / "prompts"
    return sorted(p.name for p in root.iterdir() if p.name.endswith((".json", ".jsonl")))


def _read(name: str) -> tuple[str, bytes | bytearray]:
    p = Path(name).expanduser()
    if p.is_file():
        return str(p), _read_file(p, name)
    if "/" not in name and "\\" not in name:
        root = resources.files("llm_users.data") / "prompts"
        for candidate in (name, f"{name}.json", f"{name}.jsonl"):
            res = root / candidate
            if res.is_file():
                return f"package:llm_users/data/prompts/{candidate}", res.read_bytes()
    if os.path.lexists(p):  # there, but no regular file (or a link to nothing)
        _read_file(p, name)
    raise ConfigError(f"--llm-dataset {name}: dataset file not found (shipped datasets: {', '.join(shipped_names())})")


def _read_file(p: Path, name: str) -> bytearray:
    """The bytes of a regular file, each line at most :data:`MAX_LINE_BYTES`; else one
    ConfigError naming the option and why."""
    try:
        mode = os.stat(p).st_mode
    except OSError as e:
        raise ConfigError(f"--llm-dataset {name}: cannot read it ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        what = "a directory" if stat.S_ISDIR(mode) else "a device, pipe or socket"
        raise ConfigError(f"--llm-dataset {name}: {what}, not a dataset file (give a JSON or JSONL file)")
    try:
        with open(p, "rb") as f:
            return _read_bounded(f, name)
    except OSError as e:
        raise ConfigError(f"--llm-dataset {name}: cannot read it ({e.strerror or e})") from None


def _read_bounded(f: BinaryIO, name: str) -> bytearray:
    """All of ``f``, read in chunks: a line over :data:`MAX_LINE_BYTES` is refused once that
    many of its bytes were seen, never read whole."""
    data = bytearray()
    line, open_len = 1, 0  # the line being read: its number, its bytes so far
    size = min(_CHUNK, MAX_LINE_BYTES)  # a line begun and ended inside a chunk is within the bound
    while chunk := f.read(size):
        first = chunk.find(b"\n")
        if first >= 0 and open_len + first <= MAX_LINE_BYTES:
            line += chunk.count(b"\n")
            open_len = len(chunk) - chunk.rfind(b"\n") - 1
        elif first >= 0 or open_len + len(chunk) > MAX_LINE_BYTES:
            raise ConfigError(f"--llm-dataset {name}: line {line} is over {MAX_LINE_BYTES >> 20} MiB, the bound on "
                              "one dataset line (a prompt that large is past servers' request-size limits, HTTP "
                              "413): shorten it; a JSON file on one line: write it indented, or as JSONL")
        else:
            open_len += len(chunk)
        data += chunk
    return data


def load_dataset(name: str | None = None) -> Dataset:
    """Read and validate a dataset file (or a shipped one by name)."""
    name = name or DEFAULT_DATASET
    path, raw = _read(name)
    sha = hashlib.sha256(raw).hexdigest()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"dataset {path}: not UTF-8 text ({e})") from None
    base = str(Path(path).parent) if not path.startswith("package:") else None
    if path.endswith((".jsonl", ".ndjson")):
        fmt, items, skipped = _jsonl(text, path, base)
    else:
        fmt, items, skipped = _json(text, path, base)
    if not items:
        raise ConfigError(f"dataset {path}: no usable items")
    return Dataset(name, path, sha, fmt, tuple(items), skipped)


def _with_images(item: Item, obj: Any, base: str | None, where: str, cache: dict[str, Image]) -> Item:
    images = dataset_images(obj, base, where, cache)
    if not images:
        return item
    msgs = tuple({**m, "content": m["content"].replace("<image>", "").strip()} if m["role"] == "user" else m
                 for m in item.messages)
    return replace(item, messages=msgs, images=images,
                   followups=tuple(f.replace("<image>", "").strip() for f in item.followups))


def _jsonl(text: str, path: str, base: str | None = None) -> tuple[str, list[Item], int]:
    items: list[Item] = []
    cache: dict[str, Image] = {}
    skipped = 0
    fmt = "jsonl"
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"dataset {path}, line {n}"
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise ConfigError(f"{where}: not valid JSON ({e})") from None
        if isinstance(obj, dict) and "conversations" in obj:
            fmt = "sharegpt"
            item = _sharegpt(obj, where)
            if item is None:
                skipped += 1
                continue
        else:
            item = _item(obj, where)
        items.append(_with_images(item, obj, base, where, cache))
    return fmt, items, skipped


def _json(text: str, path: str, base: str | None = None) -> tuple[str, list[Item], int]:
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise ConfigError(f"dataset {path} is not valid JSON: {e}") from None
    items = data.get("prompts") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        raise ConfigError(f"dataset {path} must hold a non-empty list (or an object with a 'prompts' list)")
    lines = _item_lines(text, isinstance(data, dict), len(items))
    sharegpt = all(isinstance(x, dict) and "conversations" in x for x in items)
    out: list[Item] = []
    skipped = 0
    cache: dict[str, Image] = {}
    for i, obj in enumerate(items):
        where = f"dataset {path}, line {lines[i]} (item {i})" if lines else f"dataset {path}, item {i}"
        if sharegpt:
            item = _sharegpt(obj, where)
            if item is None:
                skipped += 1
                continue
            out.append(_with_images(item, obj, base, where, cache))
        else:
            out.append(_with_images(_item(obj, where), obj, base, where, cache))
    return ("sharegpt" if sharegpt else "prompts"), out, skipped


def _item_lines(text: str, in_object: bool, count: int) -> list[int]:
    """The line each top-level list item starts on (best effort: [] if the layout is unusual)."""
    if in_object:
        m = re.search(r'"prompts"\s*:\s*\[', text)
        if not m:
            return []
        i = m.end()
    else:
        i = text.index("[") + 1
    dec = json.JSONDecoder()
    out: list[int] = []
    line, pos = 1, 0
    n = len(text)
    try:
        while len(out) < count:
            while i < n and text[i] in " \t\r\n,":
                i += 1
            line += text.count("\n", pos, i)
            pos = i
            out.append(line)
            _, i = dec.raw_decode(text, i)
    except ValueError:
        return []
    return out


def _max_tokens(obj: dict[str, Any], where: str) -> int | None:
    v = obj.get("max_tokens", obj.get("output_tokens"))
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"{where}: max_tokens/output_tokens must be a positive integer, got {v!r}")
    return v


def _item(obj: Any, where: str) -> Item:
    if isinstance(obj, str):
        if not obj.strip():
            raise ConfigError(f"{where}: empty prompt")
        return Item(({"role": "user", "content": obj},), where=where)
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a string or an object, got {type(obj).__name__}")
    max_tokens = _max_tokens(obj, where)
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise ConfigError(f"{where}: 'messages' must be a non-empty list")
        out = []
        for m in msgs:
            if not isinstance(m, dict) or m.get("role") not in _ROLES or not isinstance(m.get("content"), str):
                raise ConfigError(f"{where}: each message needs a role in {sorted(_ROLES)} and a string content")
            out.append({"role": m["role"], "content": m["content"]})
        if out[-1]["role"] != "user":
            raise ConfigError(f"{where}: the last message must be from the user")
        return Item(tuple(out), max_tokens, where=where)
    prompt = obj.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError(f"{where}: needs a non-empty 'prompt' string or a 'messages' list")
    system = obj.get("system")
    if system is not None and not isinstance(system, str):
        raise ConfigError(f"{where}: 'system' must be a string")
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    return Item(tuple(msgs), max_tokens, where=where)


def _sharegpt(obj: Any, where: str) -> Item | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("conversations"), list):
        raise ConfigError(f"{where}: a ShareGPT item needs a 'conversations' list")
    system: list[str] = []
    users: list[str] = []
    for turn in obj["conversations"]:
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise ConfigError(f"{where}: each conversation turn needs 'from' and a string 'value'")
        role = _SHAREGPT_ROLES.get(str(turn.get("from", "")).lower())
        if role is None:
            raise ConfigError(f"{where}: unknown speaker {turn.get('from')!r} "
                              f"(expected one of {sorted(_SHAREGPT_ROLES)})")
        if role == "system":
            system.append(turn["value"])
        elif role == "user" and turn["value"].strip():
            users.append(turn["value"])
    if not users:
        return None
    msgs = ([{"role": "system", "content": "\n\n".join(system)}] if system else []) + [
        {"role": "user", "content": users[0]}]
    return Item(tuple(msgs), _max_tokens(obj, where), tuple(users[1:]), where=where)
