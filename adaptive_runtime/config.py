"""Runtime configuration: one frozen dataclass, every field also an environment variable.

Values are validated once, here, with messages naming the field (or the variable) and its
accepted range; the hot path trusts them afterwards.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .backend import Backend, Choice, parse_choice
from .errors import ConfigError
from .knobs import PolicyKnobs

__all__ = ["ENV_PREFIX", "REMOVED_VARIABLES", "TELEMETRY_VARIABLES", "ConfigWarning",
           "RuntimeConfig", "config_variables", "unknown_variables"]

ENV_PREFIX = "ADAPTIVE_RUNTIME_"
#: The variables read by ``ar.telemetry.configure()`` (``adaptive_runtime.telemetry``), not by
#: :class:`RuntimeConfig`.
TELEMETRY_VARIABLES = ("ADAPTIVE_RUNTIME_TELEMETRY_DIR", "ADAPTIVE_RUNTIME_PROMETHEUS_PORT",
                       "ADAPTIVE_RUNTIME_SHUTDOWN_TIMEOUT_S")
#: Variables no longer read, and what took their place (docs/configuration.md).
REMOVED_VARIABLES = {
    "ADAPTIVE_RUNTIME_TRACE_SAMPLE_RATE": "fast calls are sampled 1 in 100 within a fiftieth "
                                          "of ADAPTIVE_RUNTIME_SPANS_PER_SEC",
    "ADAPTIVE_RUNTIME_TRACE_CPU_SHARE": "the span budget is ADAPTIVE_RUNTIME_SPANS_PER_SEC "
                                        "alone (inf lifts it)",
    "ADAPTIVE_RUNTIME_SPANS_PER_SEC_PER_KEY": "one key may take a tenth of "
                                              "ADAPTIVE_RUNTIME_SPANS_PER_SEC",
}


class ConfigWarning(UserWarning):
    """A setting that changes nothing. An ``ADAPTIVE_RUNTIME_*`` variable that nothing reads
    (misspelt, or removed) is set: warned once per variable and process when a config is read
    from the environment; ``adaptive-runtime doctor`` lists them too. Or
    ``ar.telemetry.configure()`` called again: its providers are set once per process."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeConfig(PolicyKnobs):
    """Everything the runtime can be told. Build with keywords or :meth:`from_env`.

    Selection
      force_backend: run every call on this arm's primary implementation, or on one variant
        of it ("simd:numpy"); an error at start-up if the arm is unavailable, and at a call
        of an operation that has no such implementation.
      disabled_backends: arms never selected.
      the policy's knobs (``min_samples_per_arm``, ``switch_margin``, ``recheck_interval``,
        ``drift_threshold``, ...): the fields of :class:`~adaptive_runtime.knobs.PolicyKnobs`,
        described there, under the same names here, in ``ADAPTIVE_RUNTIME_<KNOB>`` and in
        ``adaptive-runtime replay --config``.
    Gating
      sampling_threshold_us: a timed call at least this long is traced (unless hot or over
        the span budget); shorter ones are sampled.
      hot_path_calls_per_sec: an operation called faster than this is *hot*: tracing stops
        for it, learning goes on. It stops being hot below half of this rate.
      max_measure_period: a converged key is timed 1-in-N, N the smallest power of two that
        keeps timing (its measured cost) under 0.5% of the key's time, up to this.
      tracing: export spans at all.
      spans_per_sec: the span budget: token buckets on exported spans, per process. One key
        may take a tenth of it; routine (slow or sampled) call spans share a fiftieth (so
        fast calls are sampled at most 1 in 100); ``ar.train_step`` spans a tenth (see
        ``training.steps``). ``inf`` lifts them all: every step and every slow call exported.
      trace_cpu_share: deprecated, no effect (a ``DeprecationWarning``); removed next release.
      trace_key_interval_s: in steady state, each key (below the hot path) exports a select
        span at least this often, standing for its calls since the previous one, so every key
        shows in Jaeger with a recent span; ``inf``: only sampled spans. Commitments of a key
        to an arm are always exported (within ``spans_per_sec``), whatever this says.
    Memory and persistence
      max_history_keys: (operation, size bucket) keys kept; least recently used go first.
      history_path: history file loaded at start-up, saved every history_save_interval_s
        while it changed, and at exit (see ``AdaptiveRuntime.load_history``).
      history_save_interval_s: seconds between periodic saves of history_path (a background
        thread; 0: only at exit; at most a year).
      history_force: apply history files written on other hardware or library versions (or
        before files carried a fingerprint) instead of ignoring them with a warning.
    Kernel faults
      validate_sample_rate: share of calls (rounded to 1 in a power of two, per key) re-run
        on another arm and compared: NaN where the other arm has none, or values outside the
        dtype's tolerance, quarantine the arm and the caller gets the other arm's result.
        0 (the default): off, at no cost. Env ``ADAPTIVE_RUNTIME_VALIDATE`` (a rate, or
        on = 0.001 / off).
    Frameworks
      import_frameworks: import torch and JAX (those installed) when the runtime is made, so
        that their implementations compete on numpy inputs (ATen's calls on the array's
        memory; torch's CUDA device for the GPU arm) in a program that never imports
        them. Off by default: the runtime never imports a framework inside a call, and
        without this such implementations become candidates only once the program imports
        the framework itself (importing torch takes seconds).
      host_arms_on_device: let the CPU arms compete for calls whose inputs are already on
        the GPU (CUDA tensors). Off by default: such calls run only the implementations that
        run on the device. On, a CPU arm's call copies its inputs to the host and its result
        back, with autograd kept (the copies are differentiable), and its timing includes the
        copies and the wait for the device's queued work; while a CUDA graph is captured the
        GPU arm runs instead. Worth it only where the device is far slower than the host for
        small calls (an old or shared GPU).
    Thread counts
      choose_threads: learn each numba-threaded implementation at fewer threads too (the
        variant ``simd:numba@1``), and hold torch's process-wide count, phase by phase, at
        whichever of its size and one thread ran the keys' timed calls faster in a trial. On
        by default: beside a process that takes a core (a DataLoader worker) one thread beats
        two by multiples. Off: every kernel runs at its pool's size, and torch's count is
        never changed.
    """

    force_backend: Choice | None = None
    disabled_backends: frozenset[Backend] = frozenset()
    sampling_threshold_us: float = 100.0
    hot_path_calls_per_sec: float = 10_000.0
    history_path: str | None = None
    tracing: bool = True
    max_history_keys: int = 16_384
    max_measure_period: int = 1024
    spans_per_sec: float = 200.0
    trace_cpu_share: dataclasses.InitVar[float | None] = None  # deprecated: no effect
    trace_key_interval_s: float = 10.0
    history_save_interval_s: float = 60.0
    history_force: bool = False
    validate_sample_rate: float = 0.0
    import_frameworks: bool = False
    host_arms_on_device: bool = False
    choose_threads: bool = True

    def __post_init__(self, trace_cpu_share: float | None) -> None:
        if trace_cpu_share is not None:
            warnings.warn("trace_cpu_share has no effect and goes in the next release: the "
                          "span budget is spans_per_sec alone (math.inf lifts it)",
                          DeprecationWarning, stacklevel=3)
        PolicyKnobs.__post_init__(self)  # (the policy's knobs, checked where they are declared)
        # Normalise friendly inputs (strings, lists) so the frozen value is canonical.
        if self.force_backend is not None:
            object.__setattr__(
                self, "force_backend", _forced(self.force_backend))
        object.__setattr__(
            self, "disabled_backends",
            frozenset(_backend(b, "disabled_backends") for b in _iterable(self.disabled_backends)))
        if (self.force_backend is not None
                and self.force_backend.arm in self.disabled_backends):
            raise ConfigError(f"force_backend={self.force_backend.value!r} is also listed in "
                              "disabled_backends; a forced arm cannot be disabled",
                              field="force_backend")
        if len(self.disabled_backends) == len(Backend):
            raise ConfigError("disabled_backends disables every arm (gpu, simd, scalar); "
                              "at least one must stay enabled", field="disabled_backends")
        _number(self, "sampling_threshold_us", low=0.0)
        _number(self, "hot_path_calls_per_sec", low=0.0, low_open=True)
        _number(self, "spans_per_sec", low=0.0, infinite=True)
        _number(self, "trace_key_interval_s", low=0.0, low_open=True, infinite=True)
        _number(self, "history_save_interval_s", low=0.0, high=_MAX_INTERVAL_S)
        _number(self, "validate_sample_rate", low=0.0, high=1.0)
        _integer(self, "max_history_keys", low=1)
        _integer(self, "max_measure_period", low=1, high=1 << 20)
        if self.max_measure_period & (self.max_measure_period - 1):
            raise ConfigError("max_measure_period must be a power of two (1, 2, 4, ...), "
                              f"got {self.max_measure_period}", field="max_measure_period")
        if self.history_path is not None:
            object.__setattr__(self, "history_path", _path(self.history_path))
        for flag in ("tracing", "history_force", "import_frameworks", "host_arms_on_device",
                     "choose_threads"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(f"{flag} must be True or False, got "
                                  f"{_shown(getattr(self, flag))}", field=flag)

    def replace(self, **changes: Any) -> RuntimeConfig:
        """Return a copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> RuntimeConfig:
        """Build a config from ``ADAPTIVE_RUNTIME_*`` variables (``os.environ`` by default).

        Unset or empty variables keep the default; a malformed one raises :class:`ConfigError`
        naming the variable and what it accepts. ``overrides`` win over the environment.
        """
        env = os.environ if environ is None else environ
        _warn_unknown(env)
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            name = _variable(field.name)
            raw = env.get(name, "").strip()
            if not raw:
                continue
            try:
                values[field.name] = _PARSERS.get(field.name, _parse_by_type(field))(raw)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{name}={raw!r} is invalid: {exc}",
                                  field=field.name) from None
        values.update(overrides)
        try:
            return cls(**values)
        except ConfigError as exc:
            # Say which variable the bad value came from, not just the field.
            if exc.field in values and exc.field not in overrides:
                var = _variable(exc.field)
                raise ConfigError(f"{var}: {exc}", field=exc.field) from None
            raise


# Environment names that differ from the upper-cased field name.
_ENV_NAMES = {"disabled_backends": "DISABLE_BACKENDS", "history_path": "HISTORY",
              "validate_sample_rate": "VALIDATE"}


def _variable(field: str) -> str:
    """The environment variable of :class:`RuntimeConfig` field ``field``."""
    return ENV_PREFIX + _ENV_NAMES.get(field, field.upper())


def config_variables() -> dict[str, str]:
    """Every variable :meth:`RuntimeConfig.from_env` reads, with its field."""
    return {_variable(f.name): f.name for f in dataclasses.fields(RuntimeConfig)}


def unknown_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """Each ``ADAPTIVE_RUNTIME_*`` variable in ``environ`` that nothing reads, with why: the
    variable it most likely meant (``"did you mean <variable>?"``), or what replaced a removed
    one."""
    fields = config_variables()
    known = [*fields, *TELEMETRY_VARIABLES]
    out: dict[str, str] = {}
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in known:
            continue
        if name in REMOVED_VARIABLES:
            out[name] = f"{name} is no longer read: {REMOVED_VARIABLES[name]}"
            continue
        out[name] = f"{name} is not a variable adaptive_runtime reads, so it changes nothing"
        # (matched without the shared prefix, which would make every name look alike; a
        # field's own name, as in <prefix>HISTORY_PATH, points at its variable)
        rest = name[len(ENV_PREFIX):].upper()
        by_rest = {v[len(ENV_PREFIX):]: v for v in known}
        by_rest.update({field.upper(): v for v, field in fields.items()})
        meant = difflib.get_close_matches(rest, by_rest, n=1, cutoff=0.6)
        out[name] += f": did you mean {by_rest[meant[0]]}?" if meant else \
            " (docs/configuration.md lists those it reads)"
    return out


_warned: set[str] = set()


def _warn_unknown(environ: Mapping[str, str]) -> None:
    """One :class:`ConfigWarning` per unknown variable and process (see
    :func:`unknown_variables`)."""
    for name, why in unknown_variables(environ).items():
        if name not in _warned:
            _warned.add(name)
            warnings.warn(why, ConfigWarning, stacklevel=4)


# ADAPTIVE_RUNTIME_VALIDATE=on: validate about one call in a thousand (1 in 1,024) per key.
DEFAULT_VALIDATE_RATE = 0.001


def _parse_bool(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("1", "on", "true", "yes"):
        return True
    if lowered in ("0", "off", "false", "no"):
        return False
    raise ValueError("accepted values are on/off (also true/false, 1/0, yes/no)")


def _parse_backend_list(raw: str) -> frozenset[Backend]:
    return frozenset(Backend.parse(part, what="each listed backend")
                     for part in raw.split(",") if part.strip())


_PARSERS: dict[str, Callable[[str], Any]] = {
    "force_backend": lambda raw: parse_choice(raw, what="the forced backend"),
    "disabled_backends": _parse_backend_list,
    "tracing": _parse_bool,
    "history_force": _parse_bool,
    "import_frameworks": _parse_bool,
    "host_arms_on_device": _parse_bool,
    "choose_threads": _parse_bool,
    "history_path": str,
    "validate_sample_rate": lambda raw: _parse_rate(raw, DEFAULT_VALIDATE_RATE),
}


def _parse_rate(raw: str, on: float) -> float:
    """A share in [0, 1], or on/off (``on`` gives ``on``)."""
    try:
        return float(raw)
    except ValueError:
        try:
            return on if _parse_bool(raw) else 0.0
        except ValueError:
            raise ValueError("accepted values are a number from 0 to 1, or on/off") from None


def _parse_by_type(field: dataclasses.Field) -> Any:
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    if kind.startswith("int"):
        return int
    if kind.startswith("float"):
        return float
    return str


def _backend(value: object, field: str) -> Backend:
    try:
        return Backend.parse(value, what=field)
    except ValueError as exc:
        raise ConfigError(str(exc), field=field) from None


def _forced(value: object) -> Choice:
    try:
        return parse_choice(value, what="force_backend")
    except ValueError as exc:
        raise ConfigError(str(exc), field="force_backend") from None


def _iterable(value: object) -> Iterable[object]:
    if isinstance(value, str | Backend):
        return [part for part in str(value).split(",") if part.strip()] \
            if not isinstance(value, Backend) else [value]
    if isinstance(value, Iterable):
        return value
    raise ConfigError(f"disabled_backends must be a collection of backends, got "
                      f"{_shown(value)}", field="disabled_backends")


# The longest wait a background thread can be given (threading.TIMEOUT_MAX is ~292 years,
# but a timestamp that far overflows): a year, far beyond any useful save interval.
_MAX_INTERVAL_S = 365 * 24 * 3600.0


def _shown(value: object) -> str:
    """``repr(value)``, except for an int too long to print (Python refuses past 4300 digits),
    alone or inside a container."""
    if isinstance(value, int) and value.bit_length() > 1000:
        return f"an int of {value.bit_length()} bits"
    try:
        return repr(value)
    except ValueError:  # (an int too long to print, inside a list, a tuple, ...)
        return f"a {type(value).__name__} too long to print"


def _path(value: object) -> str:
    try:
        path = os.fspath(value)  # type: ignore[call-overload]
    except TypeError:
        raise ConfigError("history_path must be a path (str or os.PathLike), got "
                          f"{_shown(value)}",
                          field="history_path") from None
    if not isinstance(path, str) or not path or "\0" in path:
        raise ConfigError(f"history_path must be a non-empty str path without NUL characters, "
                          f"got {_shown(value)}", field="history_path")
    return path


def _number(cfg: RuntimeConfig, name: str, *, low: float, high: float = math.inf,
            low_open: bool = False, infinite: bool = False) -> None:
    value = getattr(cfg, name)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            value = float(value)
        except OverflowError:  # an int too large for a float: out of range below
            value = math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ConfigError(f"{name} must be a number, got {_shown(getattr(cfg, name))}",
                          field=name)
    if infinite and value == math.inf:
        object.__setattr__(cfg, name, math.inf)
        return
    too_low = value <= low if low_open else value < low
    if too_low or value > high or math.isinf(value):
        low_text = f"> {low:g}" if low_open else f">= {low:g}"
        high_text = "" if math.isinf(high) else f" and <= {high:g}"
        raise ConfigError(f"{name} must be a finite number {low_text}{high_text}, "
                          f"got {_shown(getattr(cfg, name))}", field=name)
    object.__setattr__(cfg, name, float(value))


def _integer(cfg: RuntimeConfig, name: str, *, low: int, high: int | None = None) -> None:
    value = getattr(cfg, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, got {_shown(value)}", field=name)
    if value < low or (high is not None and value > high):
        high_text = "" if high is None else f" and <= {high}"
        raise ConfigError(f"{name} must be an integer >= {low}{high_text}, got {_shown(value)}",
                          field=name)
