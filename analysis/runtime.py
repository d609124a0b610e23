"""Where a computation runs and what a run records about itself.

* :func:`resolve_device` — the one device resolver (``device="auto"`` picks CUDA when present);
* :func:`package_version` — the installed version of rlvr-diagnostics;
* :func:`check_memory` — refuse a request that cannot fit, before any work starts, with the
  memory it would need and the memory there is (every simulator and the trainer);
* :func:`run_metadata` — the block every ``config.json`` / ``report.json`` carries:
  ``package_version``, ``settings``, ``seed``, ``device``, ``threads``.

Examples
--------
>>> resolve_device("cpu")
device(type='cpu')
>>> meta = run_metadata({"steps": 10}, seed=0, device="cpu")
>>> sorted(meta)
['device', 'package_version', 'seed', 'settings', 'threads']
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["resolve_device", "package_version", "run_metadata", "available_memory", "check_memory", "fmt_bytes"]

#: below this many entries, "auto" keeps a matrix on the CPU (the transfer costs more)
SMALL = 1 << 20


def resolve_device(device: str | torch.device | None = "auto", W: Any = None) -> torch.device:
    """The compute device for ``device=`` (DESIGN.md conventions).

    ``"auto"``/``None``: the device of ``W`` if it is a CUDA tensor; CUDA if
    ``torch.cuda.is_available()`` and ``W`` is ``None`` or has more than 2^20 entries;
    else the CPU.  ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a ``torch.device`` are taken as
    given; CUDA without a CUDA runtime is refused.
    """
    if device is None or (isinstance(device, str) and device == "auto"):
        if isinstance(W, torch.Tensor) and W.is_cuda:
            return W.device
        big = W is None or math.prod(W.shape) > SMALL
        return torch.device("cuda") if big and torch.cuda.is_available() else torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available; use 'auto' or 'cpu'")
    return dev


def package_version() -> str:
    """The installed version of rlvr-diagnostics (``"unknown"`` when it is not installed)."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("rlvr-diagnostics")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def run_metadata(settings: Mapping[str, Any], *, seed: Any = None, device: Any = None,
                 threads: int | None = None) -> dict[str, Any]:
    """``{"package_version", "settings", "seed", "device", "threads"}`` for a run's JSON file.

    ``threads`` defaults to torch's current intra-op thread count; ``device`` is written as a
    string.
    """
    return {
        "package_version": package_version(),
        "settings": dict(settings),
        "seed": seed,
        "device": None if device is None else str(device),
        "threads": torch.get_num_threads() if threads is None else int(threads),
    }


def fmt_bytes(n: float) -> str:
    """``1.5 GiB``-style size (binary units).

    >>> fmt_bytes(3 * 2**30), fmt_bytes(512)
    ('3.0 GiB', '512 B')
    """
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"  # pragma: no cover - the loop returns


def _cgroup_limit() -> float:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = open(path).read().strip()
        except OSError:
            continue
        if text.isdigit():
            return float(text)
    return math.inf


def available_memory(device: str | torch.device = "cpu") -> int:
    """Bytes that a new allocation can use now: on the CPU ``MemAvailable`` of ``/proc/meminfo``
    (capped by a cgroup limit), on CUDA the free memory of the device."""
    dev = torch.device(device)
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        return int(free)
    avail = math.inf
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = float(line.split()[1]) * 1024
                    break
    except OSError:  # pragma: no cover - not Linux
        pass
    if not math.isfinite(avail):  # pragma: no cover - not Linux
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return int(min(avail, _cgroup_limit()))


def check_memory(nbytes: float, what: str, *, device: str | torch.device = "cpu", fraction: float = 0.9) -> None:
    """``ValueError`` if ``what`` needs more than ``fraction`` of :func:`available_memory`.

    The message gives both numbers, so that a user can shrink the request (``nbytes`` is an
    estimate computed by the caller from its settings, in Python integers: no overflow).

    >>> check_memory(1024, "a tiny run")
    >>> check_memory(2**80, "rlvr-sim categorical (--N 1e24)")
    Traceback (most recent call last):
    ...
    ValueError: rlvr-sim categorical (--N 1e24) needs about 1073741824.0 PiB of memory on cpu; ... available
    """
    limit = available_memory(device) * fraction
    if nbytes > limit:
        raise ValueError(f"{what} needs about {fmt_bytes(nbytes)} of memory on {torch.device(device)}; "
                         f"{fmt_bytes(limit)} available")
