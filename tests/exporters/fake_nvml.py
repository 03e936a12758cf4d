"""A fake of the part of nvidia-ml-py (``pynvml``) that exporters.nvml uses.

``FakeNVML`` stands in for the module: same function names and arguments, same constants and
error codes (checked against the real pynvml in test_nvml.py), and errors raised as
``self.NVMLError(code)`` with a ``.value`` code, as pynvml does. Raw values are in NVML's own
units (percent, milliwatts, millijoules, MHz, KB/s) so the tests see the conversions.

Failure injection: ``FakeGPU.fail`` maps an NVML function name to the error code it raises for
that GPU; ``FakeGPU.lost = True`` makes every call on the GPU's handle raise GPU_IS_LOST
(hot-unplug after the handle was taken); ``FakeNVML.fail`` does the same for system calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1

CONSTANTS = {k: v for k, v in dict(globals()).items() if k.startswith("NVML_")}


class NVMLError(Exception):
    """Like pynvml.NVMLError: ``.value`` is the NVML return code; str() is NVML's message."""

    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return self._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")


@dataclass
class FakeGPU:
    """One card's raw NVML readings, in NVML units."""

    uuid: str
    name: str
    util_gpu: int = 0  # percent
    util_memory: int = 0  # percent
    memory_total: int = 80 * 1024**3  # bytes
    memory_used: int = 0  # bytes
    power_mw: int = 0
    power_limit_mw: int = 700_000
    energy_mj: int = 0
    temperature_c: int = 30
    sm_clock_mhz: int = 0
    memory_clock_mhz: int = 0
    pcie_tx_kbs: int = 0
    pcie_rx_kbs: int = 0
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes or None)
    fail: dict[str, int] = field(default_factory=dict)  # NVML function name -> error code
    lost: bool = False


class _Handle:
    """Opaque like pynvml's c_nvmlDevice_t pointer."""

    def __init__(self, gpu: FakeGPU) -> None:
        self.gpu = gpu


class FakeNVML:
    """Hand an instance to ``GPUCollector(nvml=...)`` or ``main(nvml=...)`` in place of pynvml."""

    NVMLError: type[Exception] = NVMLError

    def __init__(self, gpus: list[FakeGPU], *, driver_version: str = "550.54.15",
                 nvml_version: str = "12.550.54.15", cuda_driver_version: int = 12040,
                 init_error: int | None = None) -> None:
        self.gpus = list(gpus)
        self.driver_version = driver_version
        self.nvml_version = nvml_version
        self.cuda_driver_version = cuda_driver_version
        self.init_error = init_error
        self.fail: dict[str, int] = {}
        self.initialized = False
        self.init_calls = 0
        self.shutdown_calls = 0
        self.calls = 0

    # -- library lifecycle and system queries
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.NVMLError(self.init_error)
        self.initialized = True
        self.init_calls += 1

    def nvmlShutdown(self) -> None:
        self._system("nvmlShutdown")
        self.initialized = False
        self.shutdown_calls += 1

    def _system(self, fn: str) -> None:
        self.calls += 1
        if not self.initialized:
            raise self.NVMLError(NVML_ERROR_UNINITIALIZED)
        if fn in self.fail:
            raise self.NVMLError(self.fail[fn])

    def nvmlSystemGetDriverVersion(self) -> str:
        self._system("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._system("nvmlSystemGetNVMLVersion")
        return self.nvml_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._system("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._system("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._system("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise self.NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[index]
        if "nvmlDeviceGetHandleByIndex" in gpu.fail:
            raise self.NVMLError(gpu.fail["nvmlDeviceGetHandleByIndex"])
        return _Handle(gpu)

    # -- per-device queries
    def _gpu(self, handle: _Handle, fn: str) -> FakeGPU:
        self._system("")
        gpu = handle.gpu
        if gpu.lost:
            raise self.NVMLError(NVML_ERROR_GPU_IS_LOST)
        if fn in gpu.fail:
            raise self.NVMLError(gpu.fail[fn])
        return gpu

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=gpu.util_gpu, memory=gpu.util_memory)

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> Any:
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=gpu.memory_total, used=gpu.memory_used,
                               free=gpu.memory_total - gpu.memory_used)

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return self._gpu(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:
        return self._gpu(handle, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTemperature")
        if sensor != NVML_TEMPERATURE_GPU:
            raise self.NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetClockInfo(self, handle: _Handle, type: int) -> int:  # pynvml's parameter name
        gpu = self._gpu(handle, "nvmlDeviceGetClockInfo")
        clocks = {NVML_CLOCK_SM: gpu.sm_clock_mhz, NVML_CLOCK_MEM: gpu.memory_clock_mhz}
        if type not in clocks:
            raise self.NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return clocks[type]

    def nvmlDeviceGetPcieThroughput(self, device: _Handle, counter: int) -> int:
        gpu = self._gpu(device, "nvmlDeviceGetPcieThroughput")
        rates = {NVML_PCIE_UTIL_TX_BYTES: gpu.pcie_tx_kbs, NVML_PCIE_UTIL_RX_BYTES: gpu.pcie_rx_kbs}
        if counter not in rates:
            raise self.NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return rates[counter]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[Any]:
        gpu = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF,
                                computeInstanceId=0xFFFFFFFF) for pid, used in gpu.processes]


for _name, _value in CONSTANTS.items():  # the module-level constants, as pynvml has them
    setattr(FakeNVML, _name, _value)


def fixed_fake() -> FakeNVML:
    """The fake behind tests/fixtures/nvml/expected.prom: three GPUs, one of each fate.

    GPU 0 reads fully; GPU 1 has no energy counter or PCIe counters (NOT_SUPPORTED, quiet) and its
    power read fails (UNKNOWN, counted); GPU 2 has fallen off the bus (GPU_IS_LOST, counted once).
    """
    h100 = FakeGPU(
        uuid="GPU-11111111-2222-3333-4444-555555555555", name="NVIDIA H100 80GB HBM3",
        util_gpu=87, util_memory=42, memory_total=85_520_809_984, memory_used=71_000_000_000,
        power_mw=250_000, power_limit_mw=700_000, energy_mj=123_456_789, temperature_c=64,
        sm_clock_mhz=1980, memory_clock_mhz=2619, pcie_tx_kbs=1500, pcie_rx_kbs=250_000,
        processes=[(4242, 70_000_000_000), (777, None), (5151, 512 * 1024**2), (5151, 512 * 1024**2)])
    a10g = FakeGPU(
        uuid="GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", name="NVIDIA A10G",
        util_gpu=0, util_memory=0, memory_total=24_146_608_128, memory_used=1_048_576,
        power_limit_mw=300_000, temperature_c=31, sm_clock_mhz=210, memory_clock_mhz=405,
        fail={"nvmlDeviceGetTotalEnergyConsumption": NVML_ERROR_NOT_SUPPORTED,
              "nvmlDeviceGetPcieThroughput": NVML_ERROR_NOT_SUPPORTED,
              "nvmlDeviceGetPowerUsage": NVML_ERROR_UNKNOWN})
    lost = FakeGPU(uuid="GPU-deadbeef-0000-0000-0000-000000000000", name="NVIDIA H100 80GB HBM3", lost=True)
    return FakeNVML([h100, a10g, lost])
