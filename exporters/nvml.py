"""The GPU sidecar: NVML (nvidia-ml-py) read at scrape time and served as Prometheus text.

One ``llm-gpu-sidecar`` process per GPU node (``python -m exporters.nvml`` does the same).
``GPUCollector`` is a prometheus_client custom collector: every ``collect()`` re-reads the
device count and each GPU's fields through the NVML module it was handed (``pynvml`` in
production, a fake in tests), so nothing happens at import and nothing touches the global
REGISTRY. Values are converted to base units (ratios, bytes, watts, joules, hertz).

An NVML error on one field or one GPU skips that sample and increments
``nvml_scrape_errors_total{gpu,field}``; the scrape itself never fails. NOT_SUPPORTED and
FUNCTION_NOT_FOUND mean "this card or driver has no such reading": the sample is left out
quietly (logged once, not counted). GPU_IS_LOST stops reading that GPU for this scrape after
counting one error, so a hot-unplugged card shows up as errors, not a crash.
Every metric is documented in docs/gpu-sidecar.md.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

PROG = "llm-gpu-sidecar"
GPU_LABELS = ["gpu", "uuid", "name"]
log = logging.getLogger("exporters.nvml")

# Per-GPU families: name -> (type, help). Counter names are given without "_total".
_GPU_FAMILIES: dict[str, tuple[str, str]] = {
    "gpu_utilization_ratio": ("gauge", "Share of the last NVML sample period in which a kernel ran on the GPU (0..1)."),
    "gpu_memory_utilization_ratio": ("gauge", "Share of the last NVML sample period in which device memory was read or written (0..1)."),
    "gpu_memory_used_bytes": ("gauge", "Device memory allocated, in bytes."),
    "gpu_memory_total_bytes": ("gauge", "Device memory installed, in bytes."),
    "gpu_memory_free_bytes": ("gauge", "Device memory free, in bytes."),
    "gpu_power_watts": ("gauge", "Power draw of the board, in watts."),
    "gpu_power_limit_watts": ("gauge", "Power limit the driver enforces, in watts."),
    "gpu_energy_joules": ("counter", "Energy used by the board since the driver was loaded, in joules."),
    "gpu_temperature_celsius": ("gauge", "GPU core temperature, in degrees Celsius."),
    "gpu_sm_clock_hz": ("gauge", "Current SM clock, in hertz."),
    "gpu_memory_clock_hz": ("gauge", "Current memory clock, in hertz."),
    "gpu_pcie_tx_bytes_per_second": ("gauge", "PCIe bytes per second sent by the GPU (20 ms NVML window)."),
    "gpu_pcie_rx_bytes_per_second": ("gauge", "PCIe bytes per second received by the GPU (20 ms NVML window)."),
}
_PROCESS_FAMILY = "gpu_process_memory_used_bytes"

# Scalar fields: (error field, family, NVML function, NVML constant argument or None, to base unit).
_SCALARS: tuple[tuple[str, str, str, str | None, Callable[[int], float]], ...] = (
    ("power", "gpu_power_watts", "nvmlDeviceGetPowerUsage", None, lambda mw: mw / 1000),
    ("power_limit", "gpu_power_limit_watts", "nvmlDeviceGetEnforcedPowerLimit", None, lambda mw: mw / 1000),
    ("energy", "gpu_energy_joules", "nvmlDeviceGetTotalEnergyConsumption", None, lambda mj: mj / 1000),
    ("temperature", "gpu_temperature_celsius", "nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU", float),
    ("sm_clock", "gpu_sm_clock_hz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_SM", lambda mhz: mhz * 1e6),
    ("memory_clock", "gpu_memory_clock_hz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM", lambda mhz: mhz * 1e6),
    ("pcie_tx", "gpu_pcie_tx_bytes_per_second", "nvmlDeviceGetPcieThroughput", "NVML_PCIE_UTIL_TX_BYTES", lambda kb: kb * 1024.0),
    ("pcie_rx", "gpu_pcie_rx_bytes_per_second", "nvmlDeviceGetPcieThroughput", "NVML_PCIE_UTIL_RX_BYTES", lambda kb: kb * 1024.0),
)
_QUIET_CODES = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND")
_MISSING = object()


class _GPULost(Exception):
    """NVML said GPU_IS_LOST: stop reading that GPU for this scrape."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_version(value: int) -> str:
    return f"{value // 1000}.{value % 1000 // 10}"


