"""Tests for the NVML GPU sidecar (exporters/nvml.py).

Most tests hand ``GPUCollector`` the fake in fake_nvml.py. The subprocess tests run the real
``llm-gpu-sidecar`` on this machine: without NVML they check the exit-2 line and the
``--allow-no-gpu`` mode; where a real GPU and driver are present those are skipped and
``test_real_gpu_sidecar`` reads the real cards instead.

Regenerate tests/fixtures/nvml/expected.prom (after checking the diff by eye) with
``NVML_UPDATE_EXPECTED=1 pytest tests/exporters/test_nvml.py -k expected``.
"""

from __future__ import annotations

import inspect
import itertools
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporters import nvml as sidecar
from exporters.nvml import GPUCollector
from tests.exporters.fake_nvml import (
    CONSTANTS,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNKNOWN,
    FakeGPU,
    FakeNVML,
    fixed_fake,
)

REPO = Path(__file__).resolve().parents[2]
EXPECTED = REPO / "tests/fixtures/nvml/expected.prom"
DOC = REPO / "docs/gpu-sidecar.md"
NO_GPU_LINE = re.compile(
    r"^llm-gpu-sidecar: NVML unavailable \(.+\); no GPU driver on this node\. "
    r"Use --allow-no-gpu to serve only the error counter\.$")
