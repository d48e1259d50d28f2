"""Which fields of a history file's fingerprint its records depend on, and so which differences
from this process's fingerprint keep the file from being applied: :func:`fingerprint_differences`.

A timing says something about another process only where what it ran on is the same there. The
machine (architecture, CPU model and count), the python, numpy, numba (the compiled loops every
input family has) and numpy's BLAS are under every key: :data:`ALWAYS_COMPARED`. The rest counts
only where a record ran on it, told by the key's name as the runtime names keys,
``<operation>@<family>`` with the family naming the inputs' library (``linear@torch+grad``,
``gelu@jax:bfloat16``; numpy inputs have no family):

- the torch families (``@torch``, ``@torch:float16``, ``+grad``) and ``@device`` (CUDA
  tensors): torch; the JAX families: jax;
- a record of the GPU arm (and every ``@device`` record: their inputs are on the GPU): the GPU
  model and driver, and the library driving the GPU — jax for a JAX key, else torch;
- numpy inputs of a built-in operation with an ATen call among its numpy implementations
  (``gelu``'s, for one: ATen's on the array's memory) wherever torch is installed: torch (and
  then which implementation each of their records names depends on it);
- an operation the library does not know — the program's own, a name given only to
  ``record_performance``, or a family of its own: every library, since its implementations may
  call any of them.

So a history learned in a torch training loop still applies after JAX is installed or upgraded,
one of JAX arrays after torch is, and one of the built-ins on numpy arrays after either (but for
those that run ATen on numpy arrays, after a change of torch).

Which operations are the library's own, and which of them run torch on numpy inputs, is given
(:class:`KnownOperations`, made from the operations' records by
``adaptive_runtime.kernels.known_operations()``): this module names none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..backend import Backend
from .fingerprint import difference, differences
from .record import HistoryRecord

__all__ = ["ALWAYS_COMPARED", "UNKNOWN", "KnownOperations", "fingerprint_differences",
           "record_fields"]

#: Fingerprint fields compared for every file, whatever its keys.
ALWAYS_COMPARED = ("machine", "cpu", "cpu_count", "python", "blas", "numpy", "numba")


@dataclass(frozen=True)
class KnownOperations:
    """The operations the library registers itself (``names``: what their keys depend on is
    known) and those of them with an implementation that runs torch on numpy inputs
    (``through_torch``)."""

    names: frozenset[str] = frozenset()
    through_torch: frozenset[str] = frozenset()


#: None known: every operation may call any library.
UNKNOWN = KnownOperations()

_GPU = ("gpu", "gpu_driver")
_LIBRARIES = ("torch", "jax")
# (as adaptive_runtime.operations names a key: "<operation>@<family>", the family's library
# first, then ":<dtype>" and "+grad")
_FAMILY_SEPARATOR = "@"
_FAMILY_SUFFIX = re.compile(r"[:+]")


def record_fields(operation: str, backend: Backend,
                  known: KnownOperations = UNKNOWN) -> tuple[str, ...]:
    """The fingerprint fields beyond :data:`ALWAYS_COMPARED` that a record of ``operation`` on
    ``backend`` depends on (see the module docstring), ``known`` the library's operations."""
    name, _, family = operation.partition(_FAMILY_SEPARATOR)
    gpu = _GPU if backend is Backend.GPU else ()
    if family == "device":
        return ("torch", *_GPU)
    if family:
        library = _library(family)
        return (library, *gpu) if library else (*_LIBRARIES, *gpu)
    if name not in known.names:
        return (*_LIBRARIES, *gpu)  # (the program's own: it may call anything)
    if name in known.through_torch or gpu:
        return ("torch", *gpu)  # (the built-ins' GPU arm is torch's CUDA device)
    return ()


def _library(family: str) -> str | None:
    """The library a family of inputs names (``torch:bfloat16+grad``: torch), or ``None``
    for a family the library does not know."""
    root = _FAMILY_SUFFIX.split(family, maxsplit=1)[0]
    return root if root in _LIBRARIES else None


def _known(operation: str, known: KnownOperations) -> bool:
    """Whether what ``operation``'s keys depend on is known: a built-in, or a library's
    family."""
    name, _, family = operation.partition(_FAMILY_SEPARATOR)
    if family:
        return family == "device" or _library(family) is not None
    return name in known.names


def fingerprint_differences(here: Mapping[str, object], there: Mapping[str, object],
                            records: Iterable[HistoryRecord],
                            known: KnownOperations = UNKNOWN) -> list[str]:
    """What keeps a file of ``records`` with fingerprint ``there`` from applying where the
    fingerprint is ``here``: the differences in :data:`ALWAYS_COMPARED` and in the fields its
    records depend on (:func:`record_fields`), each of the latter naming how many of the file's
    keys depend on it and one of them (``"torch 2.13.0 here, 2.12.0 in file (4 keys of the
    file depend on it, e.g. 'linear@torch+grad')"``). Empty: the file applies here. ``known``:
    the library's own operations (default: none — each may call any library)."""
    keys: dict[str, set[tuple[str, int]]] = {}
    for record in records:
        for field in record_fields(record.operation, record.backend, known):
            keys.setdefault(field, set()).add((record.operation, record.size_bucket))
    found = differences(here, there, ALWAYS_COMPARED)
    for field in (*_LIBRARIES, *_GPU):
        text = difference(field, here.get(field), there.get(field)) if field in keys else None
        if text is not None:
            example = min(keys[field])[0]
            own = "" if _known(example, known) else \
                ", an operation of the program's own: it may call any library"
            count = len(keys[field])
            keys_depend = "1 key of the file depends" if count == 1 else \
                f"{count} keys of the file depend"
            found.append(f"{text} ({keys_depend} on it, e.g. {example!r}{own})")
    return found

