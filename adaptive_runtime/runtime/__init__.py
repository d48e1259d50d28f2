"""The runtime: ``AdaptiveRuntime`` and the process's default one.

- ``facade``: :class:`AdaptiveRuntime`, the public methods, :func:`get_runtime` (the process
  default), and ``unpickle_runtime``, which makes one from a pickle;
- ``_wiring``: ``RuntimeParts``, the parts a runtime has, built from the
  :class:`~adaptive_runtime.RuntimeConfig` (the one place ``RuntimeConfig`` becomes
  ``PolicyConfig``), the telemetry sinks switched on and off, a sync's two ends;
- ``_history_file``: the ``history_path`` file, read at start-up and saved periodically and at
  exit;
- ``_pickling``: the recipes a pickled runtime's operations travel as;
- ``_arguments``: the checks of the Trueno-style methods' arguments;
- ``stats``: :class:`RuntimeStats`, one reading of the per-call counters.
"""

from .._dispatch.call_site import CallSite
from .facade import AdaptiveRuntime, get_runtime, unpickle_runtime
from .stats import RuntimeStats

# (the import path every pickled runtime names: see facade.unpickle_runtime)
_unpickle_runtime = unpickle_runtime

__all__ = ["AdaptiveRuntime", "CallSite", "RuntimeStats", "get_runtime"]
