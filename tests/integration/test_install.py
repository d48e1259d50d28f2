"""Installing the package as a user with their own environment does: ``pip install .`` into a
fresh virtual environment (from PyPI, or pip's cache), then using it there. The required
dependencies are what running needs — the OpenTelemetry API, not its SDK — and telemetry's
``configure()`` says which extra brings the rest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import required

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 600


def _checkout_copy(folder: Path) -> Path:
    """What ``pip install`` reads from a checkout, copied to ``folder``. setuptools builds in
    the source tree (``build/``, ``*.egg-info``): two installs building from one tree at once
    delete each other's files mid-build, so each install builds from its own copy."""
    for package in ("adaptive_runtime", "sdk"):
        shutil.copytree(ROOT / package, folder / package, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, folder / name)
    return folder

_USE = textwrap.dedent('''
    import importlib.metadata, importlib.util, json
    import numpy as np
    import adaptive_runtime as ar

    rt = ar.AdaptiveRuntime()
    x = np.linspace(-1.0, 1.0, 1000)
    with ar.train_step(0):
        for _ in range(30):
            y = rt.run("relu", x)
    try:
        ar.telemetry.configure()
        error = None
    except ModuleNotFoundError as exc:
        error = str(exc)
    try:
        ar.torch  # (no torch in a base install)
        torch_error = None
    except ModuleNotFoundError as exc:
        torch_error = str(exc)
    print(json.dumps({
        "relu": bool(np.array_equal(y, np.maximum(x, 0.0))),
        "choice": str(rt.decide("relu", 1000).choice),
        "sdk": importlib.util.find_spec("opentelemetry.sdk") is not None,
        "error": error,
        "torch_error": torch_error,
        "requires": importlib.metadata.requires("adaptive_runtime"),
    }))
''')