G0 = {"gpu": "0", "uuid": "GPU-11111111-2222-3333-4444-555555555555", "name": "NVIDIA H100 80GB HBM3"}
G1 = {"gpu": "1", "uuid": "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "name": "NVIDIA A10G"}


def scrape_registry(nvml: object | None) -> tuple[CollectorRegistry, GPUCollector]:
    ticks = itertools.count(0.0, 0.125)  # every scrape "takes" exactly 0.125 s
    collector = GPUCollector(nvml, clock=lambda: next(ticks))
    registry = CollectorRegistry()
    registry.register(collector)
    return registry, collector


@pytest.fixture
def fake() -> FakeNVML:
    nvml = fixed_fake()
    nvml.nvmlInit()
    return nvml


Scrape = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(registry: CollectorRegistry) -> Scrape:
    """One scrape, as {(sample name, labels): value}."""
    return {(s.name, frozenset(s.labels.items())): s.value for fam in registry.collect() for s in fam.samples}


def value(samples: Scrape, name: str, labels: dict[str, str] | None = None) -> float | None:
    return samples.get((name, frozenset((labels or {}).items())))


def errors(samples: Scrape) -> dict[tuple[str, str], float]:
    return {(dict(labels)["gpu"], dict(labels)["field"]): v
            for (name, labels), v in samples.items() if name == "nvml_scrape_errors_total"}


# -- values, units, labels ---------------------------------------------------------------------

def test_exposition_matches_expected_file(fake: FakeNVML) -> None:
    body = generate_latest(scrape_registry(fake)[0])
    if os.environ.get("NVML_UPDATE_EXPECTED"):
        EXPECTED.parent.mkdir(parents=True, exist_ok=True)
        EXPECTED.write_bytes(body)
    assert body == EXPECTED.read_bytes()


def test_values_in_base_units(fake: FakeNVML) -> None:
    r = scrape(scrape_registry(fake)[0])
    assert value(r, "gpu_utilization_ratio", G0) == 0.87  # 87 %
    assert value(r, "gpu_memory_utilization_ratio", G0) == 0.42
    assert value(r, "gpu_memory_total_bytes", G0) == 85_520_809_984
    assert value(r, "gpu_memory_used_bytes", G0) == 71_000_000_000
    assert value(r, "gpu_memory_free_bytes", G0) == 85_520_809_984 - 71_000_000_000
    assert value(r, "gpu_power_watts", G0) == 250.0  # 250000 mW
    assert value(r, "gpu_power_limit_watts", G0) == 700.0  # 700000 mW
    assert value(r, "gpu_energy_joules_total", G0) == 123_456.789  # 123456789 mJ
    assert value(r, "gpu_temperature_celsius", G0) == 64.0
    assert value(r, "gpu_sm_clock_hz", G0) == 1_980_000_000  # 1980 MHz
    assert value(r, "gpu_memory_clock_hz", G0) == 2_619_000_000
    assert value(r, "gpu_pcie_tx_bytes_per_second", G0) == 1500 * 1024  # KB/s
    assert value(r, "gpu_pcie_rx_bytes_per_second", G0) == 250_000 * 1024
    assert value(r, "gpu_process_memory_used_bytes", {**G0, "pid": "4242"}) == 70_000_000_000
    assert value(r, "gpu_process_memory_used_bytes", {**G0, "pid": "5151"}) == 2 * 512 * 1024**2  # MIG: summed
    assert value(r, "gpu_process_memory_used_bytes", {**G0, "pid": "777"}) is None  # usedGpuMemory None
    assert value(r, "nvml_driver_info", {"driver_version": "550.54.15", "nvml_version": "12.550.54.15",
                                         "cuda_driver_version": "12.4"}) == 1
    assert value(r, "nvml_up") == 1
    assert value(r, "nvml_devices") == 3
    assert value(r, "nvml_scrape_duration_seconds") == 0.125


def test_labels_per_gpu(fake: FakeNVML) -> None:
    r = scrape(scrape_registry(fake)[0])
    seen = {(dict(labels)["gpu"], dict(labels)["uuid"], dict(labels)["name"])
            for name, labels in r if name == "gpu_temperature_celsius"}
    assert seen == {tuple(G0.values()), tuple(G1.values())}  # GPU 2 is lost
    assert value(r, "gpu_temperature_celsius", G1) == 31.0
    assert value(r, "gpu_sm_clock_hz", G1) == 210e6


def test_every_metric_is_documented(fake: FakeNVML) -> None:
    exposed = set(re.findall(r"^# TYPE (\S+) ", generate_latest(scrape_registry(fake)[0]).decode(), re.M))
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", DOC.read_text(), re.M))
    assert exposed == documented


# -- failures never break the scrape -----------------------------------------------------------

def test_not_supported_is_left_out_quietly(fake: FakeNVML) -> None:
    r = scrape(scrape_registry(fake)[0])
    for name in ("gpu_energy_joules_total", "gpu_pcie_tx_bytes_per_second", "gpu_pcie_rx_bytes_per_second"):
        assert value(r, name, G1) is None
    assert errors(r) == {("1", "power"): 1, ("2", "uuid"): 1}  # no energy/pcie entries


def test_function_not_found_is_quiet_too(fake: FakeNVML) -> None:
    fake.gpus[0].fail["nvmlDeviceGetComputeRunningProcesses"] = NVML_ERROR_FUNCTION_NOT_FOUND
    r = scrape(scrape_registry(fake)[0])
    assert value(r, "gpu_process_memory_used_bytes", {**G0, "pid": "4242"}) is None
    assert ("0", "processes") not in errors(r)


FIELDS = [  # NVML function -> (error field, samples it feeds)
    ("nvmlDeviceGetUtilizationRates", "utilization", ["gpu_utilization_ratio", "gpu_memory_utilization_ratio"]),
    ("nvmlDeviceGetMemoryInfo", "memory", ["gpu_memory_used_bytes", "gpu_memory_total_bytes", "gpu_memory_free_bytes"]),
    ("nvmlDeviceGetPowerUsage", "power", ["gpu_power_watts"]),
    ("nvmlDeviceGetEnforcedPowerLimit", "power_limit", ["gpu_power_limit_watts"]),
    ("nvmlDeviceGetTotalEnergyConsumption", "energy", ["gpu_energy_joules_total"]),
    ("nvmlDeviceGetTemperature", "temperature", ["gpu_temperature_celsius"]),
    ("nvmlDeviceGetComputeRunningProcesses", "processes", []),
]


@pytest.mark.parametrize(("fn", "field", "names"), FIELDS, ids=[f[1] for f in FIELDS])
def test_one_failing_field_skips_only_that_sample(fake: FakeNVML, fn: str, field: str, names: list[str]) -> None:
    fake.gpus[0].fail[fn] = NVML_ERROR_NO_PERMISSION
    registry, _ = scrape_registry(fake)
    r = scrape(registry)
    for name in names:
        assert value(r, name, G0) is None
    assert value(r, "gpu_temperature_celsius" if field != "temperature" else "gpu_power_watts", G0) is not None
    assert value(r, "gpu_temperature_celsius", G1) == 31.0  # the other GPU is untouched
    assert errors(r)[("0", field)] == 1
    assert errors(scrape(registry))[("0", field)] == 2  # the counter counts every failed read


def test_one_failing_gpu_does_not_break_the_others(fake: FakeNVML) -> None:
    fake.gpus[1].fail["nvmlDeviceGetHandleByIndex"] = NVML_ERROR_UNKNOWN
    r = scrape(scrape_registry(fake)[0])
    assert value(r, "gpu_power_watts", G0) == 250.0
    assert value(r, "gpu_temperature_celsius", G1) is None
    assert errors(r)[("1", "handle")] == 1


def test_gpu_lost_mid_read_stops_that_gpu_and_counts_once(fake: FakeNVML) -> None:
    fake.gpus[0].fail["nvmlDeviceGetPowerUsage"] = NVML_ERROR_GPU_IS_LOST
    r = scrape(scrape_registry(fake)[0])
    assert value(r, "gpu_memory_used_bytes", G0) == 71_000_000_000  # read before the loss
    assert value(r, "gpu_temperature_celsius", G0) is None  # not tried after it
    assert value(r, "gpu_temperature_celsius", G1) == 31.0
    assert [k for k in errors(r) if k[0] == "0"] == [("0", "power")]


def test_hot_unplug_shows_as_errors_not_a_crash() -> None:
    gpus = [FakeGPU(uuid=f"GPU-{i}", name="NVIDIA L4", power_mw=70_000) for i in range(3)]
    nvml = FakeNVML(gpus)
    nvml.nvmlInit()
    registry, _ = scrape_registry(nvml)
    r = scrape(registry)
    assert [value(r, "gpu_power_watts", {"gpu": str(i), "uuid": f"GPU-{i}", "name": "NVIDIA L4"})
            for i in range(3)] == [70.0, 70.0, 70.0]
    gpus[1].lost = True  # falls off the bus: its handle now fails with GPU_IS_LOST
    scrape(registry)
    r = scrape(registry)
    assert value(r, "gpu_power_watts", {"gpu": "1", "uuid": "GPU-1", "name": "NVIDIA L4"}) is None
    assert value(r, "gpu_power_watts", {"gpu": "2", "uuid": "GPU-2", "name": "NVIDIA L4"}) == 70.0
    assert errors(r) == {("1", "uuid"): 2}  # once per scrape, not once per field
    del nvml.gpus[1]  # the driver drops it: the count is re-read every scrape
    r = scrape(registry)
    assert value(r, "nvml_devices") == 2
    assert value(r, "gpu_power_watts", {"gpu": "1", "uuid": "GPU-2", "name": "NVIDIA L4"}) == 70.0
    assert errors(r) == {("1", "uuid"): 2}


def test_device_count_failure_sets_nvml_up_0(fake: FakeNVML) -> None:
    fake.fail["nvmlDeviceGetCount"] = NVML_ERROR_UNKNOWN
    fake.fail["nvmlSystemGetDriverVersion"] = NVML_ERROR_UNKNOWN
    r = scrape(scrape_registry(fake)[0])
    assert value(r, "nvml_up") == 0
    assert value(r, "nvml_devices") is None
    assert value(r, "nvml_driver_info", {"driver_version": "", "nvml_version": "12.550.54.15",
                                         "cuda_driver_version": "12.4"}) == 1
    assert errors(r) == {("", "device_count"): 1, ("", "driver_version"): 1}


def test_uninitialized_nvml_does_not_crash() -> None:
    r = scrape(scrape_registry(fixed_fake())[0])  # nvmlInit never called: every call is UNINITIALIZED
    assert value(r, "nvml_up") == 0
    assert ("", "device_count") in errors(r)


def test_non_nvml_exception_is_counted(fake: FakeNVML, monkeypatch: pytest.MonkeyPatch) -> None:
    def mismatch(handle: object) -> None:
        raise RuntimeError("pyNVML version does not match the NVML lib version")
    monkeypatch.setattr(fake, "nvmlDeviceGetComputeRunningProcesses", mismatch)
    r = scrape(scrape_registry(fake)[0])
    assert errors(r)[("0", "processes")] == 1
    assert value(r, "gpu_power_watts", G0) == 250.0


def test_no_gpu_mode_serves_only_up_and_errors() -> None:
    r, collector = scrape_registry(None)
    collector.record_error("", "init", quiet=True)
    assert generate_latest(r).decode() == (
        "# HELP nvml_up 1 if NVML answered this scrape's device count, else 0.\n"
        "# TYPE nvml_up gauge\nnvml_up 0.0\n"
        "# HELP nvml_scrape_errors_total NVML errors per GPU index and field; each skipped one sample.\n"
        "# TYPE nvml_scrape_errors_total counter\n"
        'nvml_scrape_errors_total{field="init",gpu=""} 1.0\n')


# -- the fake is faithful to pynvml; the real error class is handled ----------------------------

def test_fake_matches_pynvml() -> None:
    pynvml = pytest.importorskip("pynvml")
    for name, code in CONSTANTS.items():
        assert getattr(pynvml, name) == code, name
    for name, fn in inspect.getmembers(FakeNVML, inspect.isfunction):
        if name.startswith("nvml"):
            fake_params = list(inspect.signature(fn).parameters)[1:]  # drop self
            assert list(inspect.signature(getattr(pynvml, name)).parameters) == fake_params, name
    for code in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_GPU_IS_LOST, NVML_ERROR_LIBRARY_NOT_FOUND):
        real = pynvml.NVMLError(code)
        assert isinstance(real, pynvml.NVMLError) and real.value == code
        assert str(real) == str(FakeNVML.NVMLError(code))


