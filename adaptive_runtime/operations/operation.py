"""An operation and its per-arm implementations: :class:`Operation`, :class:`Implementation`,
and what an operation sees of its runtime (:class:`OperationOwner`) and of a device timing
(:class:`DeviceTiming`).

Registration is strict and says exactly what is wrong: a duplicate implementation, one for an
arm that does not exist, a bad variant or family name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._imported import FRAMEWORKS
from ..backend import VARIANT_NAME, Backend, Choice, Kind, Variant, choice_of
from ..errors import RegistrationError
from ..threads import POOLS
from .devices import cuda_graph_capturing

__all__ = ["DEVICE_FAMILY", "DEVICE_SUFFIX", "FAMILY_SEPARATOR", "DeviceTiming",
           "Implementation", "Operation", "OperationOwner"]

# An operation's calls of one input family are learned as "<name>@<family>"; calls with inputs
# already on the GPU form the family "device".
FAMILY_SEPARATOR = "@"
DEVICE_FAMILY = "device"
DEVICE_SUFFIX = FAMILY_SEPARATOR + DEVICE_FAMILY
_FAMILY_NAME = re.compile(r"[A-Za-z0-9_.:+-]+")


@dataclass(frozen=True, slots=True)
class Implementation:
    """One kernel of one operation on one arm: the arm's primary implementation (registered
    without a name), or a variant of the arm (registered under a ``name``). ``choice`` is
    what the runtime learns it as: the arm for the primary one, else ``Variant(arm, name)``
    (spans and metrics carry the name as ``adaptive.variant``).

    ``compile_count`` (optional) returns how many specialisations the kernel has compiled so
    far — for a numba dispatcher, ``len(fn.overloads)``. A call during which it grows paid for
    compilation, and its timing is not learned from.

    ``floor_us`` (optional) returns, for a call's arguments, microseconds this arm takes at
    least, known without running it — the GPU arm's: moving host inputs to the device and the
    result back, at the measured bandwidth. An arm whose floor is well over what another arm
    was measured to take is not tried on that key.

    ``warm_up``: the arm's first call in a process (per operation and input family) pays for
    its library's lazy set-up and is not learned from (ATen's first call of an operator took
    3.8 ms here, its fifth 22 µs).

    ``surcharge_us`` (optional) returns, for a call's arguments, microseconds the arm will
    cost later, outside the call, that another arm would not: added to each timing learned.
    An arm that runs numba inside a torch autograd function charges the backward pass it
    adds (a Python autograd node and the adaptive backward operation), which ATen's own
    backward does not cost its forward.

    ``sync`` (optional), for a library that computes asynchronously (JAX): waits until the
    values in what it is given (a call's arguments, its result) are computed. The runtime
    calls it on a timed call's arguments before the timer starts and on its result before it
    stops, so the timing covers this call's work and no earlier one's; untimed calls stay
    asynchronous, as the plain library's calls are.

    ``device_timing`` (optional), for an arm that runs on a device asynchronously (CUDA):
    given a timed call's arguments just before its kernel, a started :class:`DeviceTiming`
    (events recorded on the device's current stream), or ``None`` where the call cannot be
    timed there (host inputs: it is timed on the host, through ``sync``). A call timed on the
    device neither waits for it nor is timed on the host: the runtime learns the elapsed
    device time once the timing is ready, looked at (never waited for) on later timed calls.

    ``threads``: the thread pool the kernel runs on (``"numba"``, ``"torch"``, ``"blas"``;
    ``""``: serial, or a pool the runtime does not read). When that pool's thread count
    changes while the program runs, what was learned of the implementation is measured
    afresh (see :mod:`adaptive_runtime.threads`).

    ``needs``: the framework the kernel calls (``"torch"``, ``"jax"``; ``""``: none beyond
    numpy and numba). The runtime never imports a framework inside a call, so such an
    implementation is a candidate only once the program has imported its framework (or the
    runtime did, when made: ``RuntimeConfig.import_frameworks``); a key made before then
    takes it up once the framework is imported.

    ``min_size``: the smallest call size (``size_of``) it is a candidate at; smaller calls do
    not try it (a one-thread variant of a kernel that runs serially below some size anyway).

    ``thread_count``: the threads of its pool it runs at (0: the pool's size), for the
    variants the runtime adds at fewer threads (``kernels/_thread_counts``): candidates only
    where ``RuntimeConfig.choose_threads``.
    """

    backend: Backend
    fn: Callable[..., Any]
    compile_count: Callable[[], int] | None = None
    floor_us: Callable[..., float] | None = None
    warm_up: bool = False
    surcharge_us: Callable[..., float] | None = None
    sync: Callable[[Any], None] | None = None
    device_timing: Callable[[tuple[Any, ...]], DeviceTiming | None] | None = None
    name: str = ""
    threads: str = ""
    needs: str = ""
    min_size: int = 0
    thread_count: int = 0
    choice: Choice = field(default=None, compare=False)  # type: ignore[assignment]
    # (derived) none of the hooks a timed call runs around the kernel: it is timed bare
    plain: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.choice is None:
            object.__setattr__(self, "choice", choice_of(self.backend, self.name))
        object.__setattr__(self, "plain", self.compile_count is None and not self.warm_up
                           and self.surcharge_us is None and self.sync is None
                           and self.device_timing is None)


class DeviceTiming(Protocol):
    """One timed call's kernel timed on its device without waiting for it (a pair of CUDA
    events): started when made, ``stop()`` once the kernel is launched; ``ready()`` never
    blocks; ``elapsed_us()`` once it is ready."""

    def stop(self) -> None: ...

    def ready(self) -> bool: ...

    def elapsed_us(self) -> float: ...


def _numba_compile_count(fn: Callable[..., Any]) -> Callable[[], int] | None:
    overloads = getattr(fn, "overloads", None)
    if isinstance(overloads, dict) and hasattr(fn, "py_func"):
        return lambda: len(overloads)  # (the same dict for the dispatcher's lifetime)
    return None


class OperationOwner(Protocol):
    """The runtime an operation is registered with, as the operation sees it: it runs the
    operation's calls, and hears when its implementations change."""

    def run(self, name: str, *args: Any) -> Any: ...

    def _implementations_changed(self, name: str) -> None: ...


class Operation:
    """A named operation with implementations on one or more arms: on each arm a primary
    one and, optionally, variants (named alternatives the runtime learns apart and chooses
    among, as it does among arms).

    Created by :meth:`AdaptiveRuntime.register`; add arms with :meth:`implementation`. Calling
    the operation runs it through its runtime (``op(x)`` is ``rt.run(op.name, x)``).
    """

    __slots__ = ("_families", "_impls", "_owner", "_untimed", "capturing", "family", "kind",
                 "name", "on_device", "size_of", "warmed")

    def __init__(self, name: str, size_of: Callable[..., int], kind: Kind,
                 owner: OperationOwner | None = None,
                 on_device: Callable[..., bool] | None = None,
                 family: Callable[..., str] | None = None) -> None:
        self.name = name
        self.size_of = size_of
        self.kind = kind
        # (optional) whether a call's inputs are already on the GPU: such calls are learned
        # apart from host calls (see device_twin)
        self.on_device = on_device
        # (optional) the input family of a call ("" for the default one): calls of another
        # family are learned apart, with that family's implementations (see family_twin)
        self.family = family
        # by choice, in registration order: the default family's
        self._impls: dict[Choice, Implementation] = {}
        self._families: dict[str, dict[Choice, Implementation]] = {}
        self._untimed: dict[str, Callable[..., Any]] = {}
        self._owner = owner
        # implementations whose first call in this process has run (not learned from)
        self.warmed: set[Choice] = set()
        # (the device family's twin) whether a CUDA graph is being captured now: its timed
        # calls then run untimed (see cuda_graph_capturing); None: never asked
        self.capturing: Callable[[], bool] | None = None

    @property
    def resident(self) -> bool:
        """Whether this is the device family's twin, whose inputs are on the GPU already (the
        one operation that asks about graph capture): its GPU arm comes first in its
        cold-start order, a CPU arm being a round trip through the host."""
        return self.capturing is not None

    def __repr__(self) -> str:
        arms = ", ".join(c.value for c in self._impls) or "no implementations"
        return f"<Operation {self.name!r} kind={self.kind.value} arms=[{arms}]>"

    def implementation(self, backend: Backend | str, *, name: str = "", family: str = "",
                       threads: str = "", needs: str = "",
                       ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator registering ``fn`` as a kernel of this operation on ``backend``: the
        arm's primary implementation, or — given a ``name`` — a variant of the arm, which
        the runtime times and chooses among as it does among arms. ``threads`` names the
        thread pool it runs on, ``needs`` the framework it calls (see
        :meth:`add_implementation`).

        Returns ``fn`` unchanged, so the kernel stays callable on its own.
        """
        arm = _arm(backend, self.name)

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.add_implementation(arm, fn, name=name, family=family, threads=threads,
                                    needs=needs)
            return fn

        return register

    def add_implementation(self, backend: Backend | str, fn: Callable[..., Any], *,
                           name: str = "", family: str = "", threads: str = "",
                           needs: str = "", min_size: int = 0, thread_count: int = 0,
                           compile_count: Callable[[], int] | None = None,
                           floor_us: Callable[..., float] | None = None,
                           warm_up: bool = False,
                           surcharge_us: Callable[..., float] | None = None,
                           sync: Callable[[Any], None] | None = None,
                           device_timing: Callable[[tuple[Any, ...]], DeviceTiming | None]
                           | None = None) -> None:
        """Register ``fn`` as a kernel on ``backend`` (see :meth:`implementation`): the
        arm's primary implementation (one per arm), or a variant of the arm named ``name``
        (letters, digits and ``_ . + - @``, unique on the arm). ``threads``, ``needs``,
        ``min_size``, ``thread_count``, ``compile_count``, ``floor_us``, ``warm_up``,
        ``surcharge_us``, ``sync`` and ``device_timing`` as in :class:`Implementation`.

        ``family`` (default ``""``, the default family) registers it for calls the
        operation's ``family`` hook puts in that input family (``"torch"``, say): such calls
        are learned as ``"<name>@<family>"`` and run that family's implementations — or the
        default family's where the family has none registered.
        """
        arm = _arm(backend, self.name)
        if not isinstance(family, str) or (family and not _FAMILY_NAME.fullmatch(family)):
            raise RegistrationError(
                f"family of an implementation of {self.name!r} must be a string of letters, "
                f"digits and _ . : + - (\"\" for the default family), got {family!r}")
        where = f" for family {family!r}" if family else ""
        if not callable(fn):
            raise RegistrationError(f"implementation of {self.name!r} on {arm.value}{where} "
                                    f"must be callable, got {fn!r}")
        _check_pool_and_framework(f"{self.name!r} on {arm.value}{where}", threads, needs)
        impls = self._impls if not family else self._families.setdefault(family, {})
        choice = self._new_choice(impls, arm, name, where)
        for hook, value in (("floor_us", floor_us), ("surcharge_us", surcharge_us),
                            ("sync", sync), ("device_timing", device_timing)):
            if value is not None and not callable(value):
                raise RegistrationError(f"{hook} of {self.name!r} on {arm.value}{where} must "
                                        f"be callable, got {value!r}")
        impls[choice] = Implementation(
            arm, fn, compile_count if compile_count is not None else _numba_compile_count(fn),
            floor_us, bool(warm_up), surcharge_us, sync, device_timing,
            name, threads, needs, int(min_size), int(thread_count))
        if self._owner is not None:
            self._owner._implementations_changed(self.name)

    def _new_choice(self, impls: dict[Choice, Implementation], arm: Backend, name: str,
                    where: str) -> Choice:
        """The choice a new implementation on ``arm`` named ``name`` is learned as: the arm
        (unnamed: its primary one, at most one) or a variant (named, each name once)."""
        if not isinstance(name, str) or (name and not VARIANT_NAME.fullmatch(name)):
            raise RegistrationError(
                f"name of an implementation of {self.name!r} on {arm.value}{where} must be "
                f"1-64 letters, digits and _ . + - @, got {name!r}")
        choice = Variant(arm, name) if name else arm
        if choice in impls:
            what = f"a {arm.value} variant named {name!r}" if name else \
                f"a {arm.value} implementation ({_describe(impls[arm].fn)})"
            raise RegistrationError(
                f"operation {self.name!r} already has {what}{where}; register each once "
                f"(another {arm.value} implementation is a variant: give it a name=)")
        return choice

    def add_untimed(self, family: str, fn: Callable[..., Any]) -> None:
        """Run calls of input family ``family`` as ``fn(*args)``: no arm chosen, nothing timed,
        learned or traced. For inputs whose timing would mislead — JAX tracers under
        ``jax.jit`` / ``jax.grad``, where a call records a computation instead of running it.
        """
        if not isinstance(family, str) or not _FAMILY_NAME.fullmatch(family):
            raise RegistrationError(f"untimed family of {self.name!r} must be a non-empty "
                                    f"string of letters, digits and _ . : + -, got {family!r}")
        if not callable(fn):
            raise RegistrationError(f"untimed implementation of {self.name!r} for family "
                                    f"{family!r} must be callable, got {fn!r}")
        if family in self._untimed or family in self._families:
            raise RegistrationError(f"operation {self.name!r} already has implementations for "
                                    f"family {family!r}")
        self._untimed[family] = fn
        if self._owner is not None:
            self._owner._implementations_changed(self.name)

    def untimed(self, family: str) -> Callable[..., Any] | None:
        """What runs calls of ``family`` untimed (:meth:`add_untimed`), or ``None``."""
        return self._untimed.get(family)

    @property
    def backends(self) -> tuple[Backend, ...]:
        """Arms this operation has an implementation for (available here or not)."""
        return tuple(dict.fromkeys(c.arm for c in self._impls))

    @property
    def choices(self) -> tuple[Choice, ...]:
        """Every implementation's choice — each arm, and each variant — in registration
        order (available here or not)."""
        return tuple(self._impls)

    @property
    def families(self) -> tuple[str, ...]:
        """Input families with implementations of their own (the default one, ``""``, not
        included)."""
        return tuple(self._families)

    def implementation_for(self, choice: Choice) -> Implementation | None:
        """The implementation registered as ``choice`` (an arm: its primary one, else its
        first variant), or ``None``."""
        impl = self._impls.get(choice)
        if impl is None and choice.__class__ is Backend:
            impl = next((i for c, i in self._impls.items() if c.arm is choice), None)
        return impl

    def implementations(self, family: str = "") -> tuple[Implementation, ...]:
        """The implementations registered for input family ``family`` (default: the default
        family's), in registration order."""
        return tuple((self._families.get(family, {}) if family else self._impls).values())

    def frameworks_needed(self) -> frozenset[str]:
        """The frameworks its implementations call, in every family (see
        :class:`Implementation`'s ``needs``)."""
        return frozenset(impl.needs for impls in (self._impls, *self._families.values())
                         for impl in impls.values() if impl.needs)

    @property
    def device_name(self) -> str:
        """The name under which calls with inputs already on the GPU are learned."""
        return f"{self.name}{DEVICE_SUFFIX}"

    def device_twin(self, *, host_arms: bool = False) -> Operation:
        """This operation for calls whose inputs are already on the GPU (the family
        ``"device"``): a GPU arm costs a host call a copy each way and a device call none,
        and a CPU arm the reverse — one estimate for both would be wrong for each."""
        return self.family_twin(DEVICE_FAMILY, host_arms=host_arms)

    def family_twin(self, family: str, *, host_arms: bool = False) -> Operation:
        """This operation for calls of input family ``family``: its own name
        (``"<name>@<family>"``), so its history, counters and spans stand apart, and that
        family's implementations (shared, not copied), else the default family's.

        The device family (inputs already on the GPU) gets the GPU arm's implementations
        only — a host arm would copy its inputs to the host (an implicit wait for the
        device) and hand back a result with no autograd graph — unless ``host_arms``
        (``RuntimeConfig.host_arms_on_device``): then also the CPU implementations
        registered for the device family itself, which make that round trip correctly.
        """
        twin = Operation(f"{self.name}{FAMILY_SEPARATOR}{family}", self.size_of, self.kind)
        own = self._families.get(family)
        twin._impls = own if own is not None else self._impls
        if family == DEVICE_FAMILY:
            twin._impls = {c: i for c, i in self._impls.items() if c.arm is Backend.GPU}
            twin._impls.update((c, i) for c, i in (own or {}).items()
                               if c.arm is Backend.GPU or host_arms)
            twin.capturing = cuda_graph_capturing
        return twin

    def __call__(self, *args: Any) -> Any:
        if self._owner is None:
            raise RegistrationError(f"operation {self.name!r} is not registered with a runtime")
        return self._owner.run(self.name, *args)


def _arm(backend: object, operation: str) -> Backend:
    try:
        return Backend.parse(backend, what=f"the arm of an implementation of {operation!r}")
    except ValueError as exc:
        raise RegistrationError(str(exc)) from None


def _check_pool_and_framework(what: str, threads: str, needs: str) -> None:
    """``threads`` names a thread pool and ``needs`` a framework (each ``""`` for none)."""
    for setting, given, meaning, names in (
            ("threads", threads, "the thread pool it runs on", POOLS),
            ("needs", needs, "the framework it calls", FRAMEWORKS)):
        if given not in ("", *names):
            raise RegistrationError(
                f"{setting} of an implementation of {what} must name {meaning}, one of "
                f"{', '.join(map(repr, names))} (\"\" for none), got {given!r}")


def _describe(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
