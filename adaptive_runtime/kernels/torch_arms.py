"""The built-in operations on torch tensors: ATen is always a candidate, numba competes.

Calls with torch CPU tensors form the families ``torch`` (float32/float64), ``torch:float16``
and ``torch:bfloat16``, each also with ``+grad`` when autograd is recording (see
``_families``). Their arms:

- SIMD: the ATen call a torch user writes anyway (``torch.nn.functional.gelu``,
  ``torch.mm``, ...). With ``+grad`` it records ATen's own backward, as the plain call would:
  wrapping it in a Python autograd function costs ~10 µs a call each way (measured on the
  development machine's MLP step: 1.18-1.27x the plain step), more than a small layer's kernel;
- SCALAR (float32/float64 only: numba has no bfloat16): the operation's numba loop on the
  tensor's memory (``.numpy()`` shares it). With ``+grad`` it runs inside an autograd function
  (``_autograd``) whose backward is itself adaptive: ``gelu.backward`` and friends, or the
  forward operations that make up the gradient (a matmul's gradients are matmuls);
- GPU: the operation's GPU arm (torch on the CUDA device; copies are differentiable).

CUDA tensors (the family ``device``) run the GPU arm only, unless the user lets CPU arms
compete there (``RuntimeConfig.host_arms_on_device``): the device family's CPU arms are round
trips through the host to these families' CPU arms (``_host_round_trip``).

The backward operations get the same families: ATen's backward kernels and numba's loops
(ATen only where autograd records through them: a double backward). Every operation's ATen
call, its gradients and its GPU arm come from its record (``record``): nothing here is per
operation.
"""

from __future__ import annotations

import importlib.util
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._imported import imported
from ..backend import Backend
from ..operations import DEVICE_FAMILY
from ._autograd import autograd_arm
from ._families import GRAD, TORCH, numba_arms, torch_families
from ._gpu import add_gpu_arm
from ._host_round_trip import host_round_trip
from .record import OperationRecord, with_backward

if TYPE_CHECKING:
    from ..operations import Registrar

__all__ = ["numpy_through_torch", "register", "torch_installed", "torch_modules"]

_log = logging.getLogger(__name__)


_modules: list[Any] = []  # [torch, torch.nn.functional], once a tensor has been seen


def _load() -> list[Any]:
    """Keep torch's modules for the arms (once per process, on an arm's first call). torch is
    the program's: an arm that needs it is a candidate only once it is imported
    (``Implementation.needs``), and nothing here imports it."""
    torch = imported("torch")
    if torch is None:
        raise RuntimeError("an ATen arm ran before the program imported torch (the runtime "
                           "never imports it inside a call)")
    _prime_gelu(torch)
    _modules[:] = [torch, torch.nn.functional]
    return _modules


def _prime_gelu(torch: Any) -> None:
    """Run ATen's gelu once on float64 zeros, before any arm times it.

    Why: in this torch build (2.13, CPU), ATen's float64 gelu, forward and backward, runs
    ~6x slower until its vectorised loop has once seen an element within ~1e-8 of zero; then
    it stays fast for the rest of the process, with bit-for-bit the same results (checked on
    110,000 values in [-40, 40]). Measured on the development machine, one thread, 100,000
    elements: 2.1 ms before, 0.31 ms after (forward), 1.9 and 0.45 ms (backward); float32
    is unaffected. The cause is inside ATen and not known. Normally distributed inputs hold
    such an element about once per 10^8, so a process flipped at a random point: an arm
    explored in the slow state was left for the rest of a run that later found it fastest.
    Priming is one call on 64 elements, once per process; it also speeds up the user's
    own float64 gelu calls. (Called by ``_load``, which runs once per process.)"""
    try:
        torch.nn.functional.gelu(torch.zeros(64, dtype=torch.float64))
    except Exception as exc:  # a speed-up only: an odd torch build must not fail the arms
        _log.debug("float64 gelu not primed: %r", exc)


# (an arm runs per call: a list read is cheaper than a dict lookup and two attributes)
def _torch() -> Any:
    return (_modules or _load())[0]


def _functional() -> Any:
    return (_modules or _load())[1]


def torch_modules() -> list[Any]:
    """``[torch, torch.nn.functional]`` for an ATen arm of an operation's record (torch is
    the program's, imported already: see ``_load``)."""
    return _modules or _load()


