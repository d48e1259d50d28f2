"""The GPU arm of the built-in operations: torch on a CUDA device.

A GPU call (:func:`gpu_arm`) whose inputs are all on the device already (CUDA tensors, numba
device arrays: a training loop's) launches the kernel on the current stream and returns: no
synchronisation, no memory query, no host round trip, as the plain torch call. The caller's
next operations queue behind it. A timed call does not wait either: it records a pair of timing
events on the current stream around the kernel (the implementation's ``device_timing``,
registered with the arm by :func:`add_gpu_arm`; :meth:`CudaDevice.timing`), and the runtime
learns the device time between them once the second has completed, asked at later timed calls
and never waited for. A device without events (a test double may have none) is waited for
through ``sync`` (:func:`synchronize`): before the timer starts and on the result. Calls with
inputs on the device are learned apart (``on_device``: :func:`inputs_on_device`).

A call with host inputs (numpy arrays, CPU tensors):

1. the inputs are copied to the device — the transfer is part of the call, so the runtime
   learns what a GPU call really costs for the inputs it gets. Before the arm is ever tried on
   a key, its ``floor_us`` prices the copies at a bandwidth measured once
   (:func:`transfer_estimate_us`): where they alone would lose, it is not tried;
2. before anything is copied or launched, the device's free memory is checked against what the
   call needs (the inputs it must copy, the result and the operation's workspace): a call that
   would not fit raises :class:`GpuMemoryError` and the runtime runs it on the next arm;
3. the device is synchronised before returning (the result goes back to the host anyway);
4. the result goes back to the caller's array type and device.

Inputs already on the device run only the implementations that run there (the operations'
device family: ``Operation.family_twin``; CPU arms join only where the user asks, as round
trips: ``_host_round_trip``). A call on device inputs is not checked against the free memory:
it runs as the plain torch call would, and torch's ``OutOfMemoryError`` reaches the caller
(wrapped in ``AllBackendsFailedError``, the cause kept). For host inputs, CUDA running out of
memory anyway (another process took the memory) is an arm failure like any: the runtime falls
back to the next arm and quarantines the GPU for that key with back-off.

The device is an object (:class:`CudaDevice`) so tests can stand in a double that keeps
tensors on the CPU: every step above runs but the CUDA kernel launch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from .._concurrency.forks import after_fork_in_child
from .._imported import imported
from ..backend import Backend
from ._arrays import host, host_dtype, is_tensor, like

__all__ = ["CudaDevice", "Device", "GpuMemoryError", "GpuUnsupportedError", "NumbaCudaDevice",
           "add_gpu_arm", "gpu_arm", "inputs_on_device", "itemsize", "nbytes", "set_device",
           "transfer_estimate_us"]

_log = logging.getLogger(__name__)

# Share of the free device memory a call may plan to use: the allocator rounds up and other
# work may be in flight.
MEMORY_HEADROOM = 0.9
_BANDWIDTH_PROBE_BYTES = 16 << 20


class GpuMemoryError(RuntimeError):
    """The call would not fit in the device's free memory; it was not sent to the GPU."""

    def __init__(self, operation: str, needed: int, free: int) -> None:
        super().__init__(f"{operation}: needs {needed / 2**20:.1f} MiB on the GPU, "
                         f"{free / 2**20:.1f} MiB free — not sent to the GPU")
        self.operation, self.needed, self.free = operation, needed, free


class GpuUnsupportedError(RuntimeError):
    """The GPU device found has no kernel for this operation (numba path, no torch)."""


class Device(Protocol):
    """What the GPU arm needs from a device. ``kind``: ``"torch"`` or ``"numba"``, which
    kernels it runs. Optionally ``timing()``: a started ``operations.DeviceTiming`` (timing
    events on the current stream), with which timed calls on device inputs never wait;
    without it they wait through ``synchronize``."""

    kind: str

    def free_bytes(self) -> int: ...

    def to_device(self, x: Any, like: Any = None) -> Any:
        """``x`` copied to ``like``'s GPU (if on this device), else to the current one; for
        tensors, a copy autograd records."""

    def is_on_device(self, x: Any) -> bool: ...

    def synchronize(self) -> None: ...


