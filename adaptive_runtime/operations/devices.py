"""Which arms this machine can run (:class:`DeviceProbe`, probing for a GPU driver before any
GPU library is imported), and whether torch is capturing a CUDA graph now.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from .._concurrency.forks import renew_after_fork
from .._imported import imported
from ..backend import Backend, Choice

__all__ = ["DeviceProbe", "cuda_graph_capturing"]

_log = logging.getLogger(__name__)


def cuda_graph_capturing() -> bool:
    """Whether torch is capturing a CUDA graph on the current stream (``False`` without torch
    or CUDA). While it is, work is recorded, not run: nothing can be timed or waited for, and
    a synchronisation would break the capture."""
    torch = imported("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except RuntimeError:  # (a torch build without CUDA)
        return False


class DeviceProbe:
    """Which arms this machine can run, found once and then cached.

    SIMD and SCALAR always run (numpy is a dependency). GPU is available when torch sees a
    CUDA device, else when JAX has a GPU device, else when numba sees a real CUDA device —
    asking only the libraries the program has imported: the runtime never imports one inside
    a call (importing torch took seconds on a 2-core machine). A numpy program on a GPU
    machine gets the GPU arm once it imports torch (or ``numba.cuda``, or JAX with a GPU
    plugin), or where the runtime imported torch when it was made
    (``RuntimeConfig.import_frameworks``); the answer is found again when that set grows.
    Tests pass ``gpu=True`` to mark the GPU arm available without a device (a test double).

    Probed on first need, not at construction, and cheaply where there is no GPU: without a
    GPU driver (see ``_gpu_driver_present``) the answer takes milliseconds and no library is
    asked.
    """

    def __init__(self, *, gpu: bool | None = None) -> None:
        self._gpu = gpu
        self._asked: frozenset[str] = frozenset()  # the GPU libraries imported when probed
        self._given = gpu  # (what a pickled copy keeps: a stand-in, never a probe result)
        self._lock = threading.Lock()
        # (the probe may run on the metric reader's thread, from a callback's decide())
        renew_after_fork(self, DeviceProbe._renew_lock)

    def __reduce__(self) -> tuple[Any, ...]:
        # The receiving process probes its own devices; only a stand-in given to the
        # constructor (tests' ``gpu=True``) travels.
        return (_device_probe, (self._given,))

    def _renew_lock(self) -> None:
        self._lock = threading.Lock()

    @property
    def gpu_available(self) -> bool:
        if self._given is not None:
            return self._given
        if self._gpu is None or (not self._gpu and _gpu_libraries() != self._asked):
            with self._lock:
                libraries = _gpu_libraries()
                if self._gpu is None or (not self._gpu and libraries != self._asked):
                    self._asked = libraries
                    self._gpu = _probe_gpu(libraries)
        return self._gpu

    def available(self, choice: Choice) -> bool:
        return self.gpu_available if choice.arm is Backend.GPU else True


def _device_probe(gpu: bool | None) -> DeviceProbe:
    """A :class:`DeviceProbe` unpickled (keyword-only arguments cannot be given by pickle)."""
    return DeviceProbe(gpu=gpu)


def _gpu_driver_present() -> bool:
    """Whether this machine has a GPU driver any GPU library could use — asked in
    milliseconds, before a GPU library is imported to ask about devices (importing torch
    takes ~1 s and ~300 MiB; JAX starts threads): a machine without one has no GPU arm.

    Linux: the CUDA driver library loads (``libcuda.so.1``, also what containers with the
    NVIDIA toolkit and WSL2 provide), or a ROCm (``/dev/kfd``) or WSL2 GPU (``/dev/dxg``)
    device exists. Windows: ``nvcuda.dll`` loads. macOS has no CUDA. Elsewhere: unknown, so
    the libraries are asked. Loading the driver library initialises nothing (no ``cuInit``),
    so a process that forks afterwards can still use CUDA in its children.
    """
    if sys.platform == "darwin":
        return False
    if sys.platform.startswith("linux"):
        if os.path.exists("/dev/kfd") or os.path.exists("/dev/dxg"):
            return True
        names: tuple[str, ...] = ("libcuda.so.1", "libcuda.so")
    elif sys.platform == "win32":
        names = ("nvcuda.dll",)
    else:
        return True
    import ctypes

    for name in names:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


# The libraries that can tell whether there is a GPU, each asked only once the program has
# imported it (see DeviceProbe).
_GPU_LIBRARIES = ("torch", "jax", "numba.cuda")


def _gpu_libraries() -> frozenset[str]:
    return frozenset(name for name in _GPU_LIBRARIES if imported(name) is not None)


def _probe_gpu(libraries: frozenset[str]) -> bool:
    # Ask only the GPU libraries the program imported, and never let a broken driver crash
    # start-up: a GPU we cannot use is simply not a candidate.
    if not libraries or not _gpu_driver_present():
        return False
    probes: list[tuple[str, Callable[[Any], bool]]] = [
        ("torch", lambda torch: bool(torch.cuda.is_available())),
    ]
    if importlib.util.find_spec("jax_plugins") is not None:
        # JAX sees a GPU only through a plugin package (jax[cuda12] installs one)
        probes.append(("jax", lambda jax: any(d.platform == "gpu" for d in jax.devices())))
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in ("", "0"):
        # The CUDA simulator says "available" on any machine; it is not a GPU.
        probes.append(("numba.cuda", lambda cuda: bool(cuda.is_available())))
    for name, probe in probes:
        module = imported(name) if name in libraries else None
        if module is None:
            continue
        try:
            if probe(module):
                return True
        except Exception as exc:  # a missing driver raises all sorts of things
            _log.debug("GPU probe via %s failed: %s", name, exc)
    return False