def torch_installed() -> bool:
    """Whether torch can be imported here (found, not imported)."""
    return importlib.util.find_spec("torch") is not None


def numpy_through_torch(aten: Callable[[Any], Any]) -> Callable[[np.ndarray], np.ndarray]:
    """A SIMD arm for numpy arrays that runs ATen's kernel on them without a copy
    (``torch.from_numpy`` shares the memory, ``.numpy()`` shares it back): vectorised and
    threaded where numpy has no such call (``erf``, for gelu) or makes several passes over the
    data (a normalisation). Registered with ``needs="torch"``: a candidate once the program
    has imported torch, which it never imports itself."""

    def arm(x: np.ndarray) -> np.ndarray:
        if not x.flags.writeable:  # (torch.from_numpy warns on read-only memory)
            x = x.copy()
        return aten(_torch().from_numpy(x)).numpy()

    arm.__name__ = arm.__qualname__ = f"{aten.__name__}_on_numpy"
    return arm


def register(rt: Registrar, records: tuple[OperationRecord, ...],
             fallback: Callable[[], Registrar]) -> None:
    """Add the torch families' arms to the operations of ``records`` with an ATen call (and
    their backward operations), registered on ``rt`` already, numpy families included. Each
    record gives ATen's call (``aten``, or ATen's own function: ``aten_builtin``), the GPU
    arm and the gradients a numba arm's autograd function runs. The backward arms hold ``rt``
    weakly: a backward pass that outlives it runs on ``fallback()`` (the process default)."""
    ref = weakref.ref(rt)

    def run(name: str, *args: Any) -> Any:
        live = ref()
        if live is None:  # (a backward pass outliving its runtime)
            live = fallback()
        return live.run(name, *args)

    torch = imported("torch")
    if torch is not None:  # ATen's own functions are the arms (aten_builtin): prime it now
        _load()
    for record in with_backward(records):
        if record.aten is None:
            continue
        name, is_backward = record.name, record.is_backward
        builtin = record.aten_builtin(torch) if record.aten_builtin and torch else None
        aten = builtin or record.aten
        gradients = record.gradients(run) if record.gradients is not None else None
        save_output = record.backward_needs == "output"
        op = rt.operation(name)
        gpu = op.implementation_for(Backend.GPU)
        shared = numba_arms(op)
        for family in torch_families():
            grad = family.endswith(GRAD)
            op.add_implementation(Backend.SIMD, aten, family=family, warm_up=True,
                                  threads="torch")
            if gpu is not None:
                add_gpu_arm(op, gpu.fn, family)
            if family not in (TORCH, TORCH + GRAD) or (grad and is_backward):
                continue  # numba has no half precision; a double backward stays with ATen
            for arm, variant, impl in shared:
                fn, surcharge = impl.fn, None
                if grad:
                    if gradients is None:
                        raise ValueError(f"{name}: a record with numba arms and an ATen call "
                                         f"needs its gradients")
                    fn = autograd_arm(name, fn, gradients, save_output=save_output)
                    surcharge = fn.surcharge_us  # type: ignore[attr-defined]
                op.add_implementation(arm, fn, name=variant, family=family,
                                      threads=impl.threads, compile_count=impl.compile_count,
                                      surcharge_us=surcharge)
        if gpu is not None and not is_backward:
            _add_round_trips(op, gpu.fn)


def _add_round_trips(op: Any, gpu: Callable[..., Any]) -> None:
    """The device family's CPU arms (candidates only where ``host_arms_on_device`` asks): for
    each CPU implementation of the torch family, a round trip through the host to the torch
    family of the call's dtype (and ``+grad``)."""
    for impl in op.implementations(TORCH):
        if impl.backend is Backend.GPU:
            continue
        choice = impl.choice

        def implementation_of(family: str, choice: Any = choice) -> Any:
            return next((i for i in op.implementations(family) if i.choice is choice), None)

        trip = host_round_trip(op.name, choice, implementation_of, gpu)
        op.add_implementation(impl.backend, trip, name=impl.name, family=DEVICE_FAMILY,
                              threads=impl.threads, needs="torch",
                              compile_count=impl.compile_count, warm_up=impl.warm_up,
                              floor_us=trip.floor_us,  # type: ignore[attr-defined]
                              surcharge_us=trip.surcharge_us)  # type: ignore[attr-defined]


