"""The public surface: ``rt.stats()`` as one frozen snapshot of the per-call counters, internal
types kept out of ``adaptive_runtime.__all__``, the version written once, and examples that
use public names only."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.metadata
import re
from pathlib import Path

import pytest

import adaptive_runtime as ar
from adaptive_runtime.operations import DeviceProbe

ROOT = Path(__file__).resolve().parents[2]
# The modules README.md and docs/ send users to; the rest (cli/, underscored ones, the layers
# below the runtime) may change without notice.
PUBLIC_MODULES = frozenset({"adaptive_runtime", "adaptive_runtime.torch",
                            "adaptive_runtime.training", "adaptive_runtime.training.lightning",
                            "adaptive_runtime.training.transformers",
                            "adaptive_runtime.offline.report", "adaptive_runtime.offline.replay",
                            "adaptive_runtime.telemetry", "adaptive_runtime.policy"})


def _runtime() -> ar.AdaptiveRuntime:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False,
                            devices=DeviceProbe(gpu=False))
    op = rt.register("double", size=len, kind="vector")

    @op.implementation(ar.Backend.SIMD)
    def simd(x: list[float]) -> list[float]:
        return [2 * v for v in x]

    @op.implementation(ar.Backend.SCALAR)
    def scalar(x: list[float]) -> list[float]:
        raise RuntimeError("broken arm")

    return rt


def test_stats_is_one_frozen_snapshot_of_the_per_call_counters() -> None:
    rt = _runtime()
    for _ in range(20):
        assert rt.run("double", [1.0, 2.0]) == [2.0, 4.0]
    rt.select("unregistered", 10)
    stats = rt.stats()
    assert stats.calls() == 21
    assert stats.calls("double") == 20
    assert stats.calls("double", backend="simd") + stats.calls("double", "scalar") == 20
    assert stats.calls("unregistered", reason=ar.Reason.HEURISTIC) == 1
    assert {key.operation for key in stats.selections} == {"double", "unregistered"}
    # the scalar arm raised when it was explored: the call went on to SIMD
    assert stats.fallbacks == {("double", ar.Backend.SCALAR, ar.Backend.SIMD): 1}
    assert stats.hot_operations == ()
    assert stats.spans_admitted == 0  # tracing off
    assert stats.recording_spans is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.spans_admitted = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        stats.fallbacks[("x", ar.Backend.GPU, ar.Backend.SIMD)] = 1  # type: ignore[index]
    rt.run("double", [1.0])
    assert stats.calls("double") == 20  # a snapshot: later calls are the next one's
    assert rt.stats().calls("double") == 21


def test_internal_types_are_not_in_the_public_names() -> None:
    for name in ("DeviceProbe", "SelectionKey", "SpanRecorder"):
        assert name not in ar.__all__
    assert "SpanRecorder" not in ar.telemetry.__all__
    assert "RuntimeStats" in ar.__all__


def test_the_version_is_written_once_in_the_package() -> None:
    # (read as text, not with tomllib: the package supports Python 3.10, which lacks it)
    text = (ROOT / "pyproject.toml").read_text()
    project = text.split("[project]", 1)[1].split("\n[", 1)[0]
    assert not re.search(r"^version\s*=", project, re.MULTILINE)
    assert re.search(r'^dynamic\s*=\s*\[\s*"version"\s*\]', project, re.MULTILINE)
    assert re.search(
        r'^version\s*=\s*\{\s*attr\s*=\s*"adaptive_runtime\._version\.__version__"\s*\}',
        text, re.MULTILINE)
    assert "__version__ = " not in (ROOT / "adaptive_runtime" / "__init__.py").read_text()
    # the installed distribution reports the package's own string
    assert isinstance(ar.__version__, str) and ar.__version__
    assert importlib.metadata.version("adaptive_runtime") == ar.__version__


def test_the_examples_import_public_names_only() -> None:
    """What users copy from ``examples/`` imports only public modules, and from them only
    names in their ``__all__``."""
    private = []
    for example in sorted((ROOT / "examples").glob("*.py")):
        for node in ast.walk(ast.parse(example.read_text(), str(example))):
            if isinstance(node, ast.Import):
                private += [(example.name, alias.name) for alias in node.names
                            if alias.name.startswith("adaptive_runtime")
                            and alias.name not in PUBLIC_MODULES]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "adaptive_runtime"):
                module = node.module or ""
                public = (importlib.import_module(module).__all__
                          if module in PUBLIC_MODULES else ())
                private += [(example.name, f"{module}.{alias.name}") for alias in node.names
                            if alias.name not in public]
    assert private == []


def test_the_cli_package_keeps_the_console_script() -> None:
    """``adaptive_runtime.cli`` is a package; its face is ``main``, and the installed console
    script still names ``adaptive_runtime.cli:main``."""
    from adaptive_runtime import cli

    assert cli.__all__ == ["main"]
    (script,) = [entry for entry in importlib.metadata.entry_points(group="console_scripts")
                 if entry.name == "adaptive-runtime"]
    assert script.value == "adaptive_runtime.cli:main"
    assert script.load() is cli.main
    assert callable(cli.main) and cli.main.__module__ == "adaptive_runtime.cli.main"
