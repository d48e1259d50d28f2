"""Measured history per (operation, size bucket, arm and variant), bounded, mergeable, serialisable.

Per arm: a sample count, the mean and variance of its latest timings, failures and a quarantine
deadline, and the time of the last update. Per key: the arms, lifetime counts, and how often
estimates were merged in from elsewhere. What the policy makes of it is the policy's own state
(:class:`adaptive_runtime.policy.KeyState`), kept apart. The policy reads the store and never
writes.

One concern per submodule, imports pointing down the list:

- :mod:`.record` — :class:`HistoryRecord`, the frozen row of history, and :data:`Origins`.
- :mod:`.estimate` — :class:`ArmStats`, one arm's estimate, and the estimator's constants
  (``FIXED_CALL_COST_US``).
- :mod:`._guarded_json` — a history file's bytes and JSON read bounded and guarded (size,
  nesting depth, integer length, unique keys).
- :mod:`.file` — history files (:func:`write_history_file`, :func:`read_history_file`,
  :func:`move_aside`), their format and a record's JSON form.
- :mod:`.depends` — :func:`fingerprint_differences`: what keeps a file from applying here,
  compared only where its keys depend on it (a torch-only file does not care about JAX).
- :mod:`.store` — :class:`KeyHistory` and :class:`HistoryStore`, the history in memory.
- :mod:`.ranks` — :func:`combine_rank_rows`, the ranks' rows merged in a distributed sync.
"""

from .depends import KnownOperations, fingerprint_differences
from .estimate import FIXED_CALL_COST_US, ArmStats
from .file import (
    HISTORY_FORMAT,
    LEGACY_HISTORY_FORMAT,
    MAX_HISTORY_FILE_BYTES,
    HistoryFile,
    HistoryWarning,
    history_document,
    move_aside,
    parse_history_document,
    read_history_file,
    record_from_json,
    record_to_json,
    write_history_file,
)
from .ranks import combine_rank_rows
from .record import HistoryRecord, Origins
from .store import HistoryStore, KeyHistory

__all__ = ["FIXED_CALL_COST_US", "HISTORY_FORMAT", "LEGACY_HISTORY_FORMAT",
           "MAX_HISTORY_FILE_BYTES", "ArmStats", "HistoryFile", "HistoryRecord", "HistoryStore",
           "HistoryWarning", "KeyHistory", "KnownOperations", "Origins", "combine_rank_rows",
           "fingerprint_differences", "history_document", "move_aside", "parse_history_document",
           "read_history_file", "record_from_json", "record_to_json", "write_history_file"]
