"""Where an extra is missing, the commands say which extra brings it and which flag does
without it, and the command the demo's last line suggests runs as printed.

The test environment has every extra installed. Here matplotlib (the ``report`` extra) is
made unimportable in the child process with ``sys.modules["matplotlib"] = None``, Python's own
way to make an import fail (a stand-in for an environment without the extra: the one double
in this file). A base install without the ``otlp`` extra is the real one of
``tests/integration/test_install.py``, which checks the demo's message there.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

# The command line, as if matplotlib were not installed (find_spec answers None, import
# raises ModuleNotFoundError).
_WITHOUT_MATPLOTLIB = (
    "import sys\n"
    "sys.modules['matplotlib'] = None\n"
    "from adaptive_runtime.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _cli_without_matplotlib(args: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "ADAPTIVE_RUNTIME_"))}
    env["ADAPTIVE_RUNTIME_TELEMETRY_DIR"] = str(folder / "adaptive-runtime-telemetry")
    return subprocess.run([sys.executable, "-c", _WITHOUT_MATPLOTLIB, *args], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def test_without_the_report_extra_the_demos_last_line_is_a_report_command_that_runs(
        tmp_path: Path) -> None:
    demo = _cli_without_matplotlib(["demo", "--calls", "300", "--max-size", "4096"], tmp_path)
    assert demo.returncode == 0, demo.stderr[-3000:]
    hint = demo.stdout.strip().splitlines()[-1]
    assert hint.startswith("see them: adaptive-runtime report"), demo.stdout[-2000:]
    assert "pip install 'adaptive_runtime[report]'" in hint
    # the command it names, as printed
    command = shlex.split(hint.removeprefix("see them: ").split(" (", 1)[0])
    assert command[0] == "adaptive-runtime"
    report = _cli_without_matplotlib(command[1:], tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    assert "adaptive-runtime report:" in report.stdout
    assert not (tmp_path / "report.png").exists()
    # the plain command says what is missing, the extra that brings it and the flag
    plain = _cli_without_matplotlib(["report"], tmp_path)
    assert plain.returncode == 2
    assert "pip install 'adaptive_runtime[report]'" in plain.stderr
    assert "--no-png" in plain.stderr
