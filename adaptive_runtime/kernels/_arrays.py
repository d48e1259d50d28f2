"""The arrays built-in kernels take: float32/float64 numpy arrays; torch tensors and JAX arrays
of those dtypes or of float16/bfloat16 (mixed-precision training).

numpy and numba arms compute on numpy arrays: :func:`host` views a torch CPU tensor without
a copy (``.numpy()`` shares its memory) and copies a CUDA tensor to the host. :func:`like`
turns a result back into the caller's array type, dtype and device, so an operation returns
what it was given whichever arm ran.

Neither torch nor JAX is ever imported here: a tensor can only exist if the caller imported
its library already, so ``sys.modules`` answers "is this a tensor?" for free.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["FLOAT_DTYPES", "LOW_PRECISION", "describe", "dtype_name", "host", "host_arm",
           "is_jax", "is_tensor", "like", "numpy_dtype"]

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# Float dtypes of tensors and JAX arrays, by name; the low-precision ones run only on the arms
# whose library computes in them (numba has no bfloat16, and its float16 is not vectorised).
TENSOR_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
LOW_PRECISION = frozenset({"float16", "bfloat16"})


def is_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def is_jax(x: Any) -> bool:
    """Whether ``x`` is a JAX array (a tracer under ``jax.jit`` / ``jax.grad`` included)."""
    jax = sys.modules.get("jax")
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
        torch = sys.modules["torch"]
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
        torch = sys.modules["torch"]
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
