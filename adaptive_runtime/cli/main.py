"""``main()``, the ``adaptive-runtime`` command (also ``python -m adaptive_runtime``).

``adaptive-runtime demo`` runs a mixed ``dot``/``add`` workload over sizes from 8 to 10^6
elements on a fresh :class:`AdaptiveRuntime`, then prints, per (operation, size bucket), the arm
the runtime settled on, why, the latency it learned on each arm, and the speed-up of its choice
over the slowest arm it measured.

``adaptive-runtime report`` shows the same for any run, from a saved history file or the
telemetry files the runtime writes without a collector: a table in the terminal and a PNG
(latency against size per arm with the crossovers, and the traced decisions over time).

``adaptive-runtime replay`` runs policy configurations over a run's recorded timings
(``rt.record_calls(path)``, or the telemetry files) and prints each one's regret against the
hindsight oracle, switches and exploration share (see :mod:`adaptive_runtime.offline.replay`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ..errors import BackendUnavailableError, ConfigError, MissingExtraError
from ..offline.report import ReportInputError
from .parser import build_parser

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``adaptive-runtime`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (ConfigError, BackendUnavailableError) as exc:  # bad ADAPTIVE_RUNTIME_* setting
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except MissingExtraError as exc:  # (the demo's telemetry without the otlp extra)
        print(f"{parser.prog} {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except ReportInputError as exc:  # a missing, empty or corrupt input: one line, no trace
        print(f"{parser.prog} {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `adaptive-runtime demo | head`: not an error worth a traceback
        sys.stderr.close()
        return 0
