"""Recording a runtime's timed calls to a JSON-lines file, for ``adaptive-runtime replay``
(:mod:`adaptive_runtime.offline.replay` reads the file; ``rt.record_calls(path)`` starts one).

The file's first line names its format (``{"format": "adaptive_runtime.calls/1"}``); each
further line is one timed call: ``operation``, ``size``, ``arm``, ``duration_us``, ``time_s``
and ``calls`` (how many calls it stands for).
"""

from __future__ import annotations

import json
import os
import threading
from typing import IO, Any

from ..backend import Choice

__all__ = ["CALLS_FORMAT", "DEFAULT_MAX_CALLS", "CallRecorder"]

CALLS_FORMAT = "adaptive_runtime.calls/1"
# Recorded calls written at most (one line each, ~120 bytes: about 120 MB), then recording
# stops (CallRecorder.dropped counts what was left out).
DEFAULT_MAX_CALLS = 1_000_000
# Records kept in memory before they are written out (under the runtime's lock).
_FLUSH_EVERY = 4096


class CallRecorder:
    """Writes the runtime's timed calls to a JSON-lines file (see the module docstring).

    Opt-in (``rt.record_calls(path)``), bounded by ``max_calls`` lines. Records are buffered
    and written every 4,096 calls and at :meth:`close` (a recorder is also a context
    manager); a write error stops recording, it never reaches the caller's call.
    """

    def __init__(self, path: str | os.PathLike[str], max_calls: int = DEFAULT_MAX_CALLS) -> None:
        if max_calls < 1:
            raise ValueError(f"max_calls must be >= 1, got {max_calls}")
        self.path = os.fspath(path)
        self.max_calls = max_calls
        self.written = 0
        self.dropped = 0
        self.error: OSError | None = None
        self._pending: list[tuple[str, int, Choice, float, float, int]] = []
        self._lock = threading.Lock()
        self._file: IO[str] | None = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
        self._file.write(json.dumps({"format": CALLS_FORMAT}) + "\n")
        self._detach: Any = None

    def __call__(self, record: tuple[str, int, Choice, float, float, int]) -> None:
        """One timed call: (operation, size, arm, duration_us, time_s, calls)."""
        with self._lock:  # (close() may run on another thread)
            if self.written + len(self._pending) >= self.max_calls or self._file is None:
                self.dropped += 1
                return
            self._pending.append(record)
            full = len(self._pending) >= _FLUSH_EVERY
        if full:
            self.flush()

    def flush(self) -> None:
        """Write what is buffered."""
        with self._lock:
            pending, self._pending = self._pending, []
            if self._file is None or not pending:
                return
            try:
                self._file.write("".join(
                    json.dumps({"operation": op, "size": size, "arm": arm.value,
                                "duration_us": duration_us, "time_s": time_s, "calls": calls})
                    + "\n" for op, size, arm, duration_us, time_s, calls in pending))
                self._file.flush()
                self.written += len(pending)
            except OSError as exc:  # (a full disk: recording stops, the run goes on)
                self.error = exc
                self._file = None

    def close(self) -> None:
        """Stop recording, write what is buffered and close the file."""
        if self._detach is not None:
            self._detach()
            self._detach = None
        self.flush()
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> CallRecorder:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