def test_real_pynvml_error_class_is_handled() -> None:
    pynvml = pytest.importorskip("pynvml")

    class RealErrors(FakeNVML):
        NVMLError = pynvml.NVMLError  # raises pynvml's per-code subclasses, e.g. NVMLError_GpuIsLost

    nvml = RealErrors(fixed_fake().gpus)
    nvml.nvmlInit()
    r = scrape(scrape_registry(nvml)[0])
    assert errors(r) == {("1", "power"): 1, ("2", "uuid"): 1}
    assert value(r, "gpu_power_watts", G0) == 250.0


def test_no_side_effects_at_import_or_registration(fake: FakeNVML) -> None:
    code = ("import sys, exporters.nvml as m; from prometheus_client import REGISTRY, generate_latest;"
            "assert 'pynvml' not in sys.modules; assert b'gpu_' not in generate_latest(REGISTRY)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)
    calls = fake.calls
    scrape_registry(fake)
    assert fake.calls == calls  # describe() names the families without calling NVML


# -- promtool ----------------------------------------------------------------------------------

def promtool_check(body: bytes) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian/Ubuntu: apt-get install prometheus); CI installs it")
    done = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=60)
    assert done.returncode == 0, (done.stdout + done.stderr).decode()


def test_promtool_accepts_the_scrape(fake: FakeNVML) -> None:
    promtool_check(generate_latest(scrape_registry(fake)[0]))


