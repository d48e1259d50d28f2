"""``_imported.imported``: a module only once it has finished importing (issue 38: a thread
read a half-imported torch and died)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from adaptive_runtime._imported import imported, loaded_frameworks


def test_a_module_is_absent_while_its_import_runs_and_present_once_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "halfway_pkg").mkdir()
    # (the package's own body asks, while it is being imported, and so does its submodule's)
    (tmp_path / "halfway_pkg" / "__init__.py").write_text(
        "from adaptive_runtime._imported import imported\n"
        "SEEN_DURING = imported('halfway_pkg')\n"
        "from . import sub\n")
    (tmp_path / "halfway_pkg" / "sub.py").write_text(
        "from adaptive_runtime._imported import imported\n"
        "SEEN_DURING = imported('halfway_pkg.sub')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import halfway_pkg  # type: ignore[import-not-found]

        assert halfway_pkg.SEEN_DURING is None
        assert halfway_pkg.sub.SEEN_DURING is None  # (its package half made, and itself)
        assert imported("halfway_pkg") is halfway_pkg
        assert imported("halfway_pkg.sub") is halfway_pkg.sub
    finally:
        sys.modules.pop("halfway_pkg", None)
        sys.modules.pop("halfway_pkg.sub", None)


def test_a_module_never_imported_or_blocked_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    assert imported("no_such_module_anywhere") is None
    monkeypatch.setitem(sys.modules, "blocked_module", None)  # (how a program blocks one)
    assert imported("blocked_module") is None
    import json

    assert imported("json") is json


def test_loaded_frameworks_names_only_the_frameworks_fully_imported(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jax", None)
    assert "jax" not in loaded_frameworks()
    assert ("torch" in loaded_frameworks()) == (imported("torch") is not None)
