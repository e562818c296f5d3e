"""The machine a process trains on: the device, CPU threads, bf16 autocast and a one-line hardware name."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch


def pick_device(name: str) -> torch.device:
    """``auto`` → CUDA when available, else CPU. Raises ``ValueError`` for CUDA asked where there is none."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for, but no CUDA GPU is available")
    return torch.device(name)


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """True when the CPU computes bf16 matmuls natively (``avx512_bf16`` or ``amx_bf16`` among the flags of
    ``/proc/cpuinfo``, or of ``cpuinfo`` when given). Without them, bf16 autocast is emulated and was measured ~10×
    *slower* than fp32 on an AVX2-only AMD EPYC; with ``avx512_bf16``, ~2.4× faster (2 threads vs fp32 on 1)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[-1].split())
    return bool(flags & {"avx512_bf16", "amx_bf16"})


#: Environment variable that decides what ``--precision auto`` means on this machine, ``bf16`` or ``fp32``, whatever
#: the CPU's flags say. It lets one machine run the test suite as the other kind of CPU would: ``bf16`` on an
#: AVX2-only CPU takes the code paths of an ``avx512_bf16`` one (emulated: slow but correct), ``fp32`` on a bf16 CPU
#: those of an AVX2 one. Unset (or ``native``): the CPU decides.
AUTO_PRECISION_ENV = "EXPLORER_AUTO_PRECISION"


def auto_precision_override(environ=os.environ) -> str | None:
    """``"bf16"`` or ``"fp32"`` when :data:`AUTO_PRECISION_ENV` forces what ``auto`` means, else ``None``.

    Raises:
        ValueError: the variable holds anything but ``bf16``, ``fp32``, ``native`` or nothing.
    """
    value = environ.get(AUTO_PRECISION_ENV, "").strip().lower()
    if value in ("", "native"):
        return None
    if value not in ("bf16", "fp32"):
        raise ValueError(f"{AUTO_PRECISION_ENV}={value!r}: use bf16, fp32 or native")
    return value


def resolve_precision(precision: str, device: torch.device) -> str:
    """``"bf16"`` or ``"fp32"``: ``auto`` is bf16 on CUDA and on CPUs with native bf16 (:func:`cpu_has_native_bf16`),
    unless :data:`AUTO_PRECISION_ENV` says otherwise (:func:`auto_precision_override`)."""
    if precision != "auto":
        return precision
    forced = auto_precision_override()
    if forced:
        return forced
    if device.type == "cuda" or (device.type == "cpu" and cpu_has_native_bf16()):
        return "bf16"
    return "fp32"


def autocast(device: torch.device, precision: str = "auto"):
    """bf16 autocast for ``precision`` (resolved by :func:`resolve_precision`) on ``device``, else a no-op context.
    Weights, optimizer state and the loss stay fp32; only the matmuls inside run in bf16."""
    enabled = resolve_precision(precision, device) == "bf16"
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled)


def default_threads(world_size: int = 1, environ=os.environ) -> int:
    """CPU threads per process when ``--threads`` is 0: ``OMP_NUM_THREADS`` if set, else the cores this process may
    use (``sched_getaffinity``) divided among the ``world_size`` processes (at least 1)."""
    if environ.get("OMP_NUM_THREADS", "").isdigit() and int(environ["OMP_NUM_THREADS"]) > 0:
        return int(environ["OMP_NUM_THREADS"])
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(world_size, 1))


def hardware(world_size: int = 1) -> str:
    """The device, as ``"NVIDIA H100 80GB HBM3"`` or ``"CPU (…)"``; ``"N × …"`` for N data-parallel processes."""
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
    else:
        threads = torch.get_num_threads()
        name = (
            f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"{threads} thread{'' if threads == 1 else 's'})"
        )
    return f"{world_size} × {name}" if world_size > 1 else name
