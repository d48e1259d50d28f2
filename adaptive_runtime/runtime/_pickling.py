"""Pickling a runtime: the recipe each user-registered operation travels as, and registering
the operations again from their recipes where the runtime is unpickled.

(The function that unpickles a runtime, ``unpickle_runtime``, makes an ``AdaptiveRuntime``,
so it lives with the class in :mod:`.facade`; its import path is part of every pickle.)
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

from ..operations import Implementation, Operation

__all__ = ["OperationRecipe", "operation_recipe", "register_recipes"]

# (operation name, size_of, kind, on_device, family, implementations, untimed families), an
# implementation being (family, arm, fn, compile_count, floor_us, warm_up, surcharge_us, sync,
# name), in registration order (an arm's first is its primary one)
OperationRecipe = tuple[str, Callable[..., int], str, Any, Any, list[tuple[Any, ...]],
                        dict[str, Callable[..., Any]]]


def operation_recipe(op: Operation) -> OperationRecipe:
    """What an unpickled runtime registers ``op`` from; ``TypeError`` naming the operation
    and the function when a part of it does not pickle."""
    parts: list[tuple[str, object]] = [("size function", op.size_of),
                                       ("on_device function", op.on_device),
                                       ("family function", op.family)]
    impls = []
    for family, arms in (("", op._impls), *op._families.items()):
        where = f" (family {family!r})" if family else ""
        for impl in arms.values():
            arm = impl.backend.value
            count = _carried_compile_count(impl)
            impls.append((family, arm, impl.fn, count, impl.floor_us, impl.warm_up,
                          impl.surcharge_us, impl.sync, impl.name))
            parts += [(f"{arm} implementation{where}", impl.fn),
                      (f"compile_count of the {arm} arm{where}", count),
                      (f"floor_us of the {arm} arm{where}", impl.floor_us),
                      (f"surcharge_us of the {arm} arm{where}", impl.surcharge_us),
                      (f"sync of the {arm} arm{where}", impl.sync)]
    untimed = dict(op._untimed)
    parts += [(f"untimed implementation of family {family!r}", fn)
              for family, fn in untimed.items()]
    for what, value in parts:
        if value is None:
            continue
        try:
            pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise TypeError(
                f"cannot pickle AdaptiveRuntime: the {what} of operation {op.name!r} "
                f"({value!r}) does not pickle ({exc}); define it at module level, or register "
                f"the operation in the receiving process instead") from exc
    return (op.name, op.size_of, op.kind.value, op.on_device, op.family, impls, untimed)


def _carried_compile_count(impl: Implementation) -> Callable[[], int] | None:
    count = impl.compile_count
    if count is None or not callable(getattr(impl.fn, "py_func", None)):
        return count
    try:
        pickle.dumps(count, pickle.HIGHEST_PROTOCOL)
    except Exception:
        # (derived from the numba kernel's own overloads: derived again where it is unpickled)
        return None
    return count


def register_recipes(register: Callable[..., Operation],
                     operations: list[OperationRecipe]) -> None:
    """Register the pickled ``operations`` again with ``register`` (the unpickled runtime's
    :meth:`~adaptive_runtime.AdaptiveRuntime.register`), implementations in their order."""
    for name, size_of, kind, on_device, family, impls, untimed in operations:
        op = register(name, size=size_of, kind=kind, on_device=on_device, family=family)
        for untimed_family, fn in untimed.items():
            op.add_untimed(untimed_family, fn)
        for (impl_family, arm, fn, count, floor_us, warm_up, surcharge_us, sync,
             impl_name) in impls:
            op.add_implementation(arm, fn, name=impl_name, family=impl_family,
                                  compile_count=count,
                                  floor_us=floor_us, warm_up=warm_up,
                                  surcharge_us=surcharge_us, sync=sync)
