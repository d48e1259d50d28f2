"""How long telemetry may take to shut down: one setting, and one clock for every exit handler.

Shutting telemetry down (``ar.telemetry.shutdown()``, ``configure()`` again, interpreter exit)
flushes what was admitted and then stops, however the collector behaves: down, slow, or
accepting connections and never answering. ``shutdown_timeout_s`` bounds it (default
:data:`DEFAULT_SHUTDOWN_TIMEOUT_S`); what is not sent by then is given up on and counted.
At interpreter exit several handlers run one after the other (each runtime's span flush, then
the providers'); they share one deadline, fixed when the first of them asks for it, so the
bound holds for the exit as a whole.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from ..errors import ConfigError

__all__ = ["DEFAULT_SHUTDOWN_TIMEOUT_S", "ENV_VAR", "STOP_RESERVE_SHARE", "exit_deadline",
           "flush_deadline", "otlp_timeouts", "parse_seconds", "remaining",
           "resolve_shutdown_timeout", "set_shutdown_timeout_s", "shutdown_timeout_s"]

#: The longest telemetry's shutdown takes unless configured otherwise (seconds).
DEFAULT_SHUTDOWN_TIMEOUT_S = 2.0
ENV_VAR = "ADAPTIVE_RUNTIME_SHUTDOWN_TIMEOUT_S"

# The share of the bound kept for what follows the flushes once they give up: stopping the
# exporters (a gRPC channel's close) and, at exit, the interpreter's teardown of them. Waiting
# for the flushes until the bound itself made exits with a dead collector 2.05-2.1 s.
STOP_RESERVE_SHARE = 0.1

_timeout_s = DEFAULT_SHUTDOWN_TIMEOUT_S
_exit_deadline: float | None = None


def shutdown_timeout_s() -> float:
    """The bound in force (set by ``configure()``)."""
    return _timeout_s


def set_shutdown_timeout_s(seconds: float) -> None:
    global _timeout_s
    _timeout_s = seconds


def flush_deadline(start: float, bound_s: float) -> float:
    """The ``time.monotonic()`` until which a shutdown that began at ``start`` and must end
    within ``bound_s`` waits for its flushes (the rest is kept for stopping the exporters)."""
    return start + bound_s * (1.0 - STOP_RESERVE_SHARE)


def exit_deadline() -> float:
    """The ``time.monotonic()`` until which the exit's telemetry handlers wait for flushes:
    fixed by the first handler that asks (the interpreter is exiting from then on)."""
    global _exit_deadline
    if _exit_deadline is None:
        _exit_deadline = flush_deadline(time.monotonic(), _timeout_s)
    return _exit_deadline


def remaining(deadline: float) -> float:
    """Seconds left until ``deadline`` (a ``time.monotonic()`` value), never negative."""
    return max(deadline - time.monotonic(), 0.0)


def parse_seconds(name: str, raw: str | float, *, allow_zero: bool = True) -> float:
    """``raw`` as a finite number of seconds (>= 0, or > 0); :class:`ConfigError` naming
    ``name`` and the accepted range otherwise."""
    accepted = ">= 0" if allow_zero else "> 0"
    try:
        value = float(raw.strip() if isinstance(raw, str) else raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={raw!r} is not a number of seconds ({accepted})") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{name} must be a finite number of seconds {accepted}, got {raw!r}")
    return value


def otlp_timeouts(env: Mapping[str, str]) -> dict[str, float | None]:
    """The OTLP exporters' per-export timeouts by signal (``traces``, ``metrics``), from
    ``OTEL_EXPORTER_OTLP_{TRACES,METRICS}_TIMEOUT`` else ``OTEL_EXPORTER_OTLP_TIMEOUT``, in
    seconds as the OpenTelemetry Python exporters read them; ``None`` where unset."""
    general = env.get("OTEL_EXPORTER_OTLP_TIMEOUT", "").strip()
    out: dict[str, float | None] = {}
    for signal in ("traces", "metrics"):
        name = f"OTEL_EXPORTER_OTLP_{signal.upper()}_TIMEOUT"
        raw = env.get(name, "").strip()
        if not raw and general:
            name, raw = "OTEL_EXPORTER_OTLP_TIMEOUT", general
        out[signal] = parse_seconds(name, raw, allow_zero=False) if raw else None
    return out


def resolve_shutdown_timeout(argument: float | None, env: Mapping[str, str]) -> float:
    """The bound: ``argument``, else :data:`ENV_VAR`, else the default — shortened to the OTLP
    export timeout when one is set shorter (an export may take no longer, so neither may the
    wait for the last ones)."""
    if argument is not None:
        if isinstance(argument, bool):
            raise ConfigError(f"shutdown_timeout_s must be a number of seconds >= 0, got "
                              f"{argument!r}", field="shutdown_timeout_s")
        return parse_seconds("shutdown_timeout_s", argument)
    raw = env.get(ENV_VAR, "").strip()
    if raw:
        return parse_seconds(ENV_VAR, raw)
    timeouts = [t for t in otlp_timeouts(env).values() if t is not None]
    return min([DEFAULT_SHUTDOWN_TIMEOUT_S, *timeouts]) if timeouts else DEFAULT_SHUTDOWN_TIMEOUT_S
