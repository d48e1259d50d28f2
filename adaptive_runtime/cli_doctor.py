"""``adaptive-runtime doctor``: what this machine gives the runtime, and what is wrong with
its settings (see :mod:`adaptive_runtime.doctor`)."""

from __future__ import annotations

import argparse
import sys

from ._progress import status
from .cli_views import doctor_text, print_json
from .report import make_console

__all__ = ["doctor_command"]


def doctor_command(args: argparse.Namespace) -> int:
    """Run ``adaptive-runtime doctor``; returns the exit status."""
    from .doctor import diagnose

    with status(make_console(sys.stderr), "looking at this machine...", log=False):
        found = diagnose(timeout_s=args.timeout)
    if args.json:
        print_json(found, sys.stdout)
    else:
        doctor_text(found, make_console(sys.stdout))
    return 1 if found["problems"] else 0
