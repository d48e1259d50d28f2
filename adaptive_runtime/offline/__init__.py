"""The offline wing: what is read after the fact, from files a run left behind.

``replay`` runs the selection policy over recorded per-call timings (``rt.record_calls``, or a
telemetry folder's ``traces.jsonl``) and scores configurations against the hindsight oracle;
``report`` prints and draws what a runtime learned, from a live runtime, a history file or the
telemetry files. ``adaptive-runtime replay`` and ``adaptive-runtime report`` are their commands.
Nothing here runs on a user's call path.
"""

from . import replay, report

__all__ = ["replay", "report"]
