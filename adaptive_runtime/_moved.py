"""Import paths that moved after 0.1.0, kept working for one release with a ``DeprecationWarning``.

The framework callbacks moved into the training wing, the after-the-fact tools into the
offline wing (docs/architecture.md draws the wings) and telemetry's SDK side into a sibling
distribution, ``adaptive_runtime_sdk``. A program written against 0.1.0 —
``from adaptive_runtime.lightning import AdaptiveRuntimeCallback``, ``ar.report`` — still runs:
a finder at the front of ``sys.meta_path`` answers an old path (or a submodule below it) with
the module at its new path, the same object, so ``isinstance`` checks and module state are
shared, and warns once per old path, pointing at the line that imported it. The finder costs
other imports one string comparison; it goes with the old paths in the release after next.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import FrameType, ModuleType

__all__ = ["MOVED", "install"]

_PACKAGE = __name__.rpartition(".")[0]

# old path below the package -> the module's full name now
MOVED = {
    "lightning": f"{_PACKAGE}.training.lightning",
    "transformers": f"{_PACKAGE}.training.transformers",
    "report": f"{_PACKAGE}.offline.report",
    "replay": f"{_PACKAGE}.offline.replay",
    "telemetry.sdk": "adaptive_runtime_sdk",
}

_OLD_PREFIX = _PACKAGE + "."


def _new_name(fullname: str) -> str | None:
    """The module an old import path stands for now, or ``None`` for a path that did not move."""
    if not fullname.startswith(_OLD_PREFIX):
        return None
    below = fullname[len(_OLD_PREFIX):]
    for old, new in MOVED.items():
        if below == old or below.startswith(old + "."):
            return new + below[len(old):]
    return None


def _import_site_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning name the user's import line, past the import
    machinery's frames, this module's and the package's ``__getattr__``. (``warnings`` itself
    skips the import system's bootstrap frames without counting them: so do we.)"""
    ours = (__file__, sys.modules[_PACKAGE].__file__, importlib.__file__)
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None:
        filename = frame.f_code.co_filename
        if "importlib" in filename and "_bootstrap" in filename:
            frame = frame.f_back
            continue
        if filename not in ours:
            return level
        frame, level = frame.f_back, level + 1
    return level


class _MovedPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an old import path with the module at its new one (see the module docstring)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if _new_name(fullname) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = _new_name(spec.name)
        assert new is not None  # (find_spec answered only for moved paths)
        warnings.warn(f"{spec.name} moved to {new}: import it from there (the old path goes "
                      "in the release after next)",
                      DeprecationWarning, stacklevel=_import_site_stacklevel())
        # (the module keeps its own __name__ and __spec__: the import system sets those only
        # where a module has none)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at the new path has run already."""


def install() -> None:
    """Put the finder at the front of ``sys.meta_path`` (once; the package's ``__init__``)."""
    if not any(isinstance(finder, _MovedPathFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedPathFinder())
