"""What importing adaptive_runtime and a numpy-only first call load — and what they do not.

The OpenTelemetry SDK, its exporters, Prometheus and gRPC load only with telemetry configured;
torch and JAX only when a GPU driver is present (to ask about devices) or the inputs are
theirs; numba only when a numba kernel first runs. Each case runs in a fresh interpreter
(``sys.modules`` is per process), and says which heavy modules it found.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from adaptive_runtime.operations.devices import _gpu_driver_present

TELEMETRY_SDK = ("opentelemetry.sdk", "opentelemetry.exporter", "prometheus_client", "grpc",
                 "google.protobuf")
GPU_LIBRARIES = ("torch", "jax")
NUMBA = ("numba", "llvmlite")

# Peak resident memory from /proc (VmHWM: this process's own, unlike ``ru_maxrss``, which a
# child started by fork + exec inherits from its parent, here pytest); None elsewhere.
_REPORT = """
import json, sys
heavy = {heavy!r}
try:
    with open("/proc/self/status") as status:
        rss_mib = next(int(line.split()[1]) // 1024 for line in status
                       if line.startswith("VmHWM:"))
except (OSError, StopIteration):
    rss_mib = None
print(json.dumps({{
    "loaded": sorted(m for m in heavy if m in sys.modules),
    "rss_mib": rss_mib,
    "result": repr(globals().get("result")),
}}))
"""


def _run(body: str) -> dict[str, object]:
    heavy = (*TELEMETRY_SDK, *GPU_LIBRARIES, *NUMBA)
    script = body + _REPORT.format(heavy=heavy)
    done = subprocess.run([sys.executable, "-W", "error", "-c", script], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _gpu_libraries_expected() -> bool:
    # (where a GPU driver is present, the probe imports torch to ask about devices: fine)
    return _gpu_driver_present()


def test_import_loads_no_telemetry_sdk_no_gpu_library_and_no_numba() -> None:
    report = _run("import adaptive_runtime as ar\nar.RuntimeConfig\n")
    assert report["loaded"] == []


def test_a_first_select_without_a_gpu_driver_imports_nothing_heavy() -> None:
    report = _run("import adaptive_runtime as ar\n"
                  "rt = ar.AdaptiveRuntime()\n"
                  "result = [rt.select('add', 1000), rt.select('matmul', 1 << 20),\n"
                  "          rt.decide('dot', 10).reason, rt.is_hot_path('add')]\n")
    loaded = set(report["loaded"])  # type: ignore[arg-type]
    assert not loaded & {*TELEMETRY_SDK, *NUMBA}
    if not _gpu_libraries_expected():
        assert not loaded & set(GPU_LIBRARIES)
        # numpy and the interpreter; torch alone would be ~300 MiB more (loose on purpose)
        assert report["rss_mib"] is None or report["rss_mib"] < 200  # type: ignore[operator]


def test_a_numpy_arm_runs_without_numba_and_a_numba_arm_imports_it_on_first_run() -> None:
    report = _run("import numpy as np, sys\n"
                  "import adaptive_runtime as ar\n"
                  "x = np.arange(8.0)\n"
                  "simd = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend='simd'))\n"
                  "assert simd.run('add', x, x).tolist() == (2 * x).tolist()\n"
                  "assert 'numba' not in sys.modules, 'a numpy arm imported numba'\n"
                  "scalar = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend='scalar'))\n"
                  "result = float(scalar.run('dot', x, x))\n")
    assert report["result"] == repr(float(sum(v * v for v in range(8))))
    assert "numba" in report["loaded"]  # type: ignore[operator]
    assert not set(report["loaded"]) & set(TELEMETRY_SDK)  # type: ignore[arg-type]


def test_a_kernel_that_calls_another_compiles_when_both_were_lazy() -> None:
    # layer_norm's row loop calls row_moments, another lazy kernel: made together, they compile
    report = _run("import numpy as np\n"
                  "import adaptive_runtime as ar\n"
                  "from adaptive_runtime.kernels import _compile, layer_norm\n"
                  "assert isinstance(layer_norm.row_moments, _compile.LazyKernel)\n"
                  "rt = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend='scalar'))\n"
                  "y = rt.run('layer_norm', np.arange(32.0).reshape(4, 8))\n"
                  "assert not isinstance(layer_norm.row_moments, _compile.LazyKernel)\n"
                  "result = round(float(abs(y).sum()), 6)\n")
    assert "numba" in report["loaded"]  # type: ignore[operator]
    assert report["result"] != "None"


@pytest.mark.parametrize("name", ["configure", "shutdown", "Telemetry"])
def test_telemetry_setup_names_load_the_sdk_on_first_use(name: str) -> None:
    report = _run("import adaptive_runtime as ar\n"
                  f"result = ar.telemetry.{name} is not None\n")
    assert report["result"] == "True"
    assert "opentelemetry.sdk" in report["loaded"]  # type: ignore[operator]


def test_telemetry_defaults_load_no_sdk() -> None:
    # (the CLI and `adaptive-runtime doctor` read them where the SDK may not be installed)
    report = _run("import adaptive_runtime as ar\n"
                  "result = ar.telemetry.DEFAULT_DIRECTORY\n")
    assert report["result"] == repr("adaptive-runtime-telemetry")
    assert "opentelemetry.sdk" not in report["loaded"]  # type: ignore[operator]
