"""The Prometheus scrape endpoint's reader, with the exemplars the OpenTelemetry exporter leaves
out.

``opentelemetry-exporter-prometheus`` translates each histogram data point into buckets and
drops its exemplars, though ``prometheus_client`` writes them in the OpenMetrics format
(which Prometheus asks for when it scrapes). :func:`exemplar_reader` is that exporter's reader
with its collector wrapped: the histograms' exemplars are noted as the SDK hands a collection
over, then attached to the bucket each one falls in, labelled ``trace_id`` and ``span_id``
(the names Grafana's exemplar links look for). A Prometheus started with
``--enable-feature=exemplar-storage`` keeps them; Grafana links a latency to its trace.

The exporter is used as it is: only its reader's collector (a private attribute) is wrapped.
Where a version of the exporter has none, the reader works without exemplars (logged once at
debug level). Upstream: open-telemetry/opentelemetry-python#2407 (exemplars in the Prometheus
exporter; PR #4178, histogram buckets only, still open); ``tests/unit/test_upstream_gaps.py``
fails once the exporter writes them itself.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics.export import Histogram, MetricsData
from prometheus_client.core import REGISTRY, Metric
from prometheus_client.samples import Exemplar

__all__ = ["EXEMPLAR_SPAN_LABEL", "EXEMPLAR_TRACE_LABEL", "exemplar_reader"]

#: The labels of an exemplar: the ids of the traced call's kernel span (hex), the names the
#: Collector's Prometheus exporter writes too, and Grafana's data source links from.
EXEMPLAR_TRACE_LABEL = "trace_id"
EXEMPLAR_SPAN_LABEL = "span_id"

_log = logging.getLogger(__name__)

# Prometheus' rules for names and label names, as the exporter applies them
_NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_:]")
_NOT_IN_LABEL = re.compile(r"[^a-zA-Z0-9_]")
_SCOPE_LABEL_PREFIX = "otel_scope_"

# histogram name -> the point's labels -> the bucket's ``le`` label -> its exemplar
_Exemplars = dict[str, dict[frozenset[tuple[str, str]], dict[str, Exemplar]]]


def exemplar_reader() -> PrometheusMetricReader:
    """A ``PrometheusMetricReader`` on ``prometheus_client``'s default registry whose
    histograms carry their exemplars in the OpenMetrics exposition."""
    reader = PrometheusMetricReader()
    inner = getattr(reader, "_collector", None)
    registry = getattr(reader, "_registry", REGISTRY)
    if inner is None or not hasattr(inner, "add_metrics_data"):
        _log.debug("adaptive_runtime: this opentelemetry-exporter-prometheus has no collector "
                   "to wrap; the scrape endpoint serves no exemplars")
        return reader
    registry.unregister(inner)
    wrapped = _WithExemplars(inner)
    reader._collector = wrapped  # type: ignore[attr-defined]  # (its shutdown unregisters it)
    registry.register(wrapped)
    return reader


class _WithExemplars:
    """The exporter's collector, with the histograms' exemplars put back on their buckets."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self._exemplars: _Exemplars = {}

    def add_metrics_data(self, metrics_data: MetricsData) -> None:
        """(The reader hands each collection here, on the scrape's thread.)"""
        try:
            self._note(metrics_data)
        except Exception:  # exemplars are extra: never lose the collection over them
            _log.debug("adaptive_runtime: reading exemplars failed", exc_info=True)
        self._inner.add_metrics_data(metrics_data)

    def describe(self) -> list[Metric]:
        # (without it, registering would run a whole collection to learn the names)
        return []

    def collect(self) -> Iterator[Metric]:
        families = list(self._inner.collect())  # (its callback hands over the collection)
        with self._lock:
            exemplars, self._exemplars = self._exemplars, {}
        for family in families:
            if family.type == "histogram" and exemplars:
                _attach(family, exemplars)
            yield family

    def _note(self, metrics_data: MetricsData) -> None:
        noted: _Exemplars = {}
        for resource_metrics in metrics_data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if isinstance(metric.data, Histogram):
                        _note_histogram(noted.setdefault(_name(metric.name), {}),
                                        metric.data.data_points)
        with self._lock:
            for name, points in noted.items():
                mine = self._exemplars.setdefault(name, {})
                for labels, buckets in points.items():
                    mine.setdefault(labels, {}).update(buckets)


def _note_histogram(points: dict[frozenset[tuple[str, str]], dict[str, Exemplar]],
                    data_points: Iterable[Any]) -> None:
    for point in data_points:
        exemplars = getattr(point, "exemplars", None)
        if not exemplars:
            continue
        labels = frozenset((_label_name(k), _label_value(v))
                           for k, v in point.attributes.items())
        buckets = points.setdefault(labels, {})
        for exemplar in exemplars:
            if not exemplar.trace_id or not exemplar.span_id:
                continue  # (recorded outside a sampled span: nothing to link to)
            buckets[_bucket_label(exemplar.value, point.explicit_bounds)] = Exemplar(
                {EXEMPLAR_TRACE_LABEL: f"{exemplar.trace_id:032x}",
                 EXEMPLAR_SPAN_LABEL: f"{exemplar.span_id:016x}"},
                exemplar.value, exemplar.time_unix_nano / 1e9)


def _attach(family: Metric, exemplars: _Exemplars) -> None:
    """Put each noted exemplar on its bucket sample of ``family``."""
    name = family.name
    if family.unit and name.endswith("_" + family.unit):
        name = name[:-len(family.unit) - 1]  # (prometheus_client appends the unit)
    points = exemplars.get(name)
    if not points:
        return
    bucket_name = family.name + "_bucket"
    for i, sample in enumerate(family.samples):
        if sample.name != bucket_name:
            continue
        # (the exporter adds scope labels, and backfills labels other points have with "")
        labels = frozenset((k, v) for k, v in sample.labels.items()
                           if k != "le" and v != "" and not k.startswith(_SCOPE_LABEL_PREFIX))
        exemplar = points.get(labels, {}).get(sample.labels.get("le", ""))
        if exemplar is not None:
            family.samples[i] = sample._replace(exemplar=exemplar)


def _bucket_label(value: float, bounds: Sequence[float]) -> str:
    """The ``le`` label of the bucket ``value`` falls in, as the exporter writes it."""
    for bound in bounds:
        if value <= bound:
            return f"{bound}"
    return "+Inf"


def _name(name: str) -> str:
    if name[:1].isdigit():
        name = "_" + name[1:]
    return _NOT_IN_NAME.sub("_", name)


def _label_name(key: str) -> str:
    if key[:1].isdigit():
        key = "_" + key[1:]
    return _NOT_IN_LABEL.sub("_", key)


def _label_value(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)