def test_pip_install_into_a_fresh_environment_runs_on_the_opentelemetry_api_alone(
        tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    source = _checkout_copy(tmp_path / "checkout")
    install = subprocess.run([str(python), "-m", "pip", "install", "-q",
                              "--disable-pip-version-check", str(source)],
                             capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
                             check=False)
    assert install.returncode == 0, install.stderr[-4000:]
    ran = subprocess.run([str(python), "-c", _USE], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300, check=False)
    assert ran.returncode == 0, ran.stderr[-4000:]
    used = json.loads(ran.stdout.strip().splitlines()[-1])
    assert used["relu"] and used["choice"] in ("simd", "simd:numpy", "scalar")
    assert used["sdk"] is False, "pip install . brought the OpenTelemetry SDK"
    assert "pip install 'adaptive_runtime[otlp]'" in used["error"]
    assert "pip install 'adaptive_runtime[torch]'" in used["torch_error"]
    # the SDK side (the sibling distribution that brings the SDK and the exporters) is a
    # requirement of the otlp extra only, pinned to this release
    requires = used["requires"]
    assert not [r for r in requires if r.startswith(("opentelemetry-sdk",
                                                      "opentelemetry-exporter"))], requires
    assert [r for r in requires if r.startswith("adaptive_runtime_sdk")] == [
        f'adaptive_runtime_sdk=={_version()}; extra == "otlp"']
    assert any(r.startswith("opentelemetry-api") and "extra" not in r for r in requires)
    # the demo, as README's pip path runs it: without the otlp extra it names the extra and
    # the flag that runs it without telemetry, and the flag works
    demo = [str(venv / "bin" / "adaptive-runtime"), "demo", "--calls", "40", "--max-size", "256"]
    refused = subprocess.run(demo, capture_output=True, text=True, cwd=tmp_path, timeout=300,
                             check=False)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "pip install 'adaptive_runtime[otlp]'" in refused.stderr
    assert "adaptive-runtime demo --no-telemetry" in refused.stderr
    bare = subprocess.run([*demo, "--no-telemetry"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, check=False)
    assert bare.returncode == 0, bare.stderr[-3000:]
    assert "40 calls" in bare.stdout


def _version() -> str:
    from adaptive_runtime import __version__

    return __version__


def test_the_license_is_the_one_pyproject_declares() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()


def test_the_wheels_build_with_setuptools_70(tmp_path: Path) -> None:
    """Both pyproject.toml files (the library's and its SDK side's, ``sdk/``) build with every
    setuptools from 61 (the first to read the project table) to today's, which the other tests
    here build with. 70 is the one a user met: it refused the SPDX string ``license =
    "Apache-2.0"`` (setuptools reads one from 77 on), as did every release before 77 that
    distributions still ship. Built as ``pip wheel --no-build-isolation`` builds where 70 is
    installed: setuptools 70's own PEP 517 hook, in an interpreter that sees no other
    setuptools (``-S``: no site-packages)."""
    setuptools_70 = tmp_path / "setuptools70"
    pin = subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                          "--disable-pip-version-check", "--no-compile",
                          "--target", str(setuptools_70), "setuptools==70.*"],
                         capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    assert pin.returncode == 0, pin.stderr[-3000:]
    hook = ("import sys; sys.path.insert(0, sys.argv[1]); import setuptools; "
            "assert setuptools.__version__.startswith('70.'), setuptools.__version__; "
            "from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[2]))")
    for project, package in ((ROOT, "adaptive_runtime"), (ROOT / "sdk", "adaptive_runtime_sdk")):
        # (a copy of what the build reads: a build in the checkout would write its egg-info
        # there)
        source = tmp_path / package
        shutil.copytree(project / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            shutil.copy(project / name, source / name)
        build = subprocess.run([sys.executable, "-S", "-c", hook, str(setuptools_70),
                                str(tmp_path / "dist")], cwd=source, capture_output=True,
                               text=True, timeout=INSTALL_TIMEOUT_S, check=False)
        assert build.returncode == 0, build.stderr[-3000:]
        wheel = tmp_path / "dist" / build.stdout.strip().splitlines()[-1]
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
            text = archive.read(metadata).decode()
        assert "\nLicense: Apache-2.0\n" in text, package
        # each wheel holds its own package only
        assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(
            ".dist-info")} == {package}, names


# What a user on another supported Python does: install with the otlp extra, train a few steps
# with telemetry on, and exit. The exit must flush: spans and metrics are in the files after.
_EXIT_FLUSH = textwrap.dedent('''
    import sys
    import numpy as np
    import adaptive_runtime as ar

    ar.telemetry.configure(directory=sys.argv[1])
    rt = ar.AdaptiveRuntime()
    x = np.linspace(-1.0, 1.0, 100_000)
    for step in range(3):
        with ar.train_step(step):
            for _ in range(10):
                y = rt.run("relu", x)
    assert np.array_equal(y, np.maximum(x, 0.0))
''')
SUPPORTED_PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def _interpreter(version: str) -> str | None:
    """``pythonX.Y`` on PATH that runs, else pyenv's newest ``X.Y.*`` build."""
    found = shutil.which(f"python{version}")
    if found and subprocess.run([found, "-c", ""], capture_output=True,
                                check=False).returncode == 0:
        return found
    builds = sorted(Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"), "versions")
                    .glob(f"{version}.*/bin/python{version}"))
    return str(builds[-1]) if builds else None


def _install_and_exit_flush(python: str, folder: Path) -> str | None:
    """Install the package with its otlp extra into a fresh venv of ``python`` (its own pip,
    as ``venv`` made it), as README says to from a checkout (``. ./sdk`` first: the extra's SDK
    side, which pins the package), and run the exit-flush script there; what went wrong, or
    None."""
    venv = folder / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    source = _checkout_copy(folder / "checkout")
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                          "--disable-pip-version-check", str(source), str(source / "sdk"),
                          f"{source}[otlp]"],
                         capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    if pip.returncode != 0:
        return "pip install: " + pip.stderr[-3000:]
    out = folder / "telemetry"
    ran = subprocess.run([str(venv / "bin" / "python"), "-c", _EXIT_FLUSH, str(out)],
                         capture_output=True, text=True, cwd=folder, timeout=300, check=False)
    if ran.returncode != 0 or ran.stderr.strip():
        return f"run (exit {ran.returncode}): " + ran.stderr[-3000:]
    written = {name: len((out / name).read_text().splitlines())
               for name in ("traces.jsonl", "metrics.jsonl") if (out / name).exists()}
    if sorted(name for name, lines in written.items() if lines) != ["metrics.jsonl",
                                                                     "traces.jsonl"]:
        return f"exited without flushing its telemetry: lines written {written}"
    return None


def test_installs_trains_and_flushes_at_exit_on_every_supported_python(
        tmp_path: Path) -> None:
    """Each supported Python but the one running the suite (the rest of the suite covers it),
    each in a fresh venv with the otlp extra, concurrently (installs mostly wait on the disk).
    Catches 3.11-only syntax on 3.10, and 3.12's refusal of new threads in atexit handlers."""
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    pythons = {v: _interpreter(v) for v in SUPPORTED_PYTHONS if v != running}
    missing = [v for v, python in pythons.items() if python is None]
    if missing:
        required.missing(f"no interpreter for Python {', '.join(missing)} on this machine "
                         "(pyenv's builds are looked for)")
    with ThreadPoolExecutor(len(pythons)) as pool:
        runs = {v: pool.submit(_install_and_exit_flush, python, tmp_path / v)
                for v, python in pythons.items() if python is not None}
        faults = {v: run.result() for v, run in runs.items()}
    assert {v: fault for v, fault in faults.items() if fault} == {}
