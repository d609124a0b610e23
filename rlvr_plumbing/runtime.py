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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rlvr_plumbing.checks import available_host_memory, fits_in_memory, fmt_bytes

__all__ = ["resolve_device", "package_version", "run_metadata", "available_memory", "check_memory", "fmt_bytes"]

if TYPE_CHECKING:  # torch is imported where it is used: a command that never touches it (rlvr-audit) saves ~3 s
    import torch

#: below this many entries, "auto" keeps a matrix on the CPU (the transfer costs more)
SMALL = 1 << 20


def resolve_device(device: str | torch.device | None = "auto", W: Any = None) -> torch.device:
    """The compute device for ``device=`` (DESIGN.md conventions).

    ``"auto"``/``None``: the device of ``W`` if it is a CUDA tensor; CUDA if
    ``torch.cuda.is_available()`` and ``W`` is ``None`` or has more than 2^20 entries;
    else the CPU.  ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a ``torch.device`` are taken as
    given; CUDA without a CUDA runtime is refused.
    """
    import torch

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
    if threads is None:
        import torch

        threads = torch.get_num_threads()
    return {
        "package_version": package_version(),
        "settings": dict(settings),
        "seed": seed,
        "device": None if device is None else str(device),
        "threads": int(threads),
    }


def available_memory(device: str | torch.device = "cpu") -> int:
    """Bytes that a new allocation can use now: on the CPU the host's
    (:func:`rlvr_plumbing.checks.available_host_memory`: ``MemAvailable``, capped by a cgroup
    limit), on CUDA the free memory of the device."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        return int(free)
    return available_host_memory()


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
    import torch

    fits_in_memory(nbytes, what, available=available_memory(device), fraction=fraction,
                   where=f" on {torch.device(device)}")
