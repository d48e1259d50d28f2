"""The "adaptive_runtime" Grafana dashboard, as code (Grafana's ``grafana-foundation-sdk``).

    python dashboards/adaptive_runtime.py           # rewrites dashboards/adaptive_runtime.json
    python dashboards/adaptive_runtime.py --check   # exit 1 if the JSON is not what this builds

The JSON is committed (Grafana provisions it from ``deploy/grafana``) and
``tests/integration/test_dashboards.py`` fails when it differs from what this file builds, and
runs every panel's PromQL against a real Prometheus scraping a real runtime.

Every panel reads the runtime's own metrics (``adaptive_runtime.telemetry.metrics``; their
Prometheus names are in docs/telemetry.md's metric table) from the data source with uid
``prometheus``. Variables: ``service`` (the Prometheus ``job`` label), ``operation`` and ``arm``;
each is multi-valued with an "All" of ``.*``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import barchart, stat, table, timeseries
from grafana_foundation_sdk.builders.common import (
    ReduceDataOptions,
    ScaleDistributionConfig,
    VizLegendOptions,
)
from grafana_foundation_sdk.builders.dashboard import (
    Dashboard,
    DashboardLink,
    QueryVariable,
    Row,
)
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    BigValueGraphMode,
    LegendDisplayMode,
    LegendPlacement,
    ScaleDistribution,
)
from grafana_foundation_sdk.models.dashboard import (
    DashboardLinkType,
    DataSourceRef,
    DataTransformerConfig,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

__all__ = ["DATASOURCE_UID", "JAEGER_URL", "OUTPUT", "UID", "build", "main", "render"]

UID = "adaptive-runtime"
DATASOURCE_UID = "prometheus"  # provisioned under deploy/grafana
OUTPUT = Path(__file__).with_suffix(".json")

_DS = DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)

# Label matchers every query applies (Grafana expands the variables; "All" is ``.*``).
_SERVICE = 'job=~"$service"'
_OP = 'adaptive_operation=~"$operation"'
_ARM = 'adaptive_backend=~"$arm"'
_KEYS = f"{_SERVICE}, {_OP}, {_ARM}"
# Decisions that time an arm to learn rather than run the committed one: the cold guess,
# exploration, re-checks and re-measuring after drift (exploit, forced and fallback do not).
_LEARNING = 'adaptive_decision=~"heuristic|explore|recheck|drift"'
# Size buckets are labels ("4", "17"): zero-padded here so that sorting the text sorts sizes.
_PAD_BUCKET = '"adaptive_size_bucket", "0$1", "adaptive_size_bucket", "([0-9])"'
# An arm's implementation, one label: "simd" (its primary one: no adaptive_variant) or
# "simd:numpy" (a variant); wrapped around a query that keeps both labels.
_IMPLEMENTATION = "adaptive_implementation"


def _by_implementation(expr: str) -> str:
    joined = (f'label_join({expr}, "{_IMPLEMENTATION}", ":", "adaptive_backend", '
              f'"adaptive_variant")')
    return f'label_replace({joined}, "{_IMPLEMENTATION}", "$1", "{_IMPLEMENTATION}", "(.*):")'


_BUCKET_HELP = ("Size bucket k holds inputs of 2^(k-1) to 2^k - 1 elements (bucket 11: "
                "1,024-2,047); a latency is learned at the bucket's geometric middle.")


def _selections(extra: str = "") -> str:
    matchers = f"{_KEYS}, {extra}" if extra else _KEYS
    return f"adaptive_selection_total{{{matchers}}}"


def _rate(series: str) -> str:
    return f"rate({series}[$__rate_interval])"


def _quantile(q: float) -> str:
    return (f"histogram_quantile({q}, sum by (le, adaptive_operation, adaptive_backend) "
            f"({_rate(f'adaptive_op_duration_seconds_bucket{{{_KEYS}}}')}))")


def _query(expr: str, ref_id: str = "A", legend: str | None = None, *,
           instant: bool = False) -> Dataquery:
    query = Dataquery().expr(expr).ref_id(ref_id).datasource(_DS)
    if instant:
        return query.instant().format(PromQueryFormat.TABLE)
    query = query.range()
    return query.legend_format(legend) if legend is not None else query


# Jaeger's UI as docker-compose.yml publishes it. Its search takes the service (the job label
# is the service name the runtime's telemetry reports) and tags as a JSON object, URL-encoded.
JAEGER_URL = "http://127.0.0.1:16686"
# (link title, tags) of the decisions the Jaeger search links find (docs/telemetry.md)
_JAEGER_SEARCHES = (
    ("Jaeger: commitments (why each key runs its arm)", '{"adaptive.commit":"true"}'),
    ("Jaeger: switches of arm", '{"adaptive.sampling.reason":"commit",'
                                '"adaptive.replaced_backend":"${arm}"}'),
    ("Jaeger: drift alarms", '{"adaptive.decision":"drift"}'),
    ("Jaeger: fallbacks after a failed arm", '{"error":"true"}'),
)


def _jaeger_links() -> list[DashboardLink]:
    """Panel links to the Jaeger searches for the decisions (one service picked: ``$service``
    is the service name the spans carry)."""
    links = []
    for title, tags in _JAEGER_SEARCHES:
        encoded = tags.replace("{", "%7B").replace("}", "%7D").replace('"', "%22")
        encoded = encoded.replace(":", "%3A").replace(",", "%2C")
        links.append(DashboardLink(title).type(DashboardLinkType.LINK).target_blank(True)
                     .url(f"{JAEGER_URL}/search?service=${{service}}&tags={encoded}"
                          "&lookback=1h&limit=100")
                     .tooltip("Jaeger trace search by tag (pick one service above)"))
    return links


def _transform(transform_id: str, options: dict[str, Any]) -> DataTransformerConfig:
    return DataTransformerConfig(id_val=transform_id, options=options)


def _legend() -> VizLegendOptions:
    return (VizLegendOptions().display_mode(LegendDisplayMode.TABLE)
            .placement(LegendPlacement.BOTTOM).show_legend(True).calcs(["lastNotNull", "max"]))


def _log_scale() -> ScaleDistributionConfig:
    return ScaleDistributionConfig().type(ScaleDistribution.LOG).log(10)


def _variable(name: str, label: str, query: str) -> QueryVariable:
    return (QueryVariable(name).label(label).datasource(_DS).query(query)
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(".*"))


def build() -> Dashboard:
    """The dashboard builder (``render()`` gives its JSON)."""
    ids = itertools.count(1)

    def timeseries_panel(title: str, description: str, unit: str) -> timeseries.Panel:
        return (timeseries.Panel().id(next(ids)).title(title).description(description)
                .datasource(_DS).unit(unit).legend(_legend()).height(8).span(12))

    def stat_panel(title: str, description: str, unit: str, expr: str) -> stat.Panel:
        return (stat.Panel().id(next(ids)).title(title).description(description)
                .datasource(_DS).unit(unit).graph_mode(BigValueGraphMode.AREA)
                .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]).values(False))
                .with_target(_query(expr)).height(4).span(6))

    def table_panel(title: str, description: str) -> table.Panel:
        return (table.Panel().id(next(ids)).title(title).description(description)
                .datasource(_DS).height(8).span(12))

    dashboard = (
        Dashboard("adaptive_runtime: decisions")
        .uid(UID)
        .description("Which arm (GPU, SIMD, SCALAR) the adaptive runtime picks, why, what it "
                     "learned per size, and what tracing and failures cost.")
        .tags(["adaptive_runtime", "opentelemetry"])
        .time("now-30m", "now")
        .refresh("10s")
        .timezone("browser")
        .readonly()
        .with_variable(_variable("service", "service (job)",
                                 "label_values(adaptive_selection_total, job)"))
        .with_variable(_variable(
            "operation", "operation",
            'label_values(adaptive_selection_total{job=~"$service"}, adaptive_operation)'))
        .with_variable(_variable(
            "arm", "arm",
            'label_values(adaptive_selection_total{job=~"$service"}, adaptive_backend)'))
    )

    # ---------------------------------------------------------------- overview
    dashboard = (
        dashboard.with_row(Row("Overview").id(next(ids)))
        .with_panel(stat_panel("Selections/s", "Calls of every operation, traced or not.",
                               "ops", f"sum({_rate(_selections())})"))
        .with_panel(stat_panel(
            "Exploration share",
            "Share of calls that time an arm to learn (heuristic, explore, recheck, drift) "
            "rather than run the committed one.",
            "percentunit",
            f"sum({_rate(_selections(_LEARNING))}) / sum({_rate(_selections())})").max(1))
        .with_panel(stat_panel(
            "Hot paths active",
            "Operations called faster than hot_path_calls_per_sec: tracing is off for them, "
            "learning goes on.",
            "none", f"sum(adaptive_hot_path_active{{{_SERVICE}, {_OP}}})"))
        .with_panel(stat_panel(
            "Quarantined arms",
            "(operation, size bucket, arm) whose last attempt raised: they sit out a "
            "quarantine with back-off until a retry succeeds.",
            "none", f"sum(adaptive_quarantined{{{_KEYS}}})"))
    )

    # ---------------------------------------------------------------- decisions
    dashboard = (
        dashboard.with_row(Row("Decisions").id(next(ids)))
        .with_panel(timeseries_panel("Selections/s by arm", "Every call, by the arm it ran on.",
                                     "ops")
                    .with_target(_query(f"sum by (adaptive_backend) ({_rate(_selections())})",
                                        legend="{{adaptive_backend}}")))
        .with_panel(timeseries_panel(
            "Selections/s by decision reason",
            "heuristic: no data yet; explore: timing each arm; exploit: the committed arm; "
            "recheck: timing another arm again; drift: the committed arm got slower; "
            "fallback: the chosen arm raised; forced: configured. The panel's links open "
            "the decisions' spans in Jaeger.", "ops")
            .with_target(_query(f"sum by (adaptive_decision) ({_rate(_selections())})",
                                legend="{{adaptive_decision}}"))
            .links(_jaeger_links()))
        .with_panel(timeseries_panel(
            "Exploration share by operation",
            "Share of each operation's calls that time an arm to learn (heuristic, explore, "
            "recheck, drift).", "percentunit")
            .with_target(_query(
                f"sum by (adaptive_operation) ({_rate(_selections(_LEARNING))}) / "
                f"sum by (adaptive_operation) ({_rate(_selections())})",
                legend="{{adaptive_operation}}"))
            .min(0).max(1).span(24))
    )

    # ---------------------------------------------------------------- kernel latency
    dashboard = dashboard.with_row(Row("Kernel latency").id(next(ids)))
    for q, name in ((0.5, "p50"), (0.95, "p95")):
        dashboard = dashboard.with_panel(
            timeseries_panel(f"Kernel latency {name} by operation and arm",
                             f"{name} of the kernel time of timed calls (a converged key is "
                             "timed 1-in-N), from adaptive_op_duration_seconds. The dots are "
                             "exemplars: traced calls, each linking to its trace in Jaeger.",
                             "s")
            .with_target(_query(_quantile(q),
                                legend="{{adaptive_operation}} {{adaptive_backend}}")
                         .exemplar(True))
            .scale_distribution(_log_scale()))

    # ---------------------------------------------------------------- crossovers
    learned = _by_implementation(
        f"max by (adaptive_size_bucket, adaptive_backend, adaptive_variant) "
        f"(adaptive_learned_latency_seconds{{{_KEYS}}})")
    committed = _by_implementation(
        f"max by (adaptive_operation, adaptive_size_bucket, adaptive_backend, "
        f"adaptive_variant) (adaptive_committed{{{_KEYS}}}) == 1")
    dashboard = (
        dashboard.with_row(Row("What it learned: latency vs size, and the arm chosen")
                           .id(next(ids)))
        .with_panel(
            table_panel("Committed arm by size bucket",
                        "The arm each (operation, size bucket) is committed to now (a variant "
                        "of an arm as arm:variant, simd:numpy); a key still exploring has "
                        "none. Why: the panel's links open each key's "
                        "commitment span in Jaeger. " + _BUCKET_HELP)
            .with_target(_query(f"label_replace({committed}, {_PAD_BUCKET})", instant=True))
            .with_transformation(_transform("sortBy",
                                            {"sort": [{"field": "adaptive_size_bucket"}]}))
            .with_transformation(_transform("groupingToMatrix", {
                "columnField": "adaptive_size_bucket", "rowField": "adaptive_operation",
                "valueField": _IMPLEMENTATION}))
            .no_value("no key committed yet").links(_jaeger_links()).span(24))
        .with_panel(
            barchart.Panel().id(next(ids)).title("Learned latency by size bucket: $operation")
            .description("What each arm (and each variant of one, arm:variant) was learned to "
                         "take at each size bucket (log scale): where the bars cross, the "
                         "best arm changes. " + _BUCKET_HELP)
            .datasource(_DS).unit("s").repeat("operation").repeat_direction("h")
            .with_target(_query(f"label_replace({learned}, {_PAD_BUCKET})", instant=True))
            .with_transformation(_transform("sortBy",
                                            {"sort": [{"field": "adaptive_size_bucket"}]}))
            .with_transformation(_transform("groupingToMatrix", {
                "columnField": _IMPLEMENTATION, "rowField": "adaptive_size_bucket",
                "valueField": "Value"}))
            .scale_distribution(_log_scale()).legend(_legend().calcs([]))
            .height(9).span(12))
    )

    # ---------------------------------------------------------------- tracing
    dashboard = (
        dashboard.with_row(Row("Tracing").id(next(ids)))
        .with_panel(timeseries_panel(
            "Hot paths active by operation",
            "1 while the operation is on the hot path (its spans suppressed).", "none")
            .with_target(_query(
                f"max by (adaptive_operation) (adaptive_hot_path_active{{{_SERVICE}, {_OP}}})",
                legend="{{adaptive_operation}}"))
            .min(0).max(1))
        .with_panel(timeseries_panel(
            "Spans exported vs suppressed by reason",
            "Timed calls whose spans the trace gate exported, and those it did not (hot path, "
            "not sampled, over budget; buffer_full and export_failed: lost after admission).",
            "ops")
            .with_target(_query(
                f"sum by (adaptive_sampling_reason) "
                f"({_rate(f'adaptive_span_exported_total{{{_SERVICE}}}')})",
                "A", "exported: {{adaptive_sampling_reason}}"))
            .with_target(_query(
                f"sum by (adaptive_sampling_reason) "
                f"({_rate(f'adaptive_span_suppressed_total{{{_SERVICE}}}')})",
                "B", "suppressed: {{adaptive_sampling_reason}}")))
    )

    # ---------------------------------------------------------------- failures
    quarantined = (f"max by (adaptive_operation, adaptive_size_bucket, adaptive_backend) "
                   f"(adaptive_quarantined{{{_KEYS}}}) == 1")
    dashboard = (
        dashboard.with_row(Row("Failures").id(next(ids)))
        .with_panel(timeseries_panel(
            "Fallbacks/s",
            "Calls re-routed to another arm after the chosen arm (adaptive_backend) raised.",
            "ops")
            .with_target(_query(
                "sum by (adaptive_operation, adaptive_backend, adaptive_fallback_to) "
                f"({_rate(f'adaptive_fallback_total{{{_KEYS}}}')})",
                legend="{{adaptive_operation}}: {{adaptive_backend}} -> "
                       "{{adaptive_fallback_to}}")))
        .with_panel(
            table_panel("Quarantined now: operation, size bucket, arm",
                        "Arms whose last attempt on a key raised, now: each sits out a "
                        "quarantine with back-off until a retry succeeds. " + _BUCKET_HELP)
            .with_target(_query(f"label_replace({quarantined}, {_PAD_BUCKET})", instant=True))
            .with_transformation(_transform("organize", {
                "excludeByName": {"Time": True, "Value": True},
                "indexByName": {"adaptive_operation": 0, "adaptive_size_bucket": 1,
                                "adaptive_backend": 2},
                "renameByName": {"adaptive_operation": "operation",
                                 "adaptive_size_bucket": "size bucket",
                                 "adaptive_backend": "arm"}}))
            .no_value("no arm quarantined"))
    )
    return dashboard


def render() -> str:
    """The dashboard's JSON text, exactly as committed (sorted keys, a final newline)."""
    model = json.loads(json.dumps(build().build(), cls=JSONEncoder))
    return json.dumps(model, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or with ``--check``, compare) ``dashboards/adaptive_runtime.json``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if the committed JSON differs")
    args = parser.parse_args(argv)
    text = render()
    current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else None
    if args.check:
        if current != text:
            print(f"{OUTPUT} is out of date: run python dashboards/adaptive_runtime.py",
                  file=sys.stderr)
            return 1
        return 0
    if current != text:
        OUTPUT.write_text(text, encoding="utf-8")
        print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
