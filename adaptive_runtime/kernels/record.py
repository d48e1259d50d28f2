"""One operation, one record: everything the runtime knows about an operation, declared once.

An :class:`OperationRecord` (frozen) names the operation, its kind and its size check, and
lists its implementations per input family: the numpy family's arms (:class:`HostArm`: numba
loops, numpy, ATen on the array's memory), the GPU arm, ATen's call for torch tensors, the
``jax.numpy`` function for JAX arrays; its gradients (how torch autograd differentiates a
numba arm, through adaptive operations) beside its backward operation (a record of its own);
and the ``torch.library`` custom-op schema ``torch.compile`` sees. A built-in operation is one
module, ``kernels/<op>.py``, holding its record; third-party operations publish theirs through
the entry-point group ``adaptive_runtime.operations``.

The adapters read the records when a runtime registers its operations, never per call: this
module (the numpy family), ``torch_arms`` (the torch families), ``jax_arms`` (the JAX
families), ``torch._compile`` (the custom operators), ``torch._autocast`` and ``ops``. The
implementations they register, and their names, are what the call path runs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backend import Backend
from ._arrays import host_arm
from ._compile import compile_count
from ._families import input_family
from ._gpu import add_gpu_arm, inputs_on_device

if TYPE_CHECKING:
    from ..operations import Registrar

__all__ = ["CustomOp", "Gradients", "HostArm", "OperationRecord", "Run", "TorchModule",
           "host_arm", "register_host", "with_backward"]

# run(name, *args): an adaptive operation's call (eager: the runtime's; compiled: a custom op)
Run = Callable[..., Any]
# gradients(run) -> backward(inputs, output, grad_output): one gradient (or None) per input
Gradients = Callable[[Run], Callable[[tuple[Any, ...], Any, Any], tuple[Any, ...]]]


@dataclass(frozen=True)
class HostArm:
    """One implementation of the numpy family (``Operation.add_implementation``'s arguments).
    ``fn`` takes numpy arrays; wrapped by :func:`host_arm` it takes the torch and JAX families'
    arrays too (on their memory), which is how those families run the numba arms.

    ``kernel``: the numba dispatcher (or a tuple of them) whose compilations the arm's calls
    count (its ``compile_count``). ``when``: ``"torch"`` — registered only where torch is installed;
    ``"no torch"`` — only where it is not; ``""`` — always."""

    backend: Backend
    fn: Callable[..., Any]
    name: str = ""
    kernel: Any = None
    threads: str = ""
    needs: str = ""
    warm_up: bool = False
    when: str = ""


@dataclass(frozen=True)
class TorchModule:
    """The ``torch.nn`` module class (``name``: its name in ``torch.nn``) that
    ``adaptive_runtime.torch.adapt()`` swaps for ``Adaptive<name>``, a subclass whose forward
    runs the operation; ``doc`` is that subclass's docstring.

    The forward's arguments: the input; where ``weights``, the module's ``weight`` and
    ``bias``, then ``settings(module)`` (``layer_norm``: its ``eps``; only with ``weights``).
    ``why_not(module)``: why a module of the class cannot be swapped (a configuration the
    operation does not compute), ``None`` where it can. ``reroute(module, x)``: where one call
    is not the operation as it stands, the functional form's further arguments for it (an axis
    other than the last: its ``dim``), else ``None``."""

    name: str
    doc: str
    weights: bool = False
    settings: Callable[[Any], tuple[Any, ...]] | None = None
    why_not: Callable[[Any], str | None] | None = None
    reroute: Callable[[Any, Any], tuple[Any, ...] | None] | None = None


@dataclass(frozen=True)
class CustomOp:
    """The ``torch.library`` custom operator ``torch.ops.adaptive_runtime.<name>`` (the
    operation's name with ``.`` as ``_``) that ``torch.compile`` keeps in its graphs.

    ``schema``: its torch schema, e.g. ``"(Tensor x) -> Tensor"``. ``fake(*args)``: empty
    tensors of the result's shapes (``None``: one like the first argument). Its backward is
    the record's ``gradients`` (or ``gradients`` here, where the compiled graph needs other
    calls), run through the custom operators. ``call(run, *args)``: the operator's body where
    it is not ``run(name, *args)`` (``run``: the default runtime's).

    A forward's operator comes with its functional form in :mod:`adaptive_runtime.torch`
    (``art.<name>(..., runtime=None)``): ``functional(call)`` where it takes more than its
    arrays (``call(runtime, name, args)``: autocast, then the runtime or, while
    ``torch.compile`` traces, the operator), else one of one or two tensors; ``doc`` its
    docstring. ``module``: the ``torch.nn`` module ``adapt()`` swaps for one running it."""

    schema: str
    fake: Callable[..., Any] | None = None
    gradients: Gradients | None = None
    call: Callable[..., Any] | None = None
    doc: str = ""
    functional: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None
    module: TorchModule | None = None


@dataclass(frozen=True)
class OperationRecord:
    """Everything about one operation (see the module docstring).

    ``aten_builtin(torch)``: ATen's own function where its signature is the operation's (run
    with no Python frame between the runtime and ATen), else ``None``. ``jax_one_array``: the
    operation takes one array (a call's family is its own: no tracer check on the others).
    ``jax_call(jit, tracer_in, traced)``: the jitted call, where its arguments are not all
    arrays (``jit.fn or jit.get()``: the jitted function; a call whose arrays hold a tracer
    (``tracer_in(arrays)``) returns ``traced(jit.plain, args)``). ``jax_template``: the
    argument whose dtype and device a numba arm's JAX result takes.
    ``backward_needs``: what the gradients read of the forward call — ``"inputs"`` or
    ``"output"``. ``autocast``: under ``torch.autocast`` the inputs are cast as ATen's call
    would be. ``doc``: the docstring of ``ar.ops.<name>``; ``arity``: its parameters (0: any);
    ``public(get_runtime)``: ``ar.ops.<name>`` itself, where it takes optional arguments.
    """

    name: str
    kind: str
    size: Callable[..., int]
    host: tuple[HostArm, ...]
    gpu: Callable[..., Any] | None = None
    aten: Callable[..., Any] | None = None
    aten_builtin: Callable[[Any], Callable[..., Any] | None] | None = None
    jnp: Callable[..., Any] | None = None
    jax_one_array: bool = False
    jax_call: Callable[[Any, Any, Any], Callable[..., Any]] | None = None
    jax_static: tuple[int, ...] = ()
    jax_template: int = 0
    gradients: Gradients | None = None
    backward_needs: str = "inputs"
    backward: OperationRecord | None = None
    is_backward: bool = False
    custom_op: CustomOp | None = None
    autocast: bool = False
    doc: str = ""
    arity: int = 0
    public: Callable[[Callable[[], Any]], Callable[..., Any]] | None = None

    @property
    def custom_op_name(self) -> str:
        """Its name among ``torch.ops.adaptive_runtime``."""
        return self.name.replace(".", "_")


def with_backward(records: tuple[OperationRecord, ...]) -> Iterator[OperationRecord]:
    """Every record of ``records``, then their backward operations' (where they have one)."""
    yield from records
    for record in records:
        if record.backward is not None:
            yield record.backward


def _torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None


def _compile_count(kernel: Any) -> Any:
    """``compile_count`` of one kernel or the sum of several (``None``: none, or no numba)."""
    if kernel is None:
        return None
    if not isinstance(kernel, tuple):
        return compile_count(kernel)
    counts = [compile_count(k) for k in kernel]
    if any(c is None for c in counts):
        return None
    total = counts[0]
    for count in counts[1:]:
        total = total + count
    return total


def register_host(rt: Registrar, record: OperationRecord) -> None:
    """Register ``record``'s operation on ``rt`` with its numpy family's arms and its GPU arm
    (the torch and JAX families are added by their adapters)."""
    op = rt.register(record.name, size=record.size, kind=record.kind,
                     on_device=inputs_on_device if record.gpu is not None else None,
                     family=input_family)
    torch = _torch_installed()
    for arm in record.host:
        if (arm.when == "torch" and not torch) or (arm.when == "no torch" and torch):
            continue
        op.add_implementation(arm.backend, arm.fn, name=arm.name, threads=arm.threads,
                              needs=arm.needs, warm_up=arm.warm_up,
                              compile_count=_compile_count(arm.kernel))
    if record.gpu is not None:
        add_gpu_arm(op, record.gpu)