class CudaDevice:
    """torch's current CUDA device, as it is at each call (a ``torch.cuda.device(...)`` block
    of the caller's holds), and its current stream."""

    kind = "torch"

    def __init__(self) -> None:
        import torch  # (made where the program imported torch: see _default_device)

        self._torch = torch
        self.device = torch.device("cuda")  # (no index: the current device when used)

    def free_bytes(self) -> int:
        return int(self._torch.cuda.mem_get_info()[0])

    def to_device(self, x: Any, like: Any = None) -> Any:
        tensor = x if is_tensor(x) else self._torch.from_numpy(np.ascontiguousarray(x))
        where = like.device if self.is_on_device(like) else self.device
        return tensor.to(where, non_blocking=False)

    def is_on_device(self, x: Any) -> bool:
        return is_tensor(x) and x.device.type == "cuda"

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()

    def timing(self) -> _EventTiming:
        """A started timing of work queued from now on the current stream."""
        event = self._torch.cuda.Event
        return _EventTiming(event(enable_timing=True), event(enable_timing=True))


class _EventTiming:
    """Two CUDA events (torch's or numba's) on the current stream: the device time between
    them, asked for without waiting (``DeviceTiming``)."""

    __slots__ = ("_elapsed_ms", "end", "start")

    def __init__(self, start: Any, end: Any, elapsed_ms: Callable[[Any, Any], float]
                 | None = None) -> None:
        self.start, self.end = start, end
        self._elapsed_ms = elapsed_ms
        start.record()

    def stop(self) -> None:
        self.end.record()

    def ready(self) -> bool:
        return bool(self.end.query())

    def elapsed_us(self) -> float:
        if self._elapsed_ms is not None:
            return float(self._elapsed_ms(self.start, self.end)) * 1000.0
        return float(self.start.elapsed_time(self.end)) * 1000.0


class NumbaCudaDevice:
    """numba's CUDA device, for machines with a GPU and no CUDA-enabled torch (the kernels are
    in ``_cuda_kernels.py``)."""

    kind = "numba"

    def __init__(self) -> None:
        from numba import cuda

        self._cuda = cuda

    def free_bytes(self) -> int:
        free = self._cuda.current_context().get_memory_info()[0]
        return int(min(free, 1 << 62))  # (the simulator reports infinity)

    def to_device(self, x: Any, like: Any = None) -> Any:
        return self._cuda.to_device(np.ascontiguousarray(host(x)))

    def is_on_device(self, x: Any) -> bool:
        return hasattr(x, "copy_to_host")  # a numba device array

    def synchronize(self) -> None:
        self._cuda.synchronize()

    def timing(self) -> _EventTiming:
        """A started timing of work queued from now on the default stream."""
        cuda = self._cuda
        return _EventTiming(cuda.event(timing=True), cuda.event(timing=True),
                            cuda.event_elapsed_time)


def _default_device() -> Device:
    """torch's CUDA device when torch has CUDA, else numba's, else torch's (which fails on
    first use: the runtime then falls back to a CPU arm) — asking only the libraries the
    program has imported (the GPU arm is a candidate only once one of them is: see
    ``operations.DeviceProbe``); nothing is imported inside the call that asks."""
    torch, cuda = imported("torch"), imported("numba.cuda")
    for ask, device_of in ((torch and torch.cuda, CudaDevice), (cuda, NumbaCudaDevice)):
        try:
            if ask is not None and ask.is_available():
                return device_of()
        except Exception as exc:  # a broken driver: not this path
            _log.debug("%s unavailable: %s", device_of.__name__, exc)
    if torch is None:
        raise GpuUnsupportedError("no GPU library is imported (torch or numba.cuda): the "
                                  "runtime never imports one inside a call")
    return CudaDevice()


_lock = threading.Lock()
_device: Device | None = None
_bandwidth: float | None = None  # host to device, bytes per second


def _renew_lock() -> None:
    # (device() may run on the metric reader's thread: a forked child gets its own lock)
    global _lock
    _lock = threading.Lock()


after_fork_in_child(_renew_lock)


