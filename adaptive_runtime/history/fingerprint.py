"""What a saved history was measured on: a small JSON object naming this machine and libraries.

Timings learned on one CPU, BLAS or library version say little about another, so a history file
carries the fingerprint of the process that wrote it, and one whose fingerprint differs from
this process's, in a field its keys depend on, is not applied (see
``AdaptiveRuntime.load_history``; which fields a file's keys depend on:
:mod:`adaptive_runtime.history.depends` — a torch-only file does not care about JAX).

Fields (all strings or integers; ``None`` where this process cannot tell cheaply, and such a
field is not compared):

- ``machine`` (``x86_64``, ``arm64``), ``cpu`` (the CPU model), ``cpu_count`` (logical CPUs);
- ``python`` (major.minor), ``blas`` (numpy's BLAS library and version);
- ``numpy``, ``numba``, ``torch``, ``jax``: installed versions, ``"none"`` when not installed
  (read with ``importlib.metadata``: nothing is imported to find them);
- ``gpu`` and ``gpu_driver``: the NVIDIA GPU models and driver version from
  ``/proc/driver/nvidia`` (Linux, no CUDA call), else from torch when it is already imported
  and CUDA already initialised; ``"none"`` on a Linux machine with no GPU driver loaded;
- ``numba_threads``, ``torch_threads`` and ``blas_threads``: the threads numba's, torch's
  and numpy's BLAS's parallel kernels run on, where the library is already imported (BLAS's
  read through threadpoolctl; a threaded kernel's learned cost is what it costs with that
  many threads: ``NUMBA_NUM_THREADS``, ``torch.set_num_threads``, ``OPENBLAS_NUM_THREADS``).
  Recorded, not compared: a DataLoader worker runs torch on one thread, and must still load
  the file its parent saved. (While a program runs, a change of a pool's size has the
  implementations on it measured afresh: see :mod:`adaptive_runtime.threads`.)

Computed once per process (the GPU fields again only while still unknown; the thread counts
at every call: a program may change them).
"""

from __future__ import annotations

import contextlib
import glob
import importlib.metadata
import os
import platform
import sys
import threading
from collections.abc import Iterable, Mapping

from .._concurrency.forks import after_fork_in_child
from .._imported import imported
from ..threads import thread_counts

__all__ = ["FINGERPRINT_LABELS", "difference", "differences", "hardware_fingerprint"]

Fingerprint = dict[str, "str | int | None"]

# Field -> how a difference is named in a warning ("cpu model 'X' here, 'Y' in file").
FINGERPRINT_LABELS = {
    "machine": "architecture",
    "cpu": "cpu model",
    "cpu_count": "cpu count",
    "python": "python",
    "blas": "BLAS",
    "numpy": "numpy",
    "numba": "numba",
    "torch": "torch",
    "jax": "jax",
    "gpu": "GPU",
    "gpu_driver": "GPU driver",
}
_LIBRARIES = ("numpy", "numba", "torch", "jax")
_NVIDIA = "/proc/driver/nvidia"

_lock = threading.Lock()
_cached: Fingerprint | None = None


def _renew_lock() -> None:
    # (the history saver's thread may hold it: a forked child gets its own, see _concurrency.forks)
    global _lock
    _lock = threading.Lock()


after_fork_in_child(_renew_lock)


def hardware_fingerprint() -> Fingerprint:
    """This process's fingerprint (a fresh dict each call; see the module docstring)."""
    global _cached
    with _lock:
        if _cached is None:
            _cached = _static_fields()
            _cached.update(_gpu_fields())
        elif _cached["gpu"] is None:
            # (torch may have initialised CUDA since: ask again while nothing is known)
            _cached.update(_gpu_fields())
        fingerprint = dict(_cached)
    fingerprint.update(_thread_fields())
    return fingerprint


def differences(here: Mapping[str, object], there: Mapping[str, object],
                fields: Iterable[str] | None = None) -> list[str]:
    """What differs between two fingerprints, as ``"<label> <here> here, <there> in file"``, in
    the order of :data:`FINGERPRINT_LABELS`: every compared field, or only ``fields`` (which a
    history file's keys depend on: :func:`adaptive_runtime.history.fingerprint_differences`);
    fields unknown (``None`` or absent) on either side are not compared."""
    wanted = FINGERPRINT_LABELS.keys() if fields is None else set(fields)
    return [text for field in FINGERPRINT_LABELS if field in wanted
            and (text := difference(field, here.get(field), there.get(field))) is not None]


