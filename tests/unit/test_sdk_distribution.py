"""The SDK side is a sibling distribution (``sdk/``, ``adaptive_runtime_sdk``) released with
the library: the two versions are one, each pins the other's exact release (the SDK side
imports the library's telemetry modules, which are not a stable API), and the SDK and its
exporters are the SDK side's requirements, not the library's."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import tomllib

import adaptive_runtime

ROOT = Path(__file__).resolve().parents[2]


def _project(path: Path) -> dict:
    return tomllib.loads(path.read_text())["project"]


def test_the_sdk_side_has_the_library_version_and_pins_it() -> None:
    sdk = _project(ROOT / "sdk" / "pyproject.toml")
    version = adaptive_runtime.__version__
    assert sdk["version"] == version
    assert f"adaptive_runtime=={version}" in sdk["dependencies"]


def test_the_otlp_extra_is_the_sdk_side_of_the_same_release() -> None:
    library = _project(ROOT / "pyproject.toml")
    assert library["optional-dependencies"]["otlp"] == [
        f"adaptive_runtime_sdk=={adaptive_runtime.__version__}"]
    assert not [r for r in library["dependencies"] if r.startswith("opentelemetry-sdk")]


def test_the_installed_sdk_side_is_this_checkout_and_brings_the_sdk() -> None:
    """What ``make`` installed (``-e ./sdk``) is the distribution in this checkout, and its
    requirements are what ``configure()`` imports."""
    import adaptive_runtime_sdk

    assert Path(adaptive_runtime_sdk.__file__).resolve().parent == (
        ROOT / "sdk" / "adaptive_runtime_sdk")
    assert importlib.metadata.version("adaptive_runtime_sdk") == adaptive_runtime.__version__
    requires = importlib.metadata.requires("adaptive_runtime_sdk") or []
    for name in ("opentelemetry-sdk", "opentelemetry-exporter-otlp",
                 "opentelemetry-exporter-prometheus", "prometheus-client"):
        assert [r for r in requires if r.startswith(name)], (name, requires)
