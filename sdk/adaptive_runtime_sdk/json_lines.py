"""The file under the OTLP/JSON exporters (``otlp_json_file``): an append-only JSON Lines file
with rotation, one lock, and logged-once failure handling.

Files are opened lazily (on the first export), appended to, flushed after every line (so a crash
loses at most the line being written), and guarded by one lock per exporter so lines from
concurrent exports never interleave. Use one exporter per path (and a separate path per signal,
e.g. ``traces.jsonl`` / ``metrics.jsonl``): the lock and the size accounting are per instance.

Forked children (DataLoader workers) append to the same file as their parent: one file keeps
the whole run where the Collector's ``otlpjsonfile`` receiver and ``adaptive-runtime report``
look for it. Every line is written with a single ``write()`` on a descriptor opened with
``O_APPEND`` (unbuffered, in the parent too), and a local file system appends each such write
whole at the end of the file, so lines of the parent and its children never interleave (not
guaranteed on NFS). A child renews the lock (the parent's export thread may have held it at the
fork), never rotates (that would move the file away under its parent: rotation is the parent's
job) and opens the path for each line, so it follows the parent's rotations.

Size guard: once appending the next line would take the file past ``max_bytes`` (default
256 MiB), the file is rotated to ``<path>.1`` (replacing any previous backup — one backup only)
and a fresh file is started, so a long run keeps at most about ``2 * max_bytes`` on disk. A single
line larger than ``max_bytes`` is still written whole, alone in a fresh file. ``max_bytes=None``
disables rotation.

Failures never reach the caller (a telemetry problem must not break a training loop): I/O and
encoding errors make ``export`` return ``FAILURE``, are counted in ``failed_exports`` and are
logged once per exporter through ``logging.getLogger(__name__)``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from adaptive_runtime._concurrency.forks import renew_after_fork

_logger = logging.getLogger(__name__)


class JsonLinesFile:
    """Append-only JSON Lines file with rotation, one lock, and logged-once failure handling.

    In a forked child it becomes a *shared* appender (see the module docstring): each line is
    one ``O_APPEND`` write through a descriptor opened for it; no rotation.
    """

    def __init__(self, path: str | os.PathLike[str], max_bytes: int | None) -> None:
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive or None, got {max_bytes}")
        self.path = Path(path)
        self.backup_path = self.path.with_name(self.path.name + ".1")
        self.max_bytes = max_bytes
        self.failed_exports = 0
        self.lines_written = 0
        self.rotations = 0
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = None
        self._size = 0
        self._closed = False
        self._warned = False
        self._shared = False  # a forked child's: appends beside its parent, never rotates
        renew_after_fork(self, JsonLinesFile._after_fork)

    def _after_fork(self) -> None:
        # The parent's export thread may have held the lock at the fork. The inherited handle
        # is unbuffered (nothing of the parent's half-written line sits in it): closing it
        # closes only this process's descriptor.
        self._lock = threading.Lock()
        self._close_locked()
        self._shared = True

    @property
    def closed(self) -> bool:
        return self._closed

    def record_failure(self, what: str, exc: BaseException) -> None:
        """Count a failed export and log the first one (later ones would only flood the log)."""
        with self._lock:
            self._record_failure_locked(what, exc)

    def _record_failure_locked(self, what: str, exc: BaseException) -> None:
        self.failed_exports += 1
        if not self._warned:
            self._warned = True
            _logger.warning(
                "OTLP/JSON file export to %s failed while %s: %r; further failures of this "
                "exporter are counted in failed_exports but not logged",
                self.path,
                what,
                exc,
            )

    def write_line(self, line: bytes) -> bool:
        """Append one line; returns False (never raises) if it could not be written."""
        with self._lock:
            if self._closed:
                return False
            try:
                self._write_locked(line)
            except OSError as exc:
                # Drop the handle so the next export reopens the file: that recovers from e.g. a
                # deleted directory or a disk that had filled up and was cleaned.
                self._close_locked()
                self._record_failure_locked("writing", exc)
                return False
            self.lines_written += 1
            return True

    def _write_locked(self, line: bytes) -> None:
        if self._shared:
            self._append_shared(line)
            return
        if self._file is None:
            self._open_locked()
        if (
            self.max_bytes is not None
            and self._size > 0
            and self._size + len(line) > self.max_bytes
        ):
            self._rotate_locked()
        assert self._file is not None
        # One unbuffered write per line: a crash (or a reader tailing the file) then sees whole
        # requests only, at the cost of one write() syscall per export — exports are batched,
        # so that is cheap — and a forked child's lines land between ours, never inside them.
        _write_all(self._file.write, line)
        self._size += len(line)

    def _append_shared(self, line: bytes) -> None:
        """A forked child's line: opened per line, so the parent's rotations are followed."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.path, flags, 0o666)
        try:
            _write_all(lambda data: os.write(fd, data), line)
        finally:
            os.close(fd)

    def _open_locked(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # "a+b": appends always go to the end (O_APPEND) whatever the read position, and the read
        # side lets us check how an existing file ends. Unbuffered: each line is one write().
        handle = open(self.path, "a+b", buffering=0)  # noqa: SIM115 - outlives this method
        try:
            size = os.fstat(handle.fileno()).st_size
            if size > 0:
                handle.seek(size - 1)
                if handle.read(1) != b"\n":
                    # A previous writer died mid-line (crash, full disk). Terminate that torn
                    # line so it stays one bad line instead of corrupting our first good one.
                    _write_all(handle.write, b"\n")
                    size += 1
        except OSError:
            handle.close()
            raise
        self._file = handle
        self._size = size

    def _rotate_locked(self) -> None:
        self._close_locked()
        os.replace(self.path, self.backup_path)  # atomic; replaces the previous backup
        self.rotations += 1
        self._open_locked()

    def _close_locked(self) -> None:
        handle, self._file = self._file, None
        if handle is not None:
            # Closing after a failed write can fail again (the buffered tail cannot be flushed);
            # that failure has already been counted, and the handle must go either way.
            with contextlib.suppress(OSError):
                handle.close()

    def flush(self) -> bool:
        """Flush and fsync the current file; False if that failed."""
        with self._lock:
            if self._file is None:
                return True
            try:
                self._file.flush()
                # fsync only here (not per line): force_flush is rare (shutdown, explicit calls)
                # and is where a caller asks for durability.
                os.fsync(self._file.fileno())
            except OSError as exc:
                self._close_locked()
                self._record_failure_locked("flushing", exc)
                return False
            return True

    def close(self) -> None:
        """Close the file; later writes are refused. Idempotent."""
        with self._lock:
            self._closed = True
            self._close_locked()


def _write_all(write: Callable[[memoryview], int | None], line: bytes) -> None:
    """Write ``line`` whole: one call does it on a regular file (a short write happens only
    when the disk fills up or a signal interrupts; the rest then follows)."""
    view = memoryview(line)
    while view:
        written = write(view)
        if not written:
            raise OSError(f"could not write {len(view)} bytes (no progress)")
        view = view[written:]
