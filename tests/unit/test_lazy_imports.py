"""What importing adaptive_runtime and a numpy-only first call load — and what they do not.

The OpenTelemetry SDK, its exporters, Prometheus and gRPC load only with telemetry configured;
torch and JAX never (the program imports them, or asks the runtime to when it is made:
``import_frameworks``), not even to ask about GPUs; numba only when a numba kernel first runs.
Each case runs in a fresh interpreter (``sys.modules`` is per process), and says which heavy
modules it found.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from required import require_module

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


def test_import_loads_no_telemetry_sdk_no_gpu_library_and_no_numba() -> None:
    report = _run("import adaptive_runtime as ar\nar.RuntimeConfig\n")
    assert report["loaded"] == []


def test_ar_torch_is_the_torch_module_imported_on_first_access() -> None:
    """``import adaptive_runtime as ar`` then ``ar.torch.adapt(model)``, as the examples
    write it: torch is imported by that access, not before; ``ar.offline`` likewise."""
    report = _run("import sys\n"
                  "import adaptive_runtime as ar\n"
                  "assert 'torch' not in sys.modules and 'adaptive_runtime.offline.report' not in "
                  "sys.modules\n"
                  "adapt = ar.torch.adapt\n"
                  "result = [ar.torch is sys.modules['adaptive_runtime.torch'], "
                  "adapt.__module__, ar.offline.report.print_decisions.__module__]\n")
    assert report["result"] == repr([True, "adaptive_runtime.torch",
                                     "adaptive_runtime.offline.report.printing"])
    assert "torch" in report["loaded"]  # type: ignore[operator]


def test_an_unknown_attribute_of_the_package_is_an_attribute_error() -> None:
    import adaptive_runtime as ar

    with pytest.raises(AttributeError, match="no attribute 'tensorflow'"):
        ar.tensorflow  # type: ignore[attr-defined]  # noqa: B018


def test_a_first_select_imports_nothing_heavy() -> None:
    report = _run("import adaptive_runtime as ar\n"
                  "rt = ar.AdaptiveRuntime()\n"
                  "result = [rt.select('add', 1000), rt.select('matmul', 1 << 20),\n"
                  "          rt.decide('dot', 10).reason, rt.is_hot_path('add')]\n")
    loaded = set(report["loaded"])  # type: ignore[arg-type]
    assert not loaded & {*TELEMETRY_SDK, *NUMBA, *GPU_LIBRARIES}
    if not _gpu_driver_present():  # (a driver loads its own libraries: not ours to bound)
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


# Every built-in operation on numpy arrays, forward and backward, through the default
# runtime: a warm pass (numba compiles or loads its kernels), then 1,000 rounds, each call's
# wall time kept. (50 ms: two orders of magnitude over any of these calls here, and a tenth of
# what importing torch or compiling a numba kernel inside a call takes.)
_EVERY_OPERATION = """
import sys, time
import numpy as np
import adaptive_runtime as ar
rng = np.random.default_rng(0)
v, w = rng.standard_normal(4096), rng.standard_normal(4096)
m = rng.standard_normal((32, 64))
weight, bias = rng.standard_normal((16, 64)), rng.standard_normal(16)
rt = ar.get_runtime()
calls = [
    lambda: ar.ops.dot(v, w), lambda: ar.ops.add(v, w), lambda: ar.ops.scale(2.0, v, w),
    lambda: ar.ops.sum(v), lambda: ar.ops.relu(v), lambda: ar.ops.gelu(v),
    lambda: ar.ops.softmax(m), lambda: ar.ops.layer_norm(m), lambda: ar.ops.matmul(m, m.T),
    lambda: ar.ops.linear(m, weight, bias), lambda: ar.ops.conv1d(v, w[:7]),
    lambda: rt.run("relu.backward", v, w), lambda: rt.run("gelu.backward", v, w),
    lambda: rt.run("softmax.backward", m, m), lambda: rt.run("layer_norm.backward", m, m),
]
names = sorted(op for op in rt.operations if "@" not in op)
for call in calls:  # the warm pass
    call()
slowest = []
for _ in range(1000):
    for call in calls:
        start = time.perf_counter()
        call()
        slowest.append(time.perf_counter() - start)
result = {"ops": names, "slowest_ms": max(slowest) * 1e3,
          "torch": "torch" in sys.modules, "jax": "jax" in sys.modules}
"""


def test_a_numpy_program_never_imports_torch_or_jax_and_no_call_stalls() -> None:
    """Issue 38: with torch and JAX installed, 1,000 rounds of every built-in operation on
    numpy arrays import neither, and once numba's kernels are in (one warm pass) no call takes
    over 50 ms: nothing heavy is loaded inside a user's call."""
    require_module("torch", "torch")  # (installed, never imported by the program)
    require_module("jax", "jax")
    report = _run(_EVERY_OPERATION)
    result = eval(report["result"])  # (a repr of a dict of str, float, bool, list)
    assert len(result["ops"]) == 15, result["ops"]  # (every built-in, backward ones included)
    assert not result["torch"] and not result["jax"]
    assert "torch" not in report["loaded"] and "jax" not in report["loaded"]  # type: ignore[operator]
    assert result["slowest_ms"] < 50.0, f"a call took {result['slowest_ms']:.1f} ms"


def test_import_frameworks_imports_torch_when_the_runtime_is_made_and_aten_competes() -> None:
    """The opt-in: torch is imported when the runtime is made, never in a call, and ATen's
    softmax on the array's memory is then one of the numpy softmax's candidates."""
    require_module("torch", "torch")
    report = _run("import sys\n"
                  "import numpy as np\n"
                  "import adaptive_runtime as ar\n"
                  "before = 'torch' in sys.modules\n"
                  "rt = ar.AdaptiveRuntime(ar.RuntimeConfig(import_frameworks=True))\n"
                  "made = 'torch' in sys.modules\n"
                  "x = np.random.default_rng(0).standard_normal((64, 1024))\n"
                  "for _ in range(60):\n"
                  "    rt.run('softmax', x)\n"
                  "tried = sorted(r.backend.value + ':' + r.variant\n"
                  "               for r in rt.history_snapshot()\n"
                  "               if r.operation == 'softmax' and r.samples)\n"
                  "result = [before, made, tried]\n")
    before, made, tried = eval(report["result"])
    assert (before, made) == (False, True)
    assert "simd:" in tried, f"ATen's softmax (the SIMD arm) was never timed: {tried}"