class GPUCollector:
    """Reads every GPU through ``nvml`` (already initialised) at each scrape.

    ``nvml=None`` is the no-GPU mode: only ``nvml_up 0`` and the error counter.
    ``clock`` times the scrape (``nvml_scrape_duration_seconds``); tests pass a fixed one.
    """

    def __init__(self, nvml: Any | None, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self._nvml = nvml
        self._clock = clock
        self._lock = threading.Lock()
        self._errors: dict[tuple[str, str], int] = {}
        self._logged: set[tuple[str, str]] = set()
        self._quiet = {getattr(nvml, c) for c in _QUIET_CODES if hasattr(nvml, c)} if nvml is not None else set()

    def record_error(self, gpu: str, field: str, why: object = "", *, quiet: bool = False) -> None:
        """Count one error in ``nvml_scrape_errors_total{gpu,field}``, logging the first of each."""
        self._errors[(gpu, field)] = self._errors.get((gpu, field), 0) + 1
        if not quiet and (gpu, field) not in self._logged:
            self._logged.add((gpu, field))
            log.warning("NVML error on gpu=%r field=%s: %s (counted, logged once)", gpu, field, why)

    def describe(self) -> Iterator[Metric]:
        """The families' names, without touching NVML (lets the registry check for clashes)."""
        yield from self._empty_families().values()

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # one scrape at a time: the HTTP server is threaded
            fams = self._empty_families()
            if self._nvml is None:
                fams["nvml_up"].add_metric([], 0)
                out = [fams["nvml_up"], self._error_family()]
            else:
                start = self._clock()
                self._read_all(fams)
                duration = fams.pop("nvml_scrape_duration_seconds")
                duration.add_metric([], self._clock() - start)
                out = [*fams.values(), self._error_family(), duration]
        yield from out

    def _empty_families(self) -> dict[str, Metric]:
        fams: dict[str, Metric] = {
            "nvml_up": GaugeMetricFamily("nvml_up", "1 if NVML answered this scrape's device count, else 0."),
            "nvml_driver": InfoMetricFamily(
                "nvml_driver", "NVIDIA driver, NVML library and CUDA driver API versions."),
            "nvml_devices": GaugeMetricFamily("nvml_devices", "GPUs NVML reports on this node."),
        }
        for name, (kind, doc) in _GPU_FAMILIES.items():
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            fams[name] = cls(name, doc, labels=GPU_LABELS)
        fams[_PROCESS_FAMILY] = GaugeMetricFamily(
            _PROCESS_FAMILY, "Device memory used by one compute process, in bytes.", labels=[*GPU_LABELS, "pid"])
        fams["nvml_scrape_duration_seconds"] = GaugeMetricFamily(
            "nvml_scrape_duration_seconds", "Seconds the last scrape spent reading NVML.")
        return fams

    def _error_family(self) -> CounterMetricFamily:
        fam = CounterMetricFamily(
            "nvml_scrape_errors", "NVML errors per GPU index and field; each skipped one sample.",
            labels=["gpu", "field"])
        order = sorted(self._errors, key=lambda k: (int(k[0]) if k[0].isdigit() else -1, k))
        for key in order:
            fam.add_metric(list(key), self._errors[key])
        return fam

    def _call(self, gpu: str, field: str, fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML call; on error count it (or skip quietly) and return _MISSING."""
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in self._quiet:
                if (gpu, field) not in self._logged:
                    self._logged.add((gpu, field))
                    log.info("gpu=%r field=%s not supported here (%s); left out", gpu, field, exc)
                return _MISSING
            self.record_error(gpu, field, exc)
            if code == getattr(self._nvml, "NVML_ERROR_GPU_IS_LOST", None):
                raise _GPULost from exc
        except Exception as exc:  # a binding mismatch or similar must not break the scrape
            self.record_error(gpu, field, repr(exc))
        return _MISSING

    def _read_all(self, fams: dict[str, Metric]) -> None:
        n = self._nvml
        versions: dict[str, str] = {}
        for field, fn, conv in (("driver_version", n.nvmlSystemGetDriverVersion, _text),
                                ("nvml_version", n.nvmlSystemGetNVMLVersion, _text),
                                ("cuda_driver_version", n.nvmlSystemGetCudaDriverVersion, _cuda_version)):
            value = self._call("", field, fn)
            versions[field] = "" if value is _MISSING else conv(value)
        fams["nvml_driver"].add_metric([], versions)
        count = self._call("", "device_count", n.nvmlDeviceGetCount)
        fams["nvml_up"].add_metric([], 0 if count is _MISSING else 1)
        if count is _MISSING:
            return
        fams["nvml_devices"].add_metric([], count)
        for index in range(count):
            try:
                self._read_gpu(index, fams)
            except _GPULost:
                continue

    def _read_gpu(self, index: int, fams: dict[str, Metric]) -> None:
        n, gpu = self._nvml, str(index)
        handle = self._call(gpu, "handle", n.nvmlDeviceGetHandleByIndex, index)
        if handle is _MISSING:
            return
        uuid = self._call(gpu, "uuid", n.nvmlDeviceGetUUID, handle)
        name = self._call(gpu, "name", n.nvmlDeviceGetName, handle)
        if uuid is _MISSING or name is _MISSING:
            return  # cannot label this GPU's samples reliably
        labels = [gpu, _text(uuid), _text(name)]
        util = self._call(gpu, "utilization", n.nvmlDeviceGetUtilizationRates, handle)
        if util is not _MISSING:
            fams["gpu_utilization_ratio"].add_metric(labels, util.gpu / 100)
            fams["gpu_memory_utilization_ratio"].add_metric(labels, util.memory / 100)
        mem = self._call(gpu, "memory", n.nvmlDeviceGetMemoryInfo, handle)
        if mem is not _MISSING:
            for part in ("used", "total", "free"):
                fams[f"gpu_memory_{part}_bytes"].add_metric(labels, float(getattr(mem, part)))
        for field, family, fn_name, const, convert in _SCALARS:
            args = (handle,) if const is None else (handle, getattr(n, const))
            value = self._call(gpu, field, getattr(n, fn_name), *args)
            if value is not _MISSING:
                fams[family].add_metric(labels, convert(value))
        procs = self._call(gpu, "processes", n.nvmlDeviceGetComputeRunningProcesses, handle)
        if procs is not _MISSING:
            per_pid: dict[int, int] = {}
            for proc in procs:  # MIG can list one pid once per instance: sum them
                if proc.usedGpuMemory is not None:
                    per_pid[proc.pid] = per_pid.get(proc.pid, 0) + proc.usedGpuMemory
            for pid in sorted(per_pid):
                fams[_PROCESS_FAMILY].add_metric([*labels, str(pid)], float(per_pid[pid]))


def serve(registry: CollectorRegistry, host: str, port: int) -> tuple[Any, threading.Thread]:
    """Serve ``registry`` on http://host:port/metrics in a daemon thread; port 0 picks a free one."""
    return start_http_server(port, addr=host, registry=registry)


def open_nvml(module: Any | None = None) -> tuple[Any | None, str]:
    """Import pynvml (unless ``module`` is given) and nvmlInit it: (module, "") or (None, why)."""
    if module is None:
        try:
            import pynvml as module
        except ImportError:
            return None, "nvidia-ml-py is not installed: pip install 'locust-llm[gpu]'"
    try:
        module.nvmlInit()
    except module.NVMLError as exc:
        return None, str(exc)
    except OSError as exc:
        return None, str(exc)
    return module, ""


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description="Serve NVML GPU metrics as Prometheus text on /metrics.")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=9835, help="port to listen on (default 9835; 0 picks one)")
    p.add_argument("--allow-no-gpu", action="store_true",
                   help="without NVML, serve nvml_up 0 and the error counter instead of exiting 2")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None, *, nvml: Any | None = None,
         stop: threading.Event | None = None) -> int:
    """The ``llm-gpu-sidecar`` command. ``nvml`` and ``stop`` let tests run it in-process."""
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format=f"{PROG}: %(message)s")
    module, why = open_nvml(nvml)
    if module is None and not args.allow_no_gpu:
        print(f"{PROG}: NVML unavailable ({why}); no GPU driver on this node. "
              "Use --allow-no-gpu to serve only the error counter.", file=sys.stderr, flush=True)
        return 2
    try:
        collector = GPUCollector(module)
        if module is None:
            collector.record_error("", "init", quiet=True)
            print(f"{PROG}: NVML unavailable ({why}); --allow-no-gpu: serving only nvml_up 0 and "
                  "nvml_scrape_errors_total", file=sys.stderr, flush=True)
        registry = CollectorRegistry()
        registry.register(collector)
        try:
            server, thread = serve(registry, args.host, args.port)
        except OSError as exc:
            print(f"{PROG}: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr, flush=True)
            return 1
        if stop is None:
            stop = threading.Event()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
        print(f"{PROG}: serving http://{args.host}:{server.server_port}/metrics", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
        server.shutdown()
        server.server_close()
        thread.join(5)
        return 0
    finally:
        if module is not None:
            try:
                module.nvmlShutdown()
            except module.NVMLError as exc:
                log.warning("nvmlShutdown failed: %s", exc)


if __name__ == "__main__":
    sys.exit(main())