def device() -> Device:
    """The device GPU calls run on (torch's current CUDA device unless one was set)."""
    global _device
    if _device is None:
        with _lock:
            if _device is None:
                _device = _default_device()
    return _device


def set_device(new: Device | None, *, bandwidth_bytes_per_s: float | None = None) -> None:
    """Run GPU calls on ``new`` (a test double, say); ``None``: back to the CUDA default.
    ``bandwidth_bytes_per_s`` sets the copy bandwidth instead of measuring it."""
    global _device, _bandwidth
    if bandwidth_bytes_per_s is not None and not bandwidth_bytes_per_s > 0:
        raise ValueError(f"bandwidth_bytes_per_s must be > 0, got {bandwidth_bytes_per_s!r}")
    with _lock:
        _device, _bandwidth = new, bandwidth_bytes_per_s


def transfer_estimate_us(nbytes: int) -> float:
    """Microseconds to copy ``nbytes`` between host and device, from a host-to-device
    bandwidth measured once (a 16 MiB copy)."""
    global _bandwidth
    if _bandwidth is None:
        dev = device()
        probe = np.zeros(_BANDWIDTH_PROBE_BYTES // 8)
        dev.to_device(probe)  # (first use pays set-up costs)
        dev.synchronize()
        start = time.perf_counter()
        dev.to_device(probe)
        dev.synchronize()
        _bandwidth = probe.nbytes / max(time.perf_counter() - start, 1e-9)
    return nbytes / _bandwidth * 1e6


def inputs_on_device(*args: Any) -> bool:
    """Whether a call's arrays are already on the GPU device (the built-in operations'
    ``on_device``). The first array argument tells: an operation's ``size_of`` has checked
    that they are all of one kind, on one device. Asked only where the GPU arm can run."""
    for a in args:
        if type(a) is np.ndarray:
            return False
        if is_tensor(a):
            return device().is_on_device(a)
    return False


def itemsize(x: Any) -> int:
    """Bytes per element of an array or tensor."""
    return int(x.element_size()) if is_tensor(x) else int(x.itemsize)


def nbytes(x: Any) -> int:
    """Bytes of an array's or tensor's elements (0 for anything else)."""
    if is_tensor(x):
        return int(x.numel()) * int(x.element_size())
    return int(x.nbytes) if isinstance(x, np.ndarray) else 0


def gpu_arm(operation: str, kernel: Callable[..., Any], *,
            result_bytes: Callable[..., int], template: int = 0, workspace: float = 0.0,
            numba_kernel: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """The GPU implementation of ``operation`` from ``kernel``, a function of torch tensors
    on the device (``numba_kernel``: of numba device arrays, for the numba path).
    ``result_bytes(*args)`` sizes its result; ``workspace`` is extra memory as a share of the
    inputs' size. The result comes back like the argument at ``template``."""
    check_memory, device_timing = _memory_hooks(operation, result_bytes, workspace)

    def arm(*args: Any) -> Any:
        dev = device()
        run = kernel if dev.kind == "torch" else numba_kernel
        if run is None:
            raise GpuUnsupportedError(f"{operation}: no numba CUDA kernel (install torch with "
                                      "CUDA for this operation on the GPU)")
        arrays, resident = _arrays_of(dev, args)
        if resident:
            # Everything on the device: launched, not waited for, no memory query.
            return _back(run(*args), args[template], dev)
        check_memory(dev, arrays, args)
        on_device = [dev.to_device(a) if (isinstance(a, np.ndarray) or is_tensor(a))
                     and not dev.is_on_device(a) else a for a in args]
        out = run(*on_device)
        dev.synchronize()
        return _back(out, args[template], dev)

    def floor_us(*args: Any) -> float:
        """What this arm's copies take at least: host inputs to the device and the result
        back, at the measured bandwidth (nothing for inputs already on the device)."""
        dev = device()
        moved = sum(nbytes(a) for a in args
                    if (isinstance(a, np.ndarray) or is_tensor(a)) and not dev.is_on_device(a))
        if not dev.is_on_device(args[template]):
            moved += result_bytes(*args)
        return transfer_estimate_us(moved) if moved else 0.0

    arm.__name__ = arm.__qualname__ = f"{operation}_gpu"
    # (the registration passes on floor_us, sync and device_timing: add_gpu_arm; a host
    # round trip on device inputs reads result_bytes and template: _host_round_trip)
    for name, value in (("floor_us", floor_us), ("sync", synchronize),
                        ("device_timing", device_timing), ("result_bytes", result_bytes),
                        ("template", template)):
        setattr(arm, name, value)
    return arm


def _memory_hooks(operation: str, result_bytes: Callable[..., int], workspace: float
                  ) -> tuple[Callable[..., None], Callable[[tuple[Any, ...]], Any]]:
    """:func:`gpu_arm`'s memory check, and its ``device_timing``, which runs the check."""

    def check_memory(dev: Device, arrays: list[Any], args: tuple[Any, ...]) -> None:
        """Raise :class:`GpuMemoryError` where the call would not fit in the device's free
        memory: the inputs it must copy there, its result and its workspace."""
        to_copy = sum(nbytes(a) for a in arrays if not dev.is_on_device(a))
        inputs = sum(nbytes(a) for a in arrays)
        needed = to_copy + result_bytes(*args) + int(workspace * inputs)
        free = dev.free_bytes()
        if needed > MEMORY_HEADROOM * free:
            raise GpuMemoryError(operation, needed, free)

    def device_timing(args: tuple[Any, ...]) -> Any:
        """The arm's ``device_timing``, run on timed calls only (every exploring call, a
        re-trial after a failure, 1-in-N of a converged key): for inputs all on the device, a
        started timing on the device where it has timing events; else ``None`` (timed on
        the host: a host call's copy back synchronises anyway, or ``sync`` waits). Inputs on
        the device are not checked against its free memory: the GPU arm is their only
        candidate, so a call runs as the plain torch call would (the caching allocator may
        well fit it), and a real out-of-memory error reaches the caller."""
        dev = device()
        if not _arrays_of(dev, args)[1]:
            return None
        timing = getattr(dev, "timing", None)
        if timing is None:
            return None
        try:
            return timing()
        except Exception as exc:  # (no timing events here, numba's CUDA simulator say: wait)
            _log.debug("GPU timing events unavailable, timed calls wait instead: %r", exc)
            return None

    return check_memory, device_timing


def add_gpu_arm(op: Any, arm: Callable[..., Any], family: str = "") -> None:
    """Register ``arm`` (made by :func:`gpu_arm`) as ``op``'s GPU implementation for
    ``family``, with its copy floor and the ``sync`` its timed calls wait through."""
    op.add_implementation(Backend.GPU, arm, family=family,
                          floor_us=arm.floor_us,  # type: ignore[attr-defined]
                          sync=arm.sync,  # type: ignore[attr-defined]
                          device_timing=arm.device_timing)  # type: ignore[attr-defined]


def _arrays_of(dev: Device, args: tuple[Any, ...]) -> tuple[list[Any], bool]:
    """A call's arrays (numpy, tensors, the device's own) and whether all are on ``dev``."""
    arrays = [a for a in args if isinstance(a, np.ndarray) or is_tensor(a)
              or dev.is_on_device(a)]
    return arrays, all(dev.is_on_device(a) for a in arrays)


def synchronize(values: Any) -> None:
    """A timed GPU call's ``sync``, given its arguments (before the timer starts) or its
    result (before it stops): wait until the device has finished its queued work where any of
    them is on the device. (A call with host inputs synchronised inside the arm already: its
    result came back to the host.)"""
    dev = device()
    for value in values if isinstance(values, tuple) else (values,):
        if dev.is_on_device(value):
            dev.synchronize()
            return


def _back(out: Any, model: Any, dev: Device) -> Any:
    """The device result as the caller's array type, dtype and device."""
    if dev.kind == "numba":
        if dev.is_on_device(model):
            return out
        return like(out.copy_to_host() if dev.is_on_device(out) else out, model)
    if dev.is_on_device(model):
        return out
    if is_tensor(model):
        return out.to(model.device) if dev.is_on_device(out) else out
    value = out.detach().cpu().numpy()
    if value.ndim == 0:
        return host_dtype(model).type(value)
    return value
