"""A program run in a child interpreter, as the integration tests see it: exit code, output,
and the JSON of its last ``RESULT `` line."""

from __future__ import annotations

import json
import subprocess
from typing import Any


class Ran:
    """A child program's exit code, output and ``RESULT`` line (``{}`` without one)."""

    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        self.result: dict[str, Any] = json.loads(lines[-1][7:]) if lines else {}

    def __repr__(self) -> str:
        return (f"exit code {self.returncode}\n--- stdout\n{self.stdout}\n"
                f"--- stderr\n{self.stderr}")
