"""The arrays built-in kernels take: float32/float64 numpy arrays; torch tensors and JAX arrays
of those dtypes or of float16/bfloat16 (mixed-precision training).

numpy and numba arms compute on numpy arrays: :func:`host` views a torch CPU tensor without
a copy (``.numpy()`` shares its memory) and copies a CUDA tensor to the host. :func:`like`
turns a result back into the caller's array type, dtype and device, so an operation returns
what it was given whichever arm ran. For JAX arrays, :func:`jax_host` and :func:`to_jax` do
the same (a view of a CPU array's memory; a result handed to JAX without a copy).

Neither torch nor JAX is ever imported here: a tensor can only exist if the caller imported
its library already, so the modules it imported (``_imported.imported``: only once fully
imported) answer "is this a tensor?" for free. (JAX's own modules are reached once a JAX array
has come.)
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from .._imported import imported

__all__ = ["FLOAT_DTYPES", "LOW_PRECISION", "describe", "dtype_name", "host", "host_arm",
           "is_jax", "is_tensor", "jax_host", "like", "numpy_dtype", "to_jax"]

_log = logging.getLogger(__name__)

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# Float dtypes of tensors and JAX arrays, by name; the low-precision ones run only on the arms
# whose library computes in them (numba has no bfloat16, and its float16 is not vectorised).
TENSOR_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
LOW_PRECISION = frozenset({"float16", "bfloat16"})


def is_tensor(x: Any) -> bool:
    torch = imported("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def is_jax(x: Any) -> bool:
    """Whether ``x`` is a JAX array (a tracer under ``jax.jit`` / ``jax.grad`` included)."""
    jax = imported("jax")
    return jax is not None and isinstance(x, jax.Array)


def dtype_name(x: Any) -> str | None:
    """``"float32"`` and the like for a numpy array, torch tensor or JAX array (else ``None``)."""
    if isinstance(x, np.ndarray):
        return x.dtype.name
    if is_tensor(x):
        return str(x.dtype)[6:]  # "torch.float32"
    if is_jax(x):
        return str(x.dtype)
    return None


def numpy_dtype(x: Any) -> np.dtype | None:
    """The numpy dtype of an array, or of a float32/float64 tensor (else ``None``)."""
    if isinstance(x, np.ndarray):
        return x.dtype
    if is_tensor(x):
        torch = imported("torch")
        if x.dtype is torch.float32:
            return FLOAT_DTYPES[0]
        if x.dtype is torch.float64:
            return FLOAT_DTYPES[1]
    return None


def describe(x: Any) -> str:
    """``float32 array (3, 4)`` / ``torch.float64 tensor (5,) on cuda:0`` / ``jax bfloat16
    array (2,)`` / ``list``."""
    if isinstance(x, np.ndarray):
        return f"{x.dtype} array {tuple(x.shape)}"
    if is_tensor(x):
        where = "" if x.device.type == "cpu" else f" on {x.device}"
        return f"{x.dtype} tensor {tuple(x.shape)}{where}"
    if is_jax(x):
        return f"jax {x.dtype} array {tuple(x.shape)}"
    return type(x).__name__


def host(x: Any) -> np.ndarray:
    """``x`` as a numpy array: itself, a view of a CPU tensor, or a copy of a device tensor."""
    if isinstance(x, np.ndarray):
        return x
    tensor = x.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    return tensor.numpy()


def like(result: Any, template: Any) -> Any:
    """``result`` (a numpy array or scalar) as ``template``'s array type, dtype and device:
    a numpy scalar of its dtype for a 0-d result from numpy input, a tensor (0-d for a
    scalar) on its device from torch input."""
    if is_tensor(template):
        torch = imported("torch")
        array = np.asarray(result, dtype=host_dtype(template))
        out = torch.from_numpy(np.ascontiguousarray(array) if array.ndim else array)
        return out if template.device.type == "cpu" else out.to(template.device)
    if np.ndim(result) == 0:
        return template.dtype.type(result)
    return result if result.dtype == template.dtype else result.astype(template.dtype)


def host_dtype(x: Any) -> np.dtype:
    dtype = numpy_dtype(x)
    assert dtype is not None
    return dtype


def host_arm(fn: Callable[..., Any], *, template: int = 0) -> Callable[..., Any]:
    """A CPU arm from ``fn``, a kernel on numpy arrays: torch inputs are viewed as numpy and
    the result converted back (:func:`like` the argument at ``template``); a numpy scalar
    result gets the input's dtype. Inputs were checked by the operation's ``size_of``, so one
    argument tells the kind of all."""

    @functools.wraps(fn)
    def arm(*args: Any) -> Any:
        model = args[template]
        if type(model) is np.ndarray:
            result = fn(*args)
            if type(result) is tuple:  # (several results: gradients, say)
                return tuple(r if type(r) is np.ndarray else model.dtype.type(r)
                             for r in result)
            return result if type(result) is np.ndarray else model.dtype.type(result)
        result = fn(*[host(a) if is_tensor(a) else a for a in args])
        if type(result) is tuple:
            return tuple(like(r, model) for r in result)
        return like(result, model)

    return arm


# --------------------------------------------------------------------------- JAX arrays


def jax_host(x: Any) -> np.ndarray:
    """A JAX array as a numpy array: on the CPU a read-only view of its memory (no copy: JAX
    arrays are immutable), from another device a copy. Waits until ``x`` is computed."""
    return np.asarray(x)


# [put(array, template)], chosen on first use: see _choose_jax_put
_jax_put: list[Callable[[np.ndarray, Any], Any]] = []


def to_jax(result: Any, template: Any) -> Any:
    """``result`` (a numpy array, or a scalar: 0-d) as a JAX array of ``template``'s dtype,
    on its device (committed to it where ``template`` is). On the CPU the array's memory is
    taken over, not copied: a result computed on the host for a JAX caller is handed over, so
    nothing else may write to it afterwards."""
    array = np.asarray(result, dtype=template.dtype)
    put = _jax_put[0] if _jax_put else _choose_jax_put(array, template)
    return put(array, template)


def _choose_jax_put(array: np.ndarray, template: Any) -> Callable[[np.ndarray, Any], Any]:
    """How :func:`to_jax` puts arrays on a device, decided on its first call (``array`` and
    ``template`` are that call's): JAX's internal one-array transfer where it works — the one
    ``jax.device_put`` ends in, ~7 us for a small array on the development machine, where
    ``jax.device_put`` itself took ~95 us and ``jnp.asarray`` ~45 us, more than a small
    kernel — checked once against the array it must give; else ``jax.device_put``."""
    jax = imported("jax")

    def public(array: np.ndarray, template: Any) -> Any:
        devices = template.devices()
        return jax.device_put(array, next(iter(devices)) if len(devices) == 1 else None)

    put = public
    try:
        fast = _internal_jax_put(jax, public)
        out = fast(array, template)
        if (isinstance(out, jax.Array) and out.dtype == array.dtype
                and out.shape == array.shape and out.devices() == template.devices()
                and np.array_equal(np.asarray(out), array, equal_nan=True)):
            put = fast
        else:
            _log.debug("JAX's internal transfer gave %r: using jax.device_put", out)
    except Exception as exc:  # another JAX version: the public call always works
        _log.debug("JAX's internal transfer is not usable (%s): using jax.device_put", exc)
    _jax_put[:] = [put]
    return put


def _internal_jax_put(jax: Any, public: Callable[[np.ndarray, Any], Any]
                      ) -> Callable[[np.ndarray, Any], Any]:
    from jax._src.core import ShapedArray
    from jax._src.lib import xla_client

    batched_device_put = xla_client.batched_device_put
    single_device = jax.sharding.SingleDeviceSharding
    shardings: dict[Any, Any] = {}
    avals: dict[tuple[Any, ...], Any] = {}

    def put(array: np.ndarray, template: Any) -> Any:
        devices = template.devices()
        if len(devices) != 1:  # (a sharded template: the result goes to the default device)
            return public(array, template)
        (device,) = devices
        sharding = shardings.get(device)
        if sharding is None:
            sharding = shardings[device] = single_device(device)
        key = (array.shape, array.dtype)
        aval = avals.get(key)
        if aval is None:
            if len(avals) >= 1024:  # (bounded: shapes of a long run come and go)
                avals.clear()
            aval = avals[key] = ShapedArray(array.shape, array.dtype)
        return batched_device_put(aval, sharding, [array], [device],
                                  getattr(template, "_committed", True))

    return put