# -- HTTP and the command ----------------------------------------------------------------------

def get(url: str) -> tuple[str, str]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.headers["Content-Type"], resp.read().decode()


def test_http_metrics_in_process(fake: FakeNVML) -> None:
    registry, _ = scrape_registry(fake)
    server, thread = sidecar.serve(registry, "127.0.0.1", 0)
    try:
        ctype, body = get(f"http://127.0.0.1:{server.server_port}/metrics")
    finally:
        server.shutdown()
        server.server_close()
    assert ctype.startswith("text/plain")
    assert f'gpu_power_watts{{gpu="0",name="{G0["name"]}",uuid="{G0["uuid"]}"}} 250.0' in body
    assert 'nvml_scrape_errors_total{field="power",gpu="1"} 1.0' in body


def test_main_initialises_and_shuts_down_nvml_once(fake: FakeNVML, capsys: pytest.CaptureFixture[str]) -> None:
    nvml = fixed_fake()
    stop = threading.Event()
    stop.set()
    assert sidecar.main(["--host", "127.0.0.1", "--port", "0"], nvml=nvml, stop=stop) == 0
    assert (nvml.init_calls, nvml.shutdown_calls, nvml.initialized) == (1, 1, False)
    assert "serving http://127.0.0.1:" in capsys.readouterr().err


