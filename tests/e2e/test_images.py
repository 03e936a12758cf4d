"""Issue 31 item 1, images in the prompt, in real locust processes against the simulator:

- TTFT grows with the image count as the simulator's documented model says (a dataset whose
  items carry 0, 1 and 4 images, one run): TTFT = --ttft-ms + --prefill-us-per-token x prompt
  tokens, each 448x448 image costing 16x16 + 2 = 258 tokens (sim/images.py);
- every dialect sends synthetic images the simulator reads (count and tokens in its ground
  truth = what the record says), raw mode on two worker processes (the records merged on the
  master) and SDK mode.

Each run is one scenario of the module's pool (tests/e2e/locust_pool.py), run once; the TTFT one
with no other run of the pool beside it (its bounds are a few ms).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_users.sim.images import image_tokens
from llm_users.workload.images import SyntheticImages
from tests.e2e.locust_pool import Pool, Run, Scenario, params, pool_in
from tests.helpers import median, processes_args, read_records, read_summary

pytestmark = pytest.mark.slow

KEYS = {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test", "GEMINI_API_KEY": "gm-test"}
TTFT_MS = 20.0
PREFILL_US = 100.0  # per prompt token
SIDE = 448
PER_IMAGE = image_tokens(SIDE, SIDE)

ALL_DIALECTS = '''
from locust import events
from llm_users import plugin
from llm_users.users import ClaudeUser, GeminiUser, OllamaUser, TGIUser, VLLMUser

plugin.register(events)

class V(VLLMUser):
    endpoint = "chat"

class R(VLLMUser):
    endpoint = "responses"

class C(ClaudeUser):
    pass

class G(GeminiUser):
    pass

class O(OllamaUser):
    endpoint = "{ollama}"

class T(TGIUser):
    endpoint = "{tgi}"
'''


# SDK mode runs locally: four SDKs imported in each of two workers on a loaded 2-core machine
# miss Locust's heartbeat (with or without images); the merge is the same for both modes
DIALECT_CASES: list[tuple[bool, int | None]] = [(False, 2), (True, None)]


def _png(path: Path, side: int, seed: int) -> None:
    path.write_bytes(base64.b64decode(SyntheticImages(1, (side, side), seed).for_request(0, 1)[0].data))


def _dataset(base: Path) -> Path:
    """0, 1 and 4 images per item (a JPEG and PNGs), in a JSONL dataset beside its pictures."""
    pics = base / "pics"
    pics.mkdir()
    for k in range(4):
        _png(pics / f"p{k}.png", SIDE, k)
    from PIL import Image as PILImage

    buf = io.BytesIO()
    PILImage.new("RGB", (SIDE, SIDE), (10, 200, 30)).save(buf, "JPEG")
    (pics / "j.jpg").write_bytes(buf.getvalue())
    data = base / "mm.jsonl"
    rows = [{"prompt": "say hi"},
            {"prompt": "what is this", "image": "pics/j.jpg"},
            {"prompt": "compare these four", "images": [f"pics/p{k}.png" for k in range(4)]},
            {"id": "sharegpt-4v", "image": "pics/p1.png",
             "conversations": [{"from": "human", "value": "<image>\nwhat is this"}, {"from": "gpt", "value": "x"}]}]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    return data


def _scenarios(base: Path) -> dict[str, Scenario]:
    ttft_sim = ("--ttft-ms", str(TTFT_MS), "--itl-ms", "1", "--output-tokens", "4",
                "--prefill-us-per-token", str(PREFILL_US), "--trace-limit", "100000")
    out = {"ttft": Scenario("vllm.py", ("-u", "4", "-r", "4", "-t", "5s", "--stop-timeout", "10",
                                        "--llm-dataset", str(base / "mm.jsonl")), sim=ttft_sim, trace=True, alone=True)}
    sim = ("--ttft-ms", "10", "--itl-ms", "1", "--output-tokens", "3", "--trace-limit", "100000")
    for sdk, processes in DIALECT_CASES:
        locustfile = base / f"all_dialects_{'sdk' if sdk else 'raw'}.py"
        args: tuple[Any, ...] = ("-u", "6", "-r", "6", "-t", "4s", "--stop-timeout", "10",
                                 "--llm-images", "2", "--llm-image-size", "300x200", "--llm-client", "sdk" if sdk else "raw")
        if processes:
            args += (lambda p=processes: processes_args(p),)  # a free master port, taken when the run starts
        # one simulator for both (the trace is read by each run's own request ids)
        out[_dialects(sdk)] = Scenario(str(locustfile), args, sim=sim, env=KEYS, trace=True, timeout=180)
    return out


def _dialects(sdk: bool) -> str:
    return f"dialects-{'sdk' if sdk else 'raw'}"


def _needs(item: Any) -> list[str]:
    return {
        "test_ttft_grows_with_the_image_count_as_the_model_says": lambda: ["ttft"],
        "test_every_dialect_sends_images_the_simulator_reads": lambda: [_dialects(params(item)["sdk"])],
    }[item.originalname]()


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    base = tmp_path_factory.mktemp("images")
    _dataset(base)
    for sdk in (False, True):
        (base / f"all_dialects_{'sdk' if sdk else 'raw'}.py").write_text(ALL_DIALECTS.format(
            ollama="chat" if sdk else "generate", tgi="chat" if sdk else "generate_stream"))
    yield from pool_in(request, base, _scenarios(base), _needs, parallel=2)


def _tail(run: Run) -> str:
    return f"stdout tail:\n{run.proc.stdout[-2000:]}\nstderr tail:\n{run.proc.stderr[-3000:]}"


def test_ttft_grows_with_the_image_count_as_the_model_says(runs) -> None:
    run = runs.run("ttft")
    assert run.proc.returncode == 0, _tail(run)
    report, pics = run.report, run.report.parent.parent / "pics"
    records = [r for r in read_records(report) if not r["warmup"]]
    assert records and all(r["status"] == "ok" for r in records), records[:1]
    trace = {t["request_id"]: t for t in run.trace or []}
    sizes = {p.name: len(base64.b64encode(p.read_bytes())) for p in pics.iterdir()}
    by_count: dict[int, list[float]] = {}  # the client's TTFT
    served: dict[int, list[float]] = {}  # the simulator's: its first chunk's write - the request's arrival
    for r in records:
        t = trace[r["request_id"]]
        assert t["images"] == r["image_count"] and t["image_tokens"] == PER_IMAGE * r["image_count"], (t, r)
        assert r["input_tokens"] == t["input_tokens"]  # the server's count, images included
        text_tokens = r["input_tokens"] - PER_IMAGE * r["image_count"]
        assert text_tokens in (2, 3), r  # "say hi", "what is this" (the <image> placeholder taken out)
        expected_bytes = {0: 0, 1: {sizes["j.jpg"], sizes["p1.png"]}, 4: sum(sizes[f"p{k}.png"] for k in range(4))}
        want = expected_bytes[r["image_count"]]
        assert r["image_bytes"] in want if isinstance(want, set) else r["image_bytes"] == want
        # the simulator's own target: TTFT + prefill of every prompt token
        assert t["ttft_target_ns"] - t["arrival_ns"] == pytest.approx(
            (TTFT_MS + PREFILL_US / 1000 * r["input_tokens"]) * 1e6, abs=2e4)
        by_count.setdefault(r["image_count"], []).append(r["ttft_ns"] / 1e6)
        served.setdefault(r["image_count"], []).append((t["chunks"][0][0] - t["arrival_ns"]) / 1e6)
    assert set(by_count) == {0, 1, 4} and all(len(v) >= 5 for v in by_count.values()), {k: len(v) for k, v in by_count.items()}
    # lateness is one-sided (a loaded machine delays, never hastens): the fastest request of each
    # count is the one least disturbed, and medians show how the load moved the rest
    base, served_base = min(by_count[0]), min(served[0])
    assert min(base, served_base) >= TTFT_MS - 0.5, (base, served_base)  # the sim's clock fires <= 0.5 ms early
    for k in (1, 4):
        model = PREFILL_US / 1000 * PER_IMAGE * k  # 25.8 ms per image (text differs by a token or so: 0.1 ms)
        growth, server_growth = min(by_count[k]) - base, min(served[k]) - served_base
        print(f"{k} images: TTFT min {min(by_count[k]):.2f} p50 {median(by_count[k]):.2f} ms; growth of the min "
              f"{growth:.2f} ms (the simulator's {server_growth:.2f} ms), of the p50 "
              f"{median(by_count[k]) - median(by_count[0]):.2f} ms; model {model:.2f} ms")
        # the simulator's own clock, and the client's TTFT, which also carries the upload of the bigger body
        assert server_growth == pytest.approx(model, abs=1.0 + 0.02 * model), (k, server_growth, model)
        assert growth == pytest.approx(model, abs=2.0 + 0.03 * model), (k, growth, model)
    images = read_summary(report)["workload"]["images"]
    with_images = [r for r in records if r["image_count"]]
    assert images["requests"] == len(with_images)
    assert images["images"] == sum(r["image_count"] for r in with_images)
    assert images["bytes_sent"] == sum(r["image_bytes"] for r in records)
    assert images["images_per_request"] == pytest.approx(images["images"] / images["requests"])
    ttft = {e["images"]: e["ttft"]["min"] for e in images["by_count"]}  # the same figures, from the summary
    assert ttft[4] - ttft[0] == pytest.approx(min(by_count[4]) - min(by_count[0]), abs=0.01)
    assert read_summary(report)["workload"]["source"]["images"] == 6  # named by the dataset's items


@pytest.mark.parametrize(("sdk", "processes"), DIALECT_CASES, ids=["raw-2-processes", "sdk-local"])
def test_every_dialect_sends_images_the_simulator_reads(runs, sdk: bool, processes: int | None) -> None:
    run = runs.run(_dialects(sdk))
    assert run.proc.returncode == 0, _tail(run)
    report = run.report
    records = read_records(report)
    assert records and all(r["status"] == "ok" for r in records), [r for r in records if r["status"] != "ok"][:2]
    trace = {t["request_id"]: t for t in run.trace or []}
    per_image = image_tokens(300, 200)
    routes = set()
    for r in records:
        t = trace[r["request_id"]]
        routes.add(t["route"])
        assert r["image_count"] == t["images"] == 2, (r["name"], t)
        assert t["image_tokens"] == 2 * per_image
        assert r["input_tokens"] == t["input_tokens"] > 2 * per_image
        assert r["client"] == ("sdk" if sdk else "raw")
        assert r["image_bytes"] > 2 * 300 * 200 * 3 * 0.3  # two 300x200 PNGs, base64
    expected = {"/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1beta/models:streamGenerateContent"}
    expected |= {"/api/chat"} if sdk else {"/api/generate", "/generate_stream"}
    assert expected <= routes, routes
    if processes:
        assert len({r["worker"] for r in records}) == processes
    images = read_summary(report)["workload"]["images"]
    assert images["images_per_request"] == 2.0 and images["requests"] == sum(1 for r in records if not r["warmup"]
                                                                               and not r["cooldown"])
    assert images["bytes_sent"] == sum(r["image_bytes"] for r in records if not r["warmup"] and not r["cooldown"])
