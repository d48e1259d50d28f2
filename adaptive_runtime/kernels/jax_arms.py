"""The built-in operations on JAX arrays: the jitted ``jax.numpy`` call is always a candidate,
numba competes.

Calls with JAX arrays form the families ``jax`` (float32/float64), ``jax:float16`` and
``jax:bfloat16`` (see ``_families``); each operation returns a JAX array of its input's dtype on
its input's device. Their arms:

- SIMD: the operation written in ``jax.numpy`` / ``jax.nn`` / ``jax.lax`` — what a JAX user
  writes — compiled by ``jax.jit`` (XLA fuses it: an activation or a normalisation runs in
  one pass over the data). JAX dispatches asynchronously: a jitted call returns before its result is
  computed, and its work overlaps the Python that follows. The CPU arms are timed as the
  program sees them, never blocked on: what a call holds its caller up — the jitted call's
  launch (and its work, where XLA runs it on the calling thread), the SCALAR arm's wait for
  its inputs, its loop and the hand-back. Blocking a timed call's inputs and result (tried)
  drained JAX's pipeline on every timed call and made an eager loop 1.3-2x slower than the
  plain one with the very same jitted calls; so numba wins a key only where it costs the
  program less than XLA's launch (small arrays), else the plain call runs. XLA
  compiles on the first call of each shape and dtype: such a call is not learned from
  (``compile_count``: the jitted functions' compiled specialisations, and every compilation JAX
  reports through ``jax.monitoring``), nor is the arm's first call (``warm_up``). ``dot``,
  ``matmul``, ``linear`` and ``conv1d`` ask for ``Precision.HIGHEST``: the same float32
  arithmetic as the other arms wherever XLA would otherwise use TF32/bfloat16 passes (GPUs; on
  the CPU it changes nothing);
- SCALAR (float32/float64 only: numba computes in neither float16 nor bfloat16): the
  operation's numba loop — the default family's SCALAR arm — on a numpy view of the array
  (``np.asarray`` shares a CPU array's memory: no copy), its result handed back as a JAX array
  on the input's device (``_arrays.to_jax``: on the CPU, without a copy);
- GPU (only where JAX has a GPU: ``jax.devices("gpu")``): the same jitted function on the GPU,
  inputs copied there and the result back where they were not on it already; a timed call
  blocks on its inputs before the timer and on its result before it stops (``sync``: the
  copies and the device's work are what this arm costs, not its launch). Where JAX has
  one, the SIMD arm runs on the CPU device (inputs on the GPU are copied to the host), as the
  other families' CPU arms do.

Tracers — calls under ``jax.jit``, ``jax.grad`` or ``jax.vmap`` — form the family
``jax:traced``, which runs the plain ``jax.numpy`` implementation untimed (``add_untimed``):
such a call records a computation instead of running it, so its timing would be the tracing.
JAX differentiates, batches and compiles through it as through any ``jax.numpy`` code (a
call with any tracer among its arrays — ``jax.grad`` with respect to a weight only — is
traced; the arms also run the plain implementation on a tracer and count the call as a
compilation, so it is never learned from).

jax is never imported by this module or by registration (a numpy program must not load it):
it is loaded by the first call with a JAX array, which can only exist where the caller
imported jax.

Measured on the development machine (2 shared cores — other jobs running — AMD EPYC with
AVX-512, jax 0.10.2 CPU, numba 0.68; float32, microseconds, median of repeats after warm-up,
best of two to four runs). "jit": the SIMD arm, blocked; "jit sync": the same with
``jax_cpu_enable_async_dispatch`` off; "numba": the SCALAR arm on JAX arrays, conversions
included; "numpy": the numpy family's SIMD arm on numpy arrays, for scale (for some operations
that is ATen on the array's memory; BLAS with ``OPENBLAS_NUM_THREADS=1``: two OpenBLAS threads
took 16-24 ms for a 256²-512² product on this machine that day). Each operation's module
(``kernels/<op>.py``) lists its figures in its docstring.

A blocked jitted call costs 12-25 us before any work (jax's C++ dispatch, then XLA's CPU
runtime hands the computation to a worker thread and back); the SCALAR arm's conversions cost
about as much (``np.asarray`` ~1 us an array, ``to_jax`` ~7 us), so up to ~1e3-1e4 elements the
two are close and the runtime learns which wins. From there XLA's fused, vectorised code wins
by 4-16x (activations, normalisations, products and their gradients), except where numba's
loop is as good (elementwise add/scale/relu, memory-bound). On a busy machine the hand-over to
XLA's thread varies (a small call took 15-130 us across runs); with async dispatch off
(a process-wide JAX setting, the user's to choose) the call runs on the calling thread. XLA's
single-channel convolution is 20-40x slower than a sum of k shifted slices on the CPU (n = 1e5,
k = 31: 8 ms against 0.4 ms), so the 1-D ``conv1d`` is written so (up to 64 taps).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backend import Backend
from ._arrays import is_jax, jax_host, to_jax
from ._families import JAX, JAX_TRACED, jax_families, numba_arms
from ._jax_numpy import jax_compilations, jax_libraries
from .record import OperationRecord, with_backward

if TYPE_CHECKING:
    from ..operations import Registrar

__all__ = ["block", "register"]

# PJRT plug-ins (CUDA, ROCm) live in this namespace package: found without importing jax
_GPU_PLUGINS = "jax_plugins"


class _Jit:
    """An operation's ``jax.jit``-compiled function, made on first use (so registering it
    imports nothing)."""

    __slots__ = ("fn", "plain", "static")

    def __init__(self, plain: Callable[..., Any], static: tuple[int, ...] = ()) -> None:
        self.plain = plain
        self.static = static
        self.fn: Any = None

    def get(self) -> Any:
        fn = self.fn
        if fn is None:
            fn = self.fn = jax_libraries()[0].jit(self.plain, static_argnums=self.static)
        return fn

    def compiled(self) -> int:
        """Specialisations compiled so far, plus every compilation JAX reported (and calls
        that met a tracer): what the runtime compares before and after a call."""
        fn = self.fn
        size = getattr(fn, "_cache_size", None) if fn is not None else None
        return jax_compilations[0] + (size() if size is not None else 0)


# --------------------------------------------------------------------------- arms


def _tracer_in(args: tuple[Any, ...]) -> bool:
    tracer = jax_libraries()[4]
    for a in args:  # noqa: SIM110 (a loop: no generator object per call)
        if isinstance(a, tracer):
            return True
    return False


def _traced(plain: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """A call whose family is concrete but which holds a tracer: recorded into the trace like
    a ``jax:traced`` call, and counted as a compilation so its timing is not learned."""
    jax_compilations[0] += 1
    return plain(*args)


def block(value: Any) -> None:
    """Wait until the JAX arrays in ``value`` (an array, or a tuple of arguments or results)
    are computed: the ``sync`` hook of the GPU arm (see ``Implementation.sync``)."""
    if type(value) is tuple:
        for item in value:
            ready = getattr(item, "block_until_ready", None)
            if ready is not None:
                ready()
        return
    ready = getattr(value, "block_until_ready", None)
    if ready is not None:
        ready()


def _jit_call(name: str, jit: _Jit, one_array: bool,
              made: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """The SIMD arm: the jitted function (asynchronous; see the module docstring for how it
    is timed), called as the record says (``made``: its ``jax_call``, for arguments that are
    not all arrays — numbers go in as Python scalars, weakly typed: the arrays' dtype wins)."""
    plain = jit.plain

    if made is not None:  # (the record's own: see OperationRecord.jax_call)
        call = made(jit, _tracer_in, _traced)
    elif one_array:  # one array: its family is its own
        def call(x: Any) -> Any:
            return (jit.fn or jit.get())(x)
    else:  # two arrays
        def call(a: Any, b: Any) -> Any:
            if _tracer_in((a, b)):
                return _traced(plain, (a, b))
            return (jit.fn or jit.get())(a, b)

    call.__name__ = call.__qualname__ = f"jax_jit_{name.replace('.', '_')}"
    return call


def _numba_arm(name: str, fn: Callable[..., Any], plain: Callable[..., Any],
               template: int) -> Callable[..., Any]:
    """A numba arm (the SCALAR loop, the threaded SIMD variant): the default family's numba
    kernel ``fn`` on numpy views of the arrays, its result (or results) handed back as JAX
    arrays on the input's device (that of argument ``template``)."""

    def arm(*args: Any) -> Any:
        if _tracer_in(args):
            return _traced(plain, args)
        model = args[template]
        result = fn(*[jax_host(a) if is_jax(a) else a for a in args])
        if type(result) is tuple:
            return tuple(to_jax(r, model) for r in result)
        return to_jax(result, model)

    arm.__name__ = arm.__qualname__ = f"numba_on_jax_{name.replace('.', '_')}"
    return arm


_gpu: list[Any] = []  # [JAX's first GPU device, or None], probed once


def _gpu_device() -> Any:
    if not _gpu:
        try:
            devices = jax_libraries()[0].devices("gpu")
        except RuntimeError:  # "Unknown backend: 'gpu' requested, but no platforms ..."
            devices = []
        _gpu[:] = [devices[0] if devices else None]
    return _gpu[0]


def _cpu_device() -> Any:
    return jax_libraries()[0].devices("cpu")[0]


def _placed(call: Callable[..., Any], device: Callable[[], Any]) -> Callable[..., Any]:
    """``call`` run on ``device()``: JAX inputs elsewhere are copied there and the result
    copied back to where the first one was (the copies are part of the timed call)."""

    def arm(*args: Any) -> Any:
        if _tracer_in(args):  # (see the module docstring: the plain implementation runs)
            return call(*args)
        target = device()
        if target is None:
            raise RuntimeError("JAX has no GPU device here")
        jax = jax_libraries()[0]
        home = next(a for a in args if is_jax(a)).devices()
        if home == {target}:
            return call(*args)
        out = call(*[jax.device_put(a, target) if is_jax(a) else a for a in args])
        back = jax.device_put(out, next(iter(home)) if len(home) == 1 else None)
        return back

    arm.__name__ = arm.__qualname__ = f"{call.__name__}_placed"
    return arm


def _jax_gpu_possible() -> bool:
    """Whether JAX may have a GPU, known without importing jax or starting its backends (that
    would start its threads, and make every later ``os.fork`` warn): whether a PJRT plug-in
    (CUDA, ROCm) is installed. Its GPU arm then finds out on its first call, when the caller's
    JAX arrays have started the backends anyway — and raises where JAX has no GPU after all,
    which the runtime sets aside like any failing arm."""
    return (importlib.util.find_spec("jax") is not None
            and importlib.util.find_spec(_GPU_PLUGINS) is not None)


_jits: dict[str, _Jit] = {}


def register(rt: Registrar, records: tuple[OperationRecord, ...]) -> None:
    """Add the JAX families' arms, and the untimed implementation of traced calls, to the
    operations of ``records`` with a ``jax.numpy`` function (and their backward operations),
    registered on ``rt`` already. Imports nothing."""
    gpu = _jax_gpu_possible()
    for record in with_backward(records):
        name, plain = record.name, record.jnp
        if plain is None:
            continue
        op = rt.operation(name)
        shared = numba_arms(op)
        jit = _jits.get(name)
        if jit is None:  # (one per operation, shared by every runtime: compiled once)
            jit = _jits[name] = _Jit(plain, static=record.jax_static)
        simd = _jit_call(name, jit, record.jax_one_array, record.jax_call)
        if gpu:
            simd, on_gpu = _placed(simd, _cpu_device), _placed(simd, _gpu_device)
        for family in jax_families():
            op.add_implementation(Backend.SIMD, simd, family=family, warm_up=True,
                                  compile_count=jit.compiled)
            if gpu:
                op.add_implementation(Backend.GPU, on_gpu, family=family, warm_up=True,
                                      compile_count=jit.compiled, sync=block)
            if family != JAX:  # (numba: no float16/bfloat16)
                continue
            for arm, variant, impl in shared:
                count = impl.compile_count
                op.add_implementation(
                    arm, _numba_arm(name, impl.fn, plain, record.jax_template), name=variant,
                    family=family, warm_up=True, threads=impl.threads,
                    compile_count=(lambda c=count: jax_compilations[0] + c()) if count is not None
                    else (lambda: jax_compilations[0]))
        op.add_untimed(JAX_TRACED, plain)
