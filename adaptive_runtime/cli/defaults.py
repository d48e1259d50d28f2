"""Where the commands look for the telemetry files when not told: the folder
``ar.telemetry.configure()`` writes them to by default (``demo``'s hint, ``report``'s and
``replay``'s default input)."""

from __future__ import annotations

import os

from ..telemetry.defaults import DEFAULT_DIRECTORY

__all__ = ["telemetry_folder"]


def telemetry_folder() -> str:
    """Where ``ar.telemetry.configure()`` writes the embedded files by default."""
    return os.environ.get("ADAPTIVE_RUNTIME_TELEMETRY_DIR") or DEFAULT_DIRECTORY
