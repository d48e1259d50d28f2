"""What the suite needs and ``make test`` installs: the package's extras and the Debian tools.

Where one is missing, a test that needs it skips on a developer's machine, but fails under CI
(``CI=true``, which ``.ci/run`` sets): there everything declared was installed, so a missing
one means the set-up is broken, and a skip would hide that the test never ran.
"""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType
from typing import NoReturn

import pytest

__all__ = ["missing", "require_binary", "require_module", "under_ci"]


def under_ci() -> bool:
    """Whether the suite runs under CI (``CI`` set to ``true`` or ``1``)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def missing(message: str) -> NoReturn:
    """Skip the test for want of what ``message`` names, or under CI fail it."""
    if under_ci():
        pytest.fail(f"{message} (CI=true: `make test` installs it, so its absence is a "
                    "failure, not a skip)", pytrace=False)
    pytest.skip(message)


def require_module(name: str, extra: str) -> ModuleType:
    """``import name``, which the package's ``extra`` brings; :func:`missing` if it fails."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing(f"{name} cannot be imported ({exc}): pip install 'adaptive_runtime[{extra}]'")


def require_binary(name: str, package: str) -> str:
    """The path of ``name`` (PATH, else /usr/bin), from Debian's ``package``; :func:`missing`
    where it is not installed."""
    found = shutil.which(name)
    if found is None and os.access(f"/usr/bin/{name}", os.X_OK):
        found = f"/usr/bin/{name}"
    if found is None:
        missing(f"the {name} binary is not installed (apt-get install {package})")
    return found
