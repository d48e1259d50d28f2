"""``adaptive-runtime doctor``: what this machine gives the runtime, and what is wrong with
its settings (the checks: :mod:`adaptive_runtime.cli.diagnosis`)."""

from __future__ import annotations

import argparse
import sys

from ..offline.report import make_console
from .output import doctor_text, print_json
from .progress import status

__all__ = ["doctor_command"]


def doctor_command(args: argparse.Namespace) -> int:
    """Run ``adaptive-runtime doctor``; returns the exit status."""
    from .diagnosis import diagnose

    with status(make_console(sys.stderr), "looking at this machine...", log=False):
        found = diagnose(timeout_s=args.timeout)
    if args.json:
        print_json(found, sys.stdout)
    else:
        doctor_text(found, make_console(sys.stdout))
    return 1 if found["problems"] else 0
