"""What the runtime metrics read from a runtime, and how its labels become attributes.

:class:`MetricsSource` and :class:`KeySource` are what a runtime provides to the metrics
(``AdaptiveRuntime`` does); the counter readers turn its cumulative counts into label tuples,
and :func:`series_attributes` turns a label tuple into the attributes of one series.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..backend import VARIANT_SEPARATOR, choice_of

if TYPE_CHECKING:
    from ..backend import Backend
    from ..decision import Decision
    from ..history import HistoryRecord
    from ..records import SelectionKey

__all__ = ["COUNTERS", "KeySource", "LabelCounts", "MetricsSource", "ReadCounts", "label_of",
           "series_attributes"]

# Attribute keys of each counter, in the order of the label tuples the readers below build.
_SELECTION = ("adaptive.operation", "adaptive.backend", "adaptive.decision")
_FALLBACK = ("adaptive.operation", "adaptive.backend", "adaptive.fallback_to")
_REASON = ("adaptive.sampling.reason",)


class MetricsSource(Protocol):
    """What :class:`~.metrics.RuntimeMetrics` reads (``AdaptiveRuntime`` provides it). Counts
    are cumulative since the source was created and cover every call, traced or not."""

    def selection_counts(self) -> Mapping[SelectionKey, int]: ...

    def fallback_counts(self) -> Mapping[tuple[str, Backend, Backend], int]: ...

    def trace_counts(self) -> Mapping[str, Mapping[str, int]]: ...

    def hot_operations(self) -> list[str]: ...

    @property
    def operations(self) -> tuple[str, ...]: ...


class KeySource(Protocol):
    """What the key gauges read, where a :class:`MetricsSource` also has it
    (``AdaptiveRuntime`` does; a source without these methods reports no keys)."""

    def history_snapshot(self) -> list[HistoryRecord]: ...

    def decide(self, operation: str, input_size: int) -> Decision: ...


def label_of(value: object) -> str:
    # Backend, Variant and Reason have a ``value``: the bounded label ("simd:numpy" for a
    # variant, split into two attributes by series_attributes).
    return str(getattr(value, "value", value))


def series_attributes(keys: tuple[str, ...], labels: tuple[Any, ...]) -> dict[str, Any]:
    """The attributes of one series: ``keys`` and ``labels`` paired, an arm's variant
    ("<arm>:<variant>") split into ``adaptive.backend`` and ``adaptive.variant``."""
    attrs = dict(zip(keys, labels, strict=True))
    arm = attrs.get("adaptive.backend")
    if isinstance(arm, str) and VARIANT_SEPARATOR in arm:
        attrs["adaptive.backend"], _, attrs["adaptive.variant"] = arm.partition(
            VARIANT_SEPARATOR)
    return attrs


def _selections(source: MetricsSource) -> LabelCounts:
    return {(key.operation, label_of(choice_of(key.backend, key.variant)), label_of(key.reason)): n
            for key, n in source.selection_counts().items()}


def _fallbacks(source: MetricsSource) -> LabelCounts:
    return {(op, label_of(failed), label_of(to)): n
            for (op, failed, to), n in source.fallback_counts().items()}


def _exported(source: MetricsSource) -> LabelCounts:
    return {(reason,): n for reason, n in source.trace_counts().get("exported", {}).items()}


def _suppressed(source: MetricsSource) -> LabelCounts:
    return {(reason,): n for reason, n in source.trace_counts().get("suppressed", {}).items()}


LabelCounts = dict[tuple[str, ...], int]  # label values (in attribute-key order) -> count
ReadCounts = Callable[[MetricsSource], LabelCounts]
COUNTERS: Mapping[str, tuple[tuple[str, ...], ReadCounts]] = {
    "selection": (_SELECTION, _selections),
    "fallback": (_FALLBACK, _fallbacks),
    "exported": (_REASON, _exported),
    "suppressed": (_REASON, _suppressed),
}