def difference(field: str, mine: object, theirs: object) -> str | None:
    """Field ``field`` of this process's fingerprint (``mine``) against a file's, as
    ``"<label> <mine> here, <theirs> in file"``; ``None`` when they agree or either is
    unknown."""
    if mine is None or theirs is None or mine == theirs:
        return None
    label = FINGERPRINT_LABELS.get(field, field)
    if isinstance(mine, str) and field in ("cpu", "gpu", "blas", "machine", "gpu_driver"):
        return f"{label} {mine!r} here, {theirs!r} in file"
    return f"{label} {mine} here, {theirs} in file"


def _static_fields() -> Fingerprint:
    fields: Fingerprint = {
        "machine": platform.machine() or None,
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": "{}.{}".format(*sys.version_info[:2]),
        "blas": _blas(),
    }
    for name in _LIBRARIES:
        try:
            fields[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            fields[name] = "none"
        except Exception:  # a broken installation's metadata: unknown, not compared
            fields[name] = None
    return fields


def _thread_fields() -> Fingerprint:
    """The thread counts of the pools the kernels run on (:mod:`adaptive_runtime.threads`):
    numba's (its configured count until its threading layer is up), torch's where imported,
    the BLAS library's through threadpoolctl — never importing a library, nor starting
    numba's threading layer."""
    counts = thread_counts()
    numba = imported("numba")
    if counts["numba"] is None and numba is not None:
        # (a partial import or an odd build: unknown, not compared)
        with contextlib.suppress(Exception):
            counts["numba"] = int(numba.config.NUMBA_NUM_THREADS)
    return {f"{pool}_threads": count for pool, count in counts.items()}


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError:
        text = ""
    found: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        name = name.strip().lower()
        if sep and name not in found and value.strip():
            found[name] = value.strip()
    # x86 names its model; ARM Linux gives an implementer and part number
    if "model name" in found:
        return found["model name"]
    if "cpu part" in found:
        return f"implementer {found.get('cpu implementer', '?')} part {found['cpu part']}"
    return platform.processor() or None


def _blas() -> str | None:
    try:
        import numpy

        config = numpy.show_config(mode="dicts")  # numpy >= 1.26; prints nothing in this mode
        blas = config["Build Dependencies"]["blas"]
        return f"{blas['name']} {blas.get('version', '?')}"
    except Exception:  # older numpy, or a build that does not say: unknown, not compared
        return None


def _gpu_fields() -> dict[str, str | None]:
    if os.path.isdir(_NVIDIA):
        models = set()
        for info in glob.glob(os.path.join(_NVIDIA, "gpus", "*", "information")):
            try:
                with open(info, encoding="utf-8", errors="replace") as f:
                    for line in f:
                        name, _, value = line.partition(":")
                        if name.strip() == "Model":
                            models.add(value.strip())
            except OSError:
                pass
        driver = None
        try:
            with open(os.path.join(_NVIDIA, "version"), encoding="utf-8",
                      errors="replace") as f:
                words = f.readline().split()
            # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..."
            driver = next((w for w in words if w[:1].isdigit() and "." in w), None)
        except OSError:
            pass
        if models:
            return {"gpu": ", ".join(sorted(models)), "gpu_driver": driver}
    torch = imported("torch")
    if torch is not None:
        try:
            cuda = torch.cuda
            if cuda.is_initialized():  # (never initialise CUDA here: a fork after it breaks)
                names = {cuda.get_device_name(i) for i in range(cuda.device_count())}
                return {"gpu": ", ".join(sorted(names)) or "none", "gpu_driver": None}
        except Exception:
            pass
    if sys.platform.startswith("linux") and not os.path.isdir(_NVIDIA) \
            and not os.path.exists("/dev/kfd"):
        return {"gpu": "none", "gpu_driver": "none"}  # no NVIDIA or AMD GPU driver loaded
    return {"gpu": None, "gpu_driver": None}
