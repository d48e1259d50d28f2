"""The ``adaptive-runtime`` command (also ``python -m adaptive_runtime``); what each command
does: :mod:`adaptive_runtime.cli.main`.

Inside: ``main`` (:func:`main`: parse, run the command, map the errors to exit statuses),
``parser`` (each command's options and handler), one module per command (``demo``, ``report``,
``replay``, ``doctor``, with the doctor's checks in ``diagnosis``), and what they share:
``output`` (``--json`` and the doctor's table), ``progress`` (bars and spinners) and
``defaults`` (where the telemetry files are when not told). :func:`main` is the console script
``adaptive_runtime.cli:main``; the modules inside are not public.
"""

from __future__ import annotations

from .main import main

__all__ = ["main"]
