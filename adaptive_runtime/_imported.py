"""Modules the program has imported, as the runtime may look them up: only when fully imported.

The runtime never imports a framework (torch, JAX) inside a user's call: it looks in
``sys.modules`` for what the program imported itself. A plain look-up there is not enough.
While a module is being imported, ``sys.modules`` already holds it, half made: importing torch
took seconds on a 2-core machine, and a thread of ours that found ``sys.modules["torch"]``
meanwhile read ``torch.distributed`` from it, raised ``AttributeError`` and died. So every
lazy look-up of torch, JAX, numba (or one of their submodules) from any thread goes through
:func:`imported`, which answers ``None`` — as if the module were absent — until the import
has finished: importlib marks a module's spec ``_initializing`` while its code runs (CPython
3.4 and later, ``importlib._bootstrap._load_unlocked``), and a submodule only counts once its
parents have finished too.

:func:`import_frameworks` is the one place the package imports a framework on its own, and it
is called only where the user asked for it (``RuntimeConfig(import_frameworks=True)``), when a
runtime is made: never in a call.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from types import ModuleType

__all__ = ["FRAMEWORKS", "import_frameworks", "imported", "loaded_frameworks"]

_log = logging.getLogger(__name__)

# The frameworks whose implementations are candidates only once the program imported them
# (an implementation names its framework: ``Implementation.needs``).
FRAMEWORKS = ("torch", "jax")


def imported(name: str) -> ModuleType | None:
    """``sys.modules[name]`` once it — and, for a submodule, every package above it — has
    finished importing; ``None`` while it is being imported, where it was never imported, or
    where the program blocked it (``sys.modules[name] = None``)."""
    modules = sys.modules
    module = modules.get(name)
    if module is None or _initializing(module):
        return None
    if "." in name:
        parts = name.split(".")
        for i in range(1, len(parts)):
            parent = modules.get(".".join(parts[:i]))
            if parent is None or _initializing(parent):
                return None
    return module


def _initializing(module: ModuleType) -> bool:
    spec = getattr(module, "__spec__", None)
    return spec is not None and getattr(spec, "_initializing", False) is True


def loaded_frameworks() -> frozenset[str]:
    """The :data:`FRAMEWORKS` the program has imported (fully), now."""
    return frozenset(name for name in FRAMEWORKS if imported(name) is not None)


def import_frameworks() -> frozenset[str]:
    """Import every installed framework of :data:`FRAMEWORKS` now (the user asked for it: see
    ``RuntimeConfig.import_frameworks``); returns those imported. One that fails to import is
    logged and left out."""
    for name in FRAMEWORKS:
        if imported(name) is not None or importlib.util.find_spec(name) is None:
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:  # (a broken install: its implementations stay out)
            _log.warning("import_frameworks: %s could not be imported: %r", name, exc)
    return loaded_frameworks()
