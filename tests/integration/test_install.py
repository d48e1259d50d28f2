"""Installing the package as a user with their own environment does: ``pip install .`` into a
fresh virtual environment (from PyPI, or pip's cache), then using it there. The required
dependencies are what running needs — the OpenTelemetry API, not its SDK — and telemetry's
``configure()`` says which extra brings the rest."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 600

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
    print(json.dumps({
        "relu": bool(np.array_equal(y, np.maximum(x, 0.0))),
        "choice": str(rt.decide("relu", 1000).choice),
        "sdk": importlib.util.find_spec("opentelemetry.sdk") is not None,
        "error": error,
        "requires": importlib.metadata.requires("adaptive_runtime"),
    }))
''')


def test_pip_install_into_a_fresh_environment_runs_on_the_opentelemetry_api_alone(
        tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q",
                              "--disable-pip-version-check", str(ROOT)],
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
    # the SDK and the exporters are requirements of the otlp extra only
    requires = used["requires"]
    for name in ("opentelemetry-sdk", "opentelemetry-exporter-otlp",
                 "opentelemetry-exporter-prometheus"):
        found = [r for r in requires if r.startswith(name)]
        assert found and all('extra == "otlp"' in r for r in found), (name, found)
    assert any(r.startswith("opentelemetry-api") and "extra" not in r for r in requires)


def test_the_license_is_the_one_pyproject_declares() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert 'license = "Apache-2.0"' in (ROOT / "pyproject.toml").read_text()
