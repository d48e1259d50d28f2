"""``tools/check_sizes.py``, the size limits and the import rule ``make lint`` runs, on small
fake packages: a private name imported from a sibling module is an offence, a private module
imported (or a public name from one) is not."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "check_sizes.py"


@pytest.fixture(scope="module")
def check_sizes() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_sizes", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses and typing look modules up by name)
    spec.loader.exec_module(module)
    return module


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package ``pkg`` under ``tmp_path`` made of ``files`` (paths relative to it)."""
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def _run(check_sizes: ModuleType, root: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    code = check_sizes.main(["check_sizes.py", str(root)])
    lines = capsys.readouterr().out.splitlines()
    assert code == (1 if lines else 0)
    return lines


# A fake package: ``user.py`` and ``sub/`` import private names from sibling modules;
# ``allowed.py`` imports private modules, public names from them, and private names from
# modules outside the package.
FILES = {
    "state.py": "def _helper(): ...\nclass _Round: ...\n",
    "_wiring.py": "class Thing: ...\n",
    "_phases/__init__.py": "",
    "_phases/explore.py": "def explore(): ...\n",
    "sub/__init__.py": "",
    "sub/phase.py": "def _step(): ...\n",
    "sub/deeper.py": "from ..state import _helper as helper\n",
    "sub/__main__.py": "from . import _version\n",
    "user.py": ("from .state import _helper\n"
                "from pkg.state import _Round\n"
                "def f():\n"
                "    from .sub.phase import _step\n"),
    "allowed.py": ("from . import _wiring, _phases\n"
                   "from ._wiring import Thing\n"
                   "from pkg import _wiring as wiring\n"
                   "from ._phases.explore import explore\n"
                   "from .__init__ import __doc__\n"
                   "from os import _exit\n"
                   "from collections import _tuplegetter\n"),
}


def test_a_private_name_imported_from_a_sibling_module_is_an_offence(
        check_sizes: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _package(tmp_path, FILES)
    assert _run(check_sizes, root, capsys) == [
        f"{root}/sub/__main__.py:1: private name _version imported from pkg.sub",
        f"{root}/sub/deeper.py:1: private name _helper imported from pkg.state",
        f"{root}/user.py:1: private name _helper imported from pkg.state",
        f"{root}/user.py:2: private name _Round imported from pkg.state",
        f"{root}/user.py:4: private name _step imported from pkg.sub.phase",
    ]


def test_a_private_module_and_public_names_from_one_are_allowed(
        check_sizes: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _package(tmp_path, {name: text for name, text in FILES.items()
                               if not name.startswith(("user", "sub/"))})
    assert _run(check_sizes, root, capsys) == []


def test_a_module_over_its_size_limit_is_still_an_offence(
        check_sizes: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(check_sizes.MAX_FUNCTION_LINES))
    root = _package(tmp_path, {"long.py": f"def long():\n{body}"})
    limit = check_sizes.MAX_FUNCTION_LINES
    assert _run(check_sizes, root, capsys) == [
        f"{root}/long.py:1: function long of {limit + 1} lines (limit {limit})"]
