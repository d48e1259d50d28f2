"""Import paths that moved into the wings (or, telemetry's SDK side, into the sibling
distribution ``adaptive_runtime_sdk``) keep working for one release, with a
``DeprecationWarning`` that names the new path and points at the importing line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from adaptive_runtime._moved import MOVED

ATTRIBUTES = {"lightning": "AdaptiveRuntimeCallback", "transformers": "AdaptiveRuntimeCallback",
              "report": "print_decisions", "replay": "replay", "telemetry.sdk": "configure"}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_imports_the_new_module_with_a_deprecation_warning(old: str) -> None:
    """``from adaptive_runtime.<old> import X`` in a fresh interpreter gives the very object
    at the new path, and one warning attributed to the script's import line."""
    new = MOVED[old]
    name = ATTRIBUTES[old]
    script = ("import sys, warnings\n"
              "warnings.simplefilter('always')\n"
              "with warnings.catch_warnings(record=True) as seen:\n"
              f"    from adaptive_runtime.{old} import {name} as old_object\n"
              f"from {new} import {name} as new_object\n"
              "import adaptive_runtime as ar, operator\n"
              "moved = [w for w in seen if issubclass(w.category, DeprecationWarning)]\n"
              "print(old_object is new_object, len(moved), moved[0].lineno, moved[0].filename,"
              " str(moved[0].message))\n"
              f"print(operator.attrgetter({old!r})(ar) is sys.modules[{new!r}])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    same, count, line, filename, message = first.split(" ", 4)
    assert (same, count, line, filename) == ("True", "1", "4", "<string>")
    assert f"adaptive_runtime.{old} moved to {new}" in message
    assert second == "True"


def test_a_submodule_below_an_old_path_is_the_new_submodule() -> None:
    """``adaptive_runtime.report.table`` is ``adaptive_runtime.offline.report.table``, not a
    second copy of the module made under the old name."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import adaptive_runtime.report.table as old_table
    import adaptive_runtime.offline.report.table as new_table

    assert old_table is new_table


def test_paths_that_did_not_move_are_not_answered_by_the_finder() -> None:
    """A name beside the moved ones (``adaptive_runtime.reporting``) is still missing."""
    with pytest.raises(ModuleNotFoundError):
        __import__("adaptive_runtime.reporting")
