"""Third-party operations through the entry-point group ``adaptive_runtime.operations``: the
test package ``tests/plugins/ar_plugin_demo`` registers ``cube``, and a runtime made with its
built-in operations runs it like any other (numpy family and torch families, from its record).

The package is "installed" for each test: its directory on ``sys.path`` and, in a temporary
directory also on ``sys.path``, a ``dist-info`` whose ``entry_points.txt`` names it —
``importlib.metadata`` finds it as it finds an installed distribution's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import adaptive_runtime as ar
from adaptive_runtime.errors import RegistrationError
from adaptive_runtime.kernels import RECORDS
from adaptive_runtime.kernels.entry_points import GROUP, third_party_records

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"


def _install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str) -> None:
    info = tmp_path / "ar_plugin_demo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ar-plugin-demo\n"
                                   "Version: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{entry}\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.syspath_prepend(str(tmp_path))
    third_party_records.cache_clear()


@pytest.fixture(autouse=True)
def _read_afresh() -> Iterator[None]:
    third_party_records.cache_clear()
    yield
    third_party_records.cache_clear()  # (the next runtime reads the real environment again)


def test_the_runtime_picks_up_an_operation_from_the_entry_point_group(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(tmp_path, monkeypatch, "cube = ar_plugin_demo:CUBE")
    assert [r.name for r in third_party_records()] == ["cube"]
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    assert "cube" in rt.operations
    op = rt.operation("cube")
    assert {ar.Backend.SCALAR, ar.Backend.SIMD} <= set(op.backends)
    x = np.linspace(-2.0, 2.0, 50)
    for _ in range(5):
        np.testing.assert_allclose(rt.run("cube", x), x ** 3)
    assert any(r.operation == "cube" for r in rt.history_snapshot())


def test_a_third_party_operation_gets_the_torch_families_from_its_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch  # (the test extra installs it: make test)

    _install(tmp_path, monkeypatch, "cube = ar_plugin_demo:CUBE")
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    assert "torch+grad" in rt.operation("cube").families
    x = torch.linspace(-2.0, 2.0, 50, dtype=torch.float64, requires_grad=True)
    for _ in range(4):
        y = rt.run("cube", x)
        (grad,) = torch.autograd.grad(y.sum(), x)
        torch.testing.assert_close(y, x.detach() ** 3)
        torch.testing.assert_close(grad, 3 * x.detach() ** 2)


def test_without_the_group_the_runtime_has_only_the_built_in_operations() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    assert "cube" not in rt.operations
    assert {r.name for r in RECORDS} <= set(rt.operations)


def test_an_entry_point_that_is_not_a_record_is_a_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(tmp_path, monkeypatch, "cube = ar_plugin_demo:_cube_numpy")
    with pytest.raises(RegistrationError, match=r"entry point 'cube' .* OperationRecord"):
        ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))


def test_an_entry_point_that_fails_to_load_is_a_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(tmp_path, monkeypatch, "cube = ar_plugin_demo:NO_SUCH_NAME")
    with pytest.raises(RegistrationError, match=r"entry point 'cube' .* failed to load"):
        ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))


def test_a_third_party_name_taken_by_a_built_in_operation_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(tmp_path, monkeypatch, "softmax = adaptive_runtime.kernels.softmax:SOFTMAX")
    with pytest.raises(RegistrationError, match="already registered"):
        ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