def test_main_without_nvml_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    nvml = FakeNVML([], init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    assert sidecar.main(["--port", "0"], nvml=nvml) == 2
    err = capsys.readouterr().err
    assert err == ("llm-gpu-sidecar: NVML unavailable (NVML Shared Library Not Found); no GPU driver on this "
                   "node. Use --allow-no-gpu to serve only the error counter.\n")
    stop = threading.Event()
    stop.set()
    assert sidecar.main(["--port", "0", "--host", "127.0.0.1", "--allow-no-gpu"], nvml=nvml, stop=stop) == 0
    assert nvml.shutdown_calls == 0


def nvml_present() -> bool:
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:
        return False
    pynvml.nvmlShutdown()
    return True


HAS_NVML = nvml_present()
COMMANDS = {
    "console-script": [str(Path(sys.executable).parent / "llm-gpu-sidecar")],
    "python-m": [sys.executable, "-m", "exporters.nvml"],
}


def command(kind: str) -> list[str]:
    if not Path(COMMANDS[kind][0]).exists():
        pytest.skip(f"{COMMANDS[kind][0]} not installed (pip install -e .)")
    return COMMANDS[kind]


@pytest.mark.skipif(HAS_NVML, reason="NVML works on this machine; test_real_gpu_sidecar covers it")
@pytest.mark.parametrize("kind", COMMANDS)
def test_command_without_gpu_exits_2(kind: str) -> None:
    done = subprocess.run([*command(kind), "--port", "0"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and NO_GPU_LINE.match(done.stderr.rstrip("\n")), done.stderr


def start(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    """Start the sidecar on 127.0.0.1:0 and return it with its /metrics URL (from its stderr).

    A thread reads stderr line by line: select() on the pipe cannot see a line that an earlier
    readline() already pulled into the file object's buffer (both lines of --allow-no-gpu can
    arrive in one read, and the 'serving' line then waited 30 s unseen: CI on 13f4fd8).
    """
    proc = subprocess.Popen([*args, "--host", "127.0.0.1", "--port", "0"], cwd=REPO, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    found: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            found.put(line)
        found.put("")

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 30
    lines: list[str] = []
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = found.get(timeout=left)
        except queue.Empty:
            break
        lines.append(line)
        if m := re.search(r"serving (http://\S+/metrics)", line):
            return proc, m.group(1)
        if not line:
            break
    proc.kill()
    raise AssertionError(f"sidecar did not start: {''.join(lines)!r}")


def stop_with_sigterm(proc: subprocess.Popen[str]) -> int:
    proc.terminate()
    try:
        return proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.skipif(HAS_NVML, reason="NVML works on this machine; test_real_gpu_sidecar covers it")
def test_command_allow_no_gpu_serves_nvml_up_0() -> None:
    proc, url = start([*command("console-script"), "--allow-no-gpu"])
    try:
        _, body = get(url)
    finally:
        rc = stop_with_sigterm(proc)
    assert "\nnvml_up 0.0\n" in body
    assert 'nvml_scrape_errors_total{field="init",gpu=""} 1.0' in body
    assert "gpu_" not in body
    assert rc == 0  # SIGTERM is a clean exit
    promtool_check(body.encode())


@pytest.mark.skipif(not HAS_NVML, reason="needs a real NVIDIA GPU and driver (NVML)")
def test_real_gpu_sidecar() -> None:
    import pynvml
    pynvml.nvmlInit()
    try:
        uuids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                 for i in range(pynvml.nvmlDeviceGetCount())]
    finally:
        pynvml.nvmlShutdown()
    proc, url = start(command("python-m"))
    try:
        _, body = get(url)
    finally:
        rc = stop_with_sigterm(proc)
    assert rc == 0
    assert "\nnvml_up 1.0\n" in body
    assert f"\nnvml_devices {float(len(uuids))}\n" in body
    for i, uuid in enumerate(uuids):
        total = re.search(rf'^gpu_memory_total_bytes{{gpu="{i}",name="[^"]+",uuid="{uuid}"}} (\S+)$', body, re.M)
        assert total and float(total.group(1)) > 0, body
        util = re.search(rf'^gpu_utilization_ratio{{gpu="{i}",[^}}]*}} (\S+)$', body, re.M)
        assert util and 0.0 <= float(util.group(1)) <= 1.0, body
    promtool_check(body.encode())
