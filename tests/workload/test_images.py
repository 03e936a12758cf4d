"""workload/images.py: synthetic PNGs (valid, deterministic, unique per request, cheap to stamp),
the options, the source wrapper, and images named by a dataset (paths relative to the file). A route
that takes no images refusing them at start: tests/workload/test_build.py."""

from __future__ import annotations

import base64
import io
import json
import time
from argparse import Namespace

import pytest
from PIL import Image as PILImage

from llm_users.errors import ConfigError
from llm_users.protocols.images import sniff
from llm_users.workload.build import WorkloadOptions, build_source, has_images, workload_options
from llm_users.workload.datasets import load_dataset
from llm_users.workload.images import PNGTemplate, SyntheticImages, parse_size


def _pil(data: str) -> PILImage.Image:
    im = PILImage.open(io.BytesIO(base64.b64decode(data)))
    im.load()  # decodes every row: the zlib stream, its Adler-32 and the chunk CRCs are checked
    return im


def test_synthetic_pngs_are_valid_unique_and_deterministic() -> None:
    a = SyntheticImages(3, (320, 240), seed=4)
    first, second = a.for_request(0, 1), a.for_request(0, 2)
    assert len(first) == 3 and len({im.data for im in first + second}) == 6  # never the same image twice
    for im in first:
        pil = _pil(im.data)
        assert (pil.size, pil.mode, im.mime) == ((320, 240), "RGB", "image/png")
        assert sniff(base64.b64decode(im.data)) == ("image/png", 320, 240)
    p1, p2 = _pil(first[0].data).tobytes(), _pil(second[0].data).tobytes()
    row = 320 * 3
    assert p1[:-row] == p2[:-row] and p1[-row:] != p2[-row:]  # only the stamp row differs
    assert _pil(first[0].data).tobytes() != _pil(first[1].data).tobytes()  # image k differs from image k+1
    again = SyntheticImages(3, (320, 240), seed=4)
    assert [t.head_b64 for t in again.templates] == [t.head_b64 for t in a.templates]  # pixels from the seed
    other = SyntheticImages(1, (320, 240), seed=5)
    assert other.templates[0].head_b64 != a.templates[0].head_b64
    assert len(base64.b64decode(first[0].data)) == a.templates[0].file_bytes
    # about 40% of the raw pixels, like a photo's PNG
    assert 0.3 < a.templates[0].file_bytes / (320 * 240 * 3) < 0.55


def test_odd_sizes_and_the_stamp_cost() -> None:
    import random

    for w, h in ((8, 8), (33, 17), (1001, 9)):
        t = PNGTemplate.build(w, h, random.Random(1))
        assert _pil(t.image(b"x" * 12).data).size == (w, h)
    s = SyntheticImages(4, (512, 512), seed=0)
    start = time.perf_counter()
    for n in range(50):
        s.for_request(1, n)
    per_request = (time.perf_counter() - start) / 50
    assert per_request < 0.01, per_request  # 0.5 ms on an idle core for four 512x512 images


def test_options() -> None:
    w = workload_options(Namespace(llm_images="2", llm_image_size="640x480"))
    assert (w.images, w.image_size) == (2, (640, 480))
    assert workload_options(Namespace(llm_images="1")).image_size == (512, 512)
    assert parse_size(" 64X32 ") == (64, 32)
    for bad, message in (({"llm_image_size": "64x64"}, "--llm-image-size needs --llm-images"),
                         ({"llm_images": "x"}, "--llm-images must be a whole number"),
                         ({"llm_images": "-1"}, "--llm-images must be 0..64"),
                         ({"llm_images": "1", "llm_image_size": "64"}, "WIDTHxHEIGHT"),
                         ({"llm_images": "1", "llm_image_size": "4x4"}, "each side must be 8..4096")):
        with pytest.raises(ConfigError, match=message):
            workload_options(Namespace(**bad))


