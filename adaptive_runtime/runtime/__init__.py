"""The runtime: ``AdaptiveRuntime`` and the process's default one.

- ``facade``: :class:`AdaptiveRuntime`, the public methods (and ``_unpickle_runtime``, which
  makes one from a pickle);
- ``_wiring``: its parts built from the :class:`~adaptive_runtime.RuntimeConfig` (the one
  place ``RuntimeConfig`` becomes ``PolicyConfig``), the telemetry sinks switched on and off,
  the parts' callbacks;
- ``_history_file``: the ``history_path`` file, read at start-up and saved periodically and at
  exit;
- ``_pickling``: the recipes a pickled runtime's operations travel as;
- ``stats``: :class:`RuntimeStats`, one reading of the per-call counters;
- ``default``: :func:`get_runtime`, the process default.
"""

from .._dispatch.call_site import CallSite
from .default import get_runtime
from .facade import AdaptiveRuntime

# (the import path every pickled runtime names: see facade._unpickle_runtime)
from .facade import _unpickle_runtime as _unpickle_runtime
from .stats import RuntimeStats

__all__ = ["AdaptiveRuntime", "CallSite", "RuntimeStats", "get_runtime"]
