"""What starting up costs: ``import adaptive_runtime``, the first ``select()``, the first
numpy-arm and numba-arm ``run()``, and ``ar.telemetry.configure()``.

Each step runs in a fresh interpreter (imports are once per process), repeated; the table
gives the median seconds, the process's peak resident memory after the step (Linux VmHWM)
and the heavy modules loaded by then. Targets (issue 13): import and a first ``select()``
load neither the OpenTelemetry SDK, its exporters, Prometheus, torch, JAX nor numba; on a
machine without a GPU driver the first ``select()`` takes milliseconds and the process stays
near 100 MiB resident. numba loads with the first call of a numba arm; the SDK with
``configure()``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from _table import print_table, verdict

from adaptive_runtime.operations.devices import _gpu_driver_present

HEAVY = ("opentelemetry.sdk", "opentelemetry.exporter", "prometheus_client", "grpc", "torch",
         "jax", "numba")
REPEATS = 5

_STEPS = {
    "import adaptive_runtime": "",
    "+ AdaptiveRuntime() and first select()": (
        "rt = ar.AdaptiveRuntime(); rt.select('add', 1000)"),
    "+ first run() of a numpy arm": (
        "rt = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend='simd'))\n"
        "x = np.ones(1000); rt.run('add', x, x)"),
    "+ first run() of a numba arm": (
        "rt = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend='scalar'))\n"
        "x = np.ones(1000); rt.run('add', x, x)"),
    "+ ar.telemetry.configure()": (
        "import os\nar.telemetry.configure(directory=os.environ['TELEMETRY_DIR'])"),
}

_SCRIPT = """
import json, sys, time
import numpy as np
started = time.perf_counter()
import adaptive_runtime as ar
imported = time.perf_counter()
{step}
done = time.perf_counter()
with open("/proc/self/status") as status:
    rss = next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmHWM:"))
print(json.dumps({{"import_s": imported - started, "step_s": done - imported, "rss_mib": rss,
                  "loaded": [m for m in {heavy!r} if m in sys.modules]}}))
"""


def measure(step: str, folder: str) -> dict[str, object]:
    script = _SCRIPT.format(step=step, heavy=HEAVY)
    runs = []
    for _ in range(REPEATS):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              check=True, env={**os.environ, "TELEMETRY_DIR": folder})
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {"import_s": statistics.median(r["import_s"] for r in runs),
            "step_s": statistics.median(r["step_s"] for r in runs),
            "rss_mib": max(r["rss_mib"] for r in runs), "loaded": runs[-1]["loaded"]}


def main() -> None:
    rows = []
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, step in _STEPS.items():
            result = results[name] = measure(step, folder)
            rows.append([name, f"{result['import_s']:.3f}",
                         f"{result['step_s']:.3f}" if step else "-", result["rss_mib"],
                         ", ".join(result["loaded"]) or "none"])  # type: ignore[arg-type]
    print_table(f"Start-up, fresh interpreters (median of {REPEATS})",
                ["step", "import s", "step s", "peak MiB", "heavy modules loaded"], rows)
    quiet = [results["import adaptive_runtime"],
             results["+ AdaptiveRuntime() and first select()"]]
    # (with a GPU driver present, the first select() imports torch to ask about devices)
    allowed = {"torch", "jax"} if _gpu_driver_present() else set()
    clean = all(not set(r["loaded"]) - allowed for r in quiet)  # type: ignore[arg-type]
    print(f"\nimport and first select() load no SDK, numba"
          f"{'' if allowed else ' or GPU library'}: {verdict(clean)}")


if __name__ == "__main__":
    main()