def test_every_item_carries_the_images_and_sessions_send_them_on_turn_one() -> None:
    source = build_source(WorkloadOptions(images=2, image_size=(64, 64), output_tokens=None))
    lane = source.lane(0)
    items = [lane.next() for _ in range(3)]
    assert all(len(i.images) == 2 for i in items)
    assert len({im.data for i in items for im in i.images}) == 6
    assert source.describe()["images"] == {"kind": "synthetic", "per_request": 2, "size": "64x64", "format": "png",
                                           "file_bytes": [t.file_bytes for t in source.images.templates]}
    sessions = build_source(WorkloadOptions(dataset="conversations", images=1, image_size=(64, 64), turns=3))
    lane = sessions.lane(0)
    first = lane.next()
    lane.reply(first, "ok")
    second = lane.next()
    assert (first.turn, len(first.images)) == (1, 1) and (second.turn, second.images) == (2, ())
    assert has_images(sessions) and not has_images(build_source(WorkloadOptions()))


def _files(tmp_path):
    (tmp_path / "img").mkdir()
    png = SyntheticImages(1, (40, 30), seed=1).for_request(0, 1)[0]
    (tmp_path / "img" / "a.png").write_bytes(base64.b64decode(png.data))
    buf = io.BytesIO()
    PILImage.new("RGB", (20, 10)).save(buf, "JPEG")
    (tmp_path / "img" / "b.jpg").write_bytes(buf.getvalue())
    (tmp_path / "img" / "not.png").write_text("hello")


def test_jsonl_with_image_paths(tmp_path) -> None:
    _files(tmp_path)
    f = tmp_path / "mm.jsonl"
    f.write_text("\n".join(json.dumps(o) for o in (
        {"prompt": "one", "image": "img/a.png"},
        {"messages": [{"role": "user", "content": "two"}], "images": ["img/a.png", "img/b.jpg"]},
        {"prompt": "none"},
        {"prompt": "a list under image", "image": ["img/b.jpg"]},
    )))
    ds = load_dataset(str(f))
    assert [[(im.mime, im.width, im.height) for im in i.images] for i in ds.items] == [
        [("image/png", 40, 30)], [("image/png", 40, 30), ("image/jpeg", 20, 10)], [], [("image/jpeg", 20, 10)]]
    assert ds.items[0].images[0] is ds.items[1].images[0]  # a file is read once
    assert ds.describe()["images"] == 4 and ds.describe()["image_files"] == 2
    item = build_source(WorkloadOptions(dataset=str(f))).lane(0).next()
    assert item.messages == [{"role": "user", "content": "one"}] and len(item.images) == 1
    with pytest.raises(ConfigError, match="names its own images; give one or the other"):
        build_source(WorkloadOptions(dataset=str(f), images=1))


def test_sharegpt4v(tmp_path) -> None:
    _files(tmp_path)
    f = tmp_path / "sharegpt4v.json"
    f.write_text(json.dumps([
        {"id": "x1", "image": "img/b.jpg", "conversations": [
            {"from": "human", "value": "<image>\nWhat is in the image?"}, {"from": "gpt", "value": "A cat."},
            {"from": "human", "value": "And its colour?"}]},
    ]))
    ds = load_dataset(str(f))
    (item,) = ds.items
    assert ds.format == "sharegpt" and item.first() == [{"role": "user", "content": "What is in the image?"}]
    assert item.followups == ("And its colour?",) and item.images[0].mime == "image/jpeg"


@pytest.mark.parametrize(("image", "message"), [
    ("img/missing.png", r"line 1: cannot read image 'img/missing.png'"),
    ("img/not.png", r"line 1: image 'img/not.png': not a PNG, JPEG, GIF or WebP"),
    ("https://example.com/c.png", r"line 1: image 'https://example.com/c.png': give a file path"),
])
def test_bad_images_stop_the_run_naming_file_and_line(tmp_path, image, message) -> None:
    _files(tmp_path)
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps({"prompt": "p", "image": image}))
    with pytest.raises(ConfigError, match=f"dataset {f}, {message}"):
        load_dataset(str(f))
