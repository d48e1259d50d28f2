"""``adaptive-runtime doctor``: what this machine and environment give the runtime, read the way
the runtime reads them, and what is wrong with its settings — before a training job finds out.

- The arms: SCALAR (numba's compiled loops, else plain Python), SIMD (numpy and its BLAS,
  numba's threaded loops), GPU (torch's CUDA device, JAX's GPU backend, numba's CUDA: names
  and memory), with the libraries' versions.
- The thread pools the kernels run on (:mod:`adaptive_runtime.threads`).
- Telemetry: whether the OpenTelemetry SDK is installed (the ``otlp`` extra), where
  ``configure()`` would export from this environment (``OTEL_*`` variables), and whether
  that destination answers (a TCP connection to an OTLP endpoint; a writable folder for the
  files); the Prometheus port, and whether it is free.
- The history file (``ADAPTIVE_RUNTIME_HISTORY``): absent, readable and applicable here, from
  other hardware (what differs), or unreadable (why).
- Every ``ADAPTIVE_RUNTIME_*`` variable set, checked by the code that reads it (the runtime's
  :meth:`RuntimeConfig.from_env`, telemetry's own parsers): an invalid value with the error
  the runtime would raise, an unknown name (misspelt or removed) with the one it likely meant.
- A CUDA build of torch on a machine where it finds no GPU (:func:`cuda_build_warning`).

Every finding is a plain value in :func:`diagnose`'s dict (``--json`` prints it); ``problems``
lists what would fail, be refused or be ignored (the command exits 1), ``warnings`` what works
but costs more than it needs to. Asking imports torch and JAX where installed (seconds), never
more: no kernel runs, no file is written.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import socket
import urllib.parse
from collections.abc import Mapping
from typing import Any

from .._version import __version__
from ..config import (
    ENV_PREFIX,
    REMOVED_VARIABLES,
    RuntimeConfig,
    config_variables,
    unknown_variables,
)
from ..errors import ConfigError
from ..history import LEGACY_HISTORY_FORMAT, fingerprint_differences, read_history_file
from ..history.fingerprint import hardware_fingerprint
from ..telemetry.deadline import ENV_VAR as SHUTDOWN_TIMEOUT_VARIABLE
from ..telemetry.deadline import resolve_shutdown_timeout
from ..telemetry.defaults import (
    DEFAULT_DIRECTORY,
    DEFAULT_PROMETHEUS_HOST,
    DEFAULT_PROMETHEUS_PORT,
    INSTALL_SDK_SIDE,
)
from ..threads import POOLS

__all__ = ["CPU_WHEEL_INDEX", "cuda_build_warning", "diagnose"]

_OTLP_PORTS = {"grpc": 4317, "http/protobuf": 4318}
#: PyTorch's index of CPU-only wheels (no CUDA libraries).
CPU_WHEEL_INDEX = "https://download.pytorch.org/whl/cpu"


def diagnose(environ: Mapping[str, str] | None = None, *,
             timeout_s: float = 1.0) -> dict[str, Any]:
    """Everything ``adaptive-runtime doctor`` reports (see the module docstring); connection
    checks wait at most ``timeout_s`` each."""
    env = os.environ if environ is None else environ
    libraries = {name: _version(name) for name in ("numpy", "numba", "torch", "jax",
                                                    "opentelemetry-api", "opentelemetry-sdk")}
    gpus, gpu_via = _gpus(libraries)
    if libraries["numba"]:
        import numba  # noqa: F401  (its configured thread count, read by the fingerprint)
    fingerprint = hardware_fingerprint()
    found: dict[str, Any] = {
        "adaptive_runtime": __version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpu": {"model": fingerprint.get("cpu"), "count": os.cpu_count()},
        "libraries": libraries,
        "arms": {
            "scalar": {"available": True,
                       "via": "numba's compiled loops" if libraries["numba"]
                       else "plain Python loops (numba is not installed: slow)"},
            "simd": {"available": True,
                     "via": "numpy" + (" and numba's threaded loops" if libraries["numba"]
                                       else "")},
            "gpu": {"available": bool(gpus), "via": gpu_via},
        },
        "gpus": gpus,
        # (numba's configured count until its threading layer is up: see fingerprint)
        "threads": {pool: fingerprint.get(f"{pool}_threads") for pool in POOLS},
        "telemetry": _telemetry(env, timeout_s),
        "history": _history(env),
        "settings": _settings(env),
    }
    found["problems"] = _problems(found)
    found["warnings"] = _warnings(libraries)
    return found


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpus(libraries: Mapping[str, str | None]) -> tuple[list[dict[str, Any]], str]:
    """The GPUs a GPU library sees here, and which library (or why none)."""
    if libraries["torch"]:
        try:
            import torch

            if torch.cuda.is_available():
                return [{"name": torch.cuda.get_device_name(i),
                         "memory_gib": round(torch.cuda.get_device_properties(i).total_memory
                                             / 2**30, 1), "library": "torch"}
                        for i in range(torch.cuda.device_count())], \
                    f"torch {torch.__version__} (CUDA {torch.version.cuda})"
        except Exception as exc:  # a broken driver: reported, not raised
            return [], f"torch cannot use CUDA here ({type(exc).__name__}: {exc})"
    if libraries["jax"] and importlib.util.find_spec("jax_plugins") is not None:
        try:
            import jax

            devices = [d for d in jax.devices() if d.platform == "gpu"]
            if devices:
                return [{"name": d.device_kind, "memory_gib": None, "library": "jax"}
                        for d in devices], f"jax {jax.__version__}"
        except Exception as exc:
            return [], f"JAX cannot use a GPU here ({type(exc).__name__}: {exc})"
    why = "no CUDA device visible to torch" if libraries["torch"] else \
        "neither torch (with CUDA) nor a JAX GPU plugin is installed"
    return [], why


def _configure_installed() -> bool:
    """Whether ``ar.telemetry.configure()`` can run here: the OpenTelemetry SDK and the
    ``adaptive_runtime_sdk`` distribution (both brought by the ``otlp`` extra)."""
    return all(importlib.util.find_spec(name) is not None
               for name in ("opentelemetry.sdk", "adaptive_runtime_sdk"))


def _telemetry(env: Mapping[str, str], timeout_s: float) -> dict[str, Any]:
    sdk = _configure_installed()
    out: dict[str, Any] = {"sdk_installed": sdk}
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        out.update(destination="none (OTEL_SDK_DISABLED=true)", reachable=None)
        return out
    endpoint = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip()
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip().lower()
    if exporter in ("none", "console"):
        out.update(destination=f"{exporter} (OTEL_TRACES_EXPORTER)", reachable=None)
    elif endpoint or exporter == "otlp":
        url = endpoint or f"http://localhost:{_OTLP_PORTS.get(protocol, 4318)}"
        out["destination"] = f"OTLP {protocol} {url}"
        out["reachable"], out["detail"] = _connects(url, protocol, timeout_s)
    else:
        folder = env.get("ADAPTIVE_RUNTIME_TELEMETRY_DIR") or DEFAULT_DIRECTORY
        out["destination"] = f"OTLP/JSON files in {os.path.abspath(folder)}"
        out["reachable"], out["detail"] = _writable(folder)
    port = _prometheus_port(env)
    if port is not None:
        host = env.get("OTEL_EXPORTER_PROMETHEUS_HOST", "").strip() or DEFAULT_PROMETHEUS_HOST
        out["prometheus"] = {"host": host, "port": port, "free": _port_free(host, port)}
    if not sdk:
        out["detail"] = ("the OpenTelemetry SDK side is not installed: configure() needs "
                         + INSTALL_SDK_SIDE)
    return out


def _connects(url: str, protocol: str, timeout_s: float) -> tuple[bool, str]:
    parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    host = parsed.hostname or "localhost"
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else _OTLP_PORTS.get(protocol,
                                                                                     4318))
    except ValueError:
        return False, f"not a valid endpoint URL: {url!r}"
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True, f"{host}:{port} accepts connections"
    except OSError as exc:
        return False, f"{host}:{port}: {exc.strerror or exc}"


def _writable(folder: str) -> tuple[bool, str]:
    existing = os.path.abspath(folder)
    while not os.path.isdir(existing):  # (the files' folder is made on first export)
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    if os.access(existing, os.W_OK | os.X_OK):
        return True, f"{existing} is writable"
    return False, f"{existing} is not writable"


def _prometheus_port(env: Mapping[str, str]) -> int | None:
    raw = env.get("ADAPTIVE_RUNTIME_PROMETHEUS_PORT", "").strip()
    if raw.lower() in ("on", "true", "yes", "default"):
        return DEFAULT_PROMETHEUS_PORT
    if not raw and env.get("OTEL_METRICS_EXPORTER", "").strip().lower() == "prometheus":
        raw = env.get("OTEL_EXPORTER_PROMETHEUS_PORT", "").strip() or str(DEFAULT_PROMETHEUS_PORT)
    try:
        return int(raw) if raw else None
    except ValueError:
        return None  # (configure() names the variable: see problems)


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _history(env: Mapping[str, str]) -> dict[str, Any]:
    path = env.get("ADAPTIVE_RUNTIME_HISTORY", "").strip()
    if not path:
        return {"path": None, "status": "not set (ADAPTIVE_RUNTIME_HISTORY)"}
    out: dict[str, Any] = {"path": os.path.abspath(path)}
    if not os.path.exists(path):
        out["status"] = "absent (made at the first save)"
        return out
    try:
        loaded = read_history_file(path)
    except (OSError, ValueError) as exc:
        out.update(status="unreadable", detail=str(exc))
        return out
    out["records"] = len(loaded.records)
    from ..kernels import known_operations  # (the operations' records: numpy, on first use)

    # (as the runtime compares: only what the file's keys depend on; a /1 file has nothing)
    differ = [f"it has no hardware fingerprint (format {LEGACY_HISTORY_FORMAT!r}): measured "
              "on an unknown machine"] if loaded.fingerprint is None else \
        fingerprint_differences(hardware_fingerprint(), loaded.fingerprint, loaded.records,
                                known_operations())
    if not differ:
        out["status"] = "applies here"
    elif _forced(env):
        out.update(status="from other hardware or libraries: applied anyway "
                          "(ADAPTIVE_RUNTIME_HISTORY_FORCE)", differences=differ, forced=True)
    else:
        out.update(status="from other hardware or libraries: not applied", differences=differ)
    return out


def _forced(env: Mapping[str, str]) -> bool:
    """Whether the runtime would apply a foreign history file (``history_force``)."""
    name = "ADAPTIVE_RUNTIME_HISTORY_FORCE"
    try:
        return RuntimeConfig.from_env({name: env.get(name, "")}).history_force
    except ConfigError:
        return False  # (a malformed switch: the runtime refuses it at start-up)


def _settings(env: Mapping[str, str]) -> list[dict[str, Any]]:
    """Each ``ADAPTIVE_RUNTIME_*`` variable set: ``variable``, ``value``, ``status`` (``ok``,
    ``invalid``, ``unknown`` or ``removed``) and, unless ok, ``detail`` — the error the code
    reading it raises, or what the name likely meant. A conflict between valid variables
    (a forced arm also disabled) is an entry with ``variable`` ``None``."""
    fields = config_variables()
    unknown = unknown_variables(env)
    out: list[dict[str, Any]] = []
    for name in sorted(n for n in env if n.startswith(ENV_PREFIX)):
        entry: dict[str, Any] = {"variable": name, "value": env[name], "status": "ok"}
        if name in unknown:
            entry.update(status="removed" if name in REMOVED_VARIABLES else "unknown",
                         detail=unknown[name])
        else:
            error = _setting_error(name, env[name], name in fields)
            if error is not None:
                entry.update(status="invalid", detail=error)
        out.append(entry)
    try:  # (each alone is valid: together, as the runtime reads them)
        RuntimeConfig.from_env({n: v for n, v in env.items() if n in fields})
    except ConfigError as exc:
        if not any(entry.get("detail") == str(exc) for entry in out):
            out.append({"variable": None, "value": None, "status": "invalid",
                        "detail": str(exc)})
    return out


def _setting_error(name: str, raw: str, config: bool) -> str | None:
    """The error the code that reads variable ``name`` raises for ``raw``, or ``None``."""
    try:
        if config:
            RuntimeConfig.from_env({name: raw})
        elif name == SHUTDOWN_TIMEOUT_VARIABLE:
            resolve_shutdown_timeout(None, {name: raw})
        elif name == "ADAPTIVE_RUNTIME_PROMETHEUS_PORT" and raw.strip() \
                and _configure_installed():
            # (configure()'s own reading; without the SDK configure() cannot run at all,
            # which the telemetry check reports)
            from adaptive_runtime_sdk.configure import resolve_prometheus_port

            resolve_prometheus_port(None, {name: raw})
    except ConfigError as exc:
        return str(exc)
    return None


def cuda_build_warning(torch_version: str, cuda_version: str | None, cuda_available: bool,
                       cuda_bytes: int | None = None) -> str | None:
    """The warning for a CUDA build of torch (``torch.version.cuda`` set) that finds no GPU
    (``torch.cuda.is_available()`` false), naming the CPU wheels and, where known, the bytes
    its CUDA libraries take (``cuda_bytes``); ``None`` for a CPU build or a usable GPU."""
    if not cuda_version or cuda_available:
        return None
    size = f"{cuda_bytes / 1e9:.1f} GB" if cuda_bytes else "gigabytes"
    return (f"torch {torch_version} is a CUDA build (CUDA {cuda_version}) but finds no GPU "
            f"here: its CUDA libraries take {size} of disk for nothing. Without a GPU the CPU "
            f"build does the same work: pip install torch --index-url {CPU_WHEEL_INDEX}")


def _warnings(libraries: Mapping[str, str | None]) -> list[str]:
    """What works but costs more than it needs to (see :func:`cuda_build_warning`)."""
    if not libraries["torch"]:
        return []
    import torch

    try:
        available = bool(torch.cuda.is_available())
    except Exception:  # (a broken driver: no GPU usable, reported under the GPU arm)
        available = False
    cuda = getattr(torch.version, "cuda", None)
    if not cuda or available:
        return []
    warning = cuda_build_warning(torch.__version__, cuda, available, _cuda_library_bytes())
    return [warning] if warning else []


def _cuda_library_bytes() -> int:
    """Bytes the installed CUDA libraries take: NVIDIA's wheels (``nvidia-*``), triton, and
    torch's own CUDA files, summed from the wheels' RECORD (nothing is opened but metadata)."""
    total = 0
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        cuda_dist = name.startswith("nvidia-") or name == "triton"
        if cuda_dist or name == "torch":
            total += sum(f.size or 0 for f in dist.files or ()
                         if cuda_dist or "cuda" in f.name.lower())
    return total


def _problems(found: Mapping[str, Any]) -> list[str]:
    problems = []
    telemetry = found["telemetry"]
    if telemetry.get("reachable") is False:
        problems.append(f"telemetry: {telemetry['destination']}: {telemetry['detail']}")
    if not telemetry["sdk_installed"]:
        problems.append("telemetry: " + telemetry["detail"])
    prometheus = telemetry.get("prometheus")
    if prometheus is not None and not prometheus["free"]:
        problems.append(f"prometheus: {prometheus['host']}:{prometheus['port']} is taken: no "
                        f"scrape endpoint would start")
    history = found["history"]
    if history["status"] == "unreadable":
        problems.append(f"history: {history['path']}: {history['detail']}")
    elif "differences" in history and not history.get("forced"):
        problems.append(f"history: {history['path']} is not applied here: "
                        + "; ".join(history["differences"]))
    problems += [f"settings: {entry['detail']}" for entry in found["settings"]
                 if entry["status"] != "ok"]
    return problems
