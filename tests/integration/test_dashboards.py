"""The Grafana dashboards of ``dashboards/``: the committed JSON is exactly what its code builds,
and every PromQL expression of every panel is answered with data by a real Prometheus scraping a
real runtime's Prometheus endpoint during a workload that exercises every panel.

``pytest -s tests/integration/test_dashboards.py`` prints, for each panel, its PromQL (variables
substituted as below) and what Prometheus answered.
"""

from __future__ import annotations

import difflib
import importlib.util
import itertools
import json
import math
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from prometheus_server import PrometheusServer
from required import require_module

import adaptive_runtime as ar
from adaptive_runtime.keys import reference_size
from adaptive_runtime.operations import DeviceProbe

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "dashboards"
JSON_FILES = sorted(DASHBOARDS.glob("*.json"))
DATASOURCE_UID = "prometheus"

# What Grafana would put in place of the variables: every service, operation and arm (the
# dashboards' "All" is ``.*``), and a rate window of several scrapes (the test scrapes every
# second; Grafana makes $__rate_interval at least four scrape intervals).
SUBSTITUTIONS = {"$__rate_interval": "30s", "$service": ".*", "$operation": ".*", "$arm": ".*"}
# Prometheus answers within seconds of the first scrape (~5 s after it starts); this bounds the
# wait for every expression together.
QUERY_DEADLINE_S = 45.0

Backend = ar.Backend
SIMD, SCALAR = Backend.SIMD, Backend.SCALAR
BUCKETS = tuple(range(3, 14))  # inputs of 6 to 5,793 elements


def load_generator(path: Path) -> ModuleType:
    """Import ``dashboards/<name>.py`` (a script, not a package) as a module."""
    spec = importlib.util.spec_from_file_location(f"dashboards_{path.stem}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses and typing look modules up by name)
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that is not a row, including those inside collapsed rows."""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(panel title, refId, PromQL) of every target of every panel, in dashboard order."""
    return [(panel["title"], target["refId"], target["expr"])
            for panel in panels(dashboard) for target in panel["targets"]]


def substitute(expr: str) -> str:
    for variable, value in SUBSTITUTIONS.items():
        expr = expr.replace(variable, value)
    # (label_replace's replacements, "$1" and "0$1", are regex group references, not variables)
    assert "$" not in re.sub(r'"0?\$\d"', "", expr), f"a variable left unsubstituted: {expr}"
    return expr


# ------------------------------------------------------------------------------ as code


def test_every_dashboard_json_has_its_generator() -> None:
    assert [p.name for p in JSON_FILES] == ["adaptive_runtime.json"]
    for path in JSON_FILES:
        assert path.with_suffix(".py").is_file(), f"{path.name} has no {path.stem}.py"


@pytest.mark.parametrize("json_path", JSON_FILES, ids=lambda p: p.name)
def test_committed_dashboard_is_exactly_what_its_code_builds(json_path: Path) -> None:
    require_module("grafana_foundation_sdk", "test")
    generator = json_path.with_suffix(".py")
    built = load_generator(generator).render()
    committed = json_path.read_text(encoding="utf-8")
    if built != committed:
        diff = "".join(itertools.islice(difflib.unified_diff(
            committed.splitlines(keepends=True), built.splitlines(keepends=True),
            f"{json_path.name} (committed)", f"{json_path.name} (built)"), 80))
        pytest.fail(f"dashboards/{json_path.name} is not what dashboards/{generator.name} "
                    f"builds: run `.venv/bin/python dashboards/{generator.name}` and commit "
                    f"the JSON it writes.\n{diff}", pytrace=False)
    # the command the message names: its --check agrees
    check = subprocess.run([sys.executable, str(generator), "--check"], capture_output=True,
                           text=True, timeout=120, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_generator_writes_and_checks_its_output(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    require_module("grafana_foundation_sdk", "test")
    generator = load_generator(DASHBOARDS / "adaptive_runtime.py")
    output = tmp_path / "adaptive_runtime.json"
    monkeypatch.setattr(generator, "OUTPUT", output)
    assert generator.main(["--check"]) == 1  # missing
    assert "run python dashboards/adaptive_runtime.py" in capsys.readouterr().err
    assert generator.main([]) == 0
    assert output.read_text(encoding="utf-8") == generator.render()
    assert generator.main(["--check"]) == 0
    output.write_text(generator.render().replace("adaptive-runtime", "other"), encoding="utf-8")
    assert generator.main(["--check"]) == 1  # stale


def test_the_dashboard_has_a_fixed_uid_the_datasource_and_the_variables() -> None:
    dashboard = json.loads((DASHBOARDS / "adaptive_runtime.json").read_text(encoding="utf-8"))
    assert dashboard["uid"] == "adaptive-runtime"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert set(variables) == {"service", "operation", "arm"}
    assert variables["service"]["query"] == "label_values(adaptive_selection_total, job)"
    assert variables["operation"]["query"].endswith(", adaptive_operation)")
    assert variables["arm"]["query"].endswith(", adaptive_backend)")
    for variable in variables.values():
        assert variable["datasource"] == {"type": "prometheus", "uid": DATASOURCE_UID}
        assert variable["includeAll"] and variable["multi"] and variable["allValue"] == ".*"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and 0 not in ids
    titles = [p["title"] for p in panels(dashboard)]
    assert len(titles) == len(set(titles)), titles
    for panel in panels(dashboard):
        assert panel["datasource"]["uid"] == DATASOURCE_UID, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == DATASOURCE_UID, panel["title"]
            assert target["refId"] and target["expr"], panel["title"]
            # every variable used is one the dashboard defines (or Grafana's rate interval)
            used = set(re.findall(r"\$(\w+)", target["expr"])) - {"1"}  # ($1: label_replace)
            assert used <= {"service", "operation", "arm", "__rate_interval"}, target["expr"]
            assert 'job=~"$service"' in target["expr"], target["expr"]


def test_the_latency_panels_show_the_histograms_exemplars() -> None:
    """Exactly the queries of the latency histogram ask for its exemplars (the traced calls;
    Grafana links each to its trace, see deploy/grafana)."""
    dashboard = json.loads((DASHBOARDS / "adaptive_runtime.json").read_text(encoding="utf-8"))
    targets = [t for p in panels(dashboard) for t in p["targets"]]
    with_exemplars = [t["expr"] for t in targets if t.get("exemplar")]
    assert len(with_exemplars) == 2, with_exemplars  # p50 and p95
    assert with_exemplars == [t["expr"] for t in targets
                              if "adaptive_op_duration_seconds_bucket" in t["expr"]]


def test_the_decision_panels_link_to_jaeger_searches_for_the_decisions() -> None:
    # Each key's commitment is a span with adaptive.commit=true (docs/telemetry.md): the panel
    # that shows the committed arm, and the decisions panel, open the Jaeger search for it.
    from urllib.parse import parse_qs, urlsplit

    dashboard = json.loads((DASHBOARDS / "adaptive_runtime.json").read_text(encoding="utf-8"))
    linked = {p["title"]: p["links"] for p in panels(dashboard) if p.get("links")}
    assert set(linked) == {"Committed arm by size bucket", "Selections/s by decision reason"}
    docs = (REPO / "docs" / "telemetry.md").read_text(encoding="utf-8")
    for links in linked.values():
        searches = {}
        for link in links:
            url = urlsplit(link["url"])
            assert (url.scheme, url.netloc, url.path) == ("http", "127.0.0.1:16686", "/search")
            query = parse_qs(url.query)
            assert query["service"] == ["${service}"] and link["targetBlank"]
            searches[link["title"]] = json.loads(query["tags"][0])
        assert {"adaptive.commit": "true"} in searches.values()
        for tags in searches.values():  # every tag searched for is one the docs describe
            assert all(f"`{key}`" in docs for key in tags if key != "error"), tags


def test_every_panel_the_docs_name_is_on_the_dashboard() -> None:
    """README.md and docs/ name panels in italics before the word (``the *Fallbacks/s*
    panel``, ``the *A* and *B* panels``): each is a panel's title, or the start of one that
    goes on with a variable (*Learned latency by size bucket* for ``...: $operation``)."""
    dashboard = json.loads((DASHBOARDS / "adaptive_runtime.json").read_text(encoding="utf-8"))
    titles = [p["title"] for p in panels(dashboard)]
    named_before_panel = re.compile(
        r"((?:\*[^*\n]+\*(?:,\s*|\s+and\s+|\s+or\s+))*\*[^*\n]+\*)\s+panels?\b")
    named = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for group in named_before_panel.findall(path.read_text(encoding="utf-8")):
            named += [(path.name, name) for name in re.findall(r"\*([^*\n]+)\*", group)]
    assert named, "no panel named in the docs: the pattern no longer matches them"
    missing = [(doc, name) for doc, name in named
               if not any(title == name or title.startswith(f"{name}:") for title in titles)]
    assert missing == [], f"panels the dashboard does not have (it has {titles})"


# ------------------------------------------------------------------------------ real Prometheus


class Workload(threading.Thread):
    """Calls the runtime until stopped, so that every panel has something to show, and keeps
    showing it while Prometheus scrapes:

    - ``scale`` over eleven size buckets, a linear SCALAR arm against a constant-time SIMD one
      (learned latencies that cross), and a SIMD variant cheaper than both (committed as
      ``simd:direct``);
    - ``shift``, whose SIMD arm raises: fallbacks, quarantined arms;
    - ``hot``, called in bursts far above the hot-path rate (10,000 calls/s): a hot path, its
      spans suppressed; the other operations stay far below that rate;
    - ``grow`` and ``shift`` on a size bucket that moves up every ``ROUNDS_PER_KEY`` rounds: a
      fresh key now and then, so exploring, first-call spans and fallbacks go on all along.
    """

    ROUNDS_PER_KEY = 40

    def __init__(self, rt: ar.AdaptiveRuntime) -> None:
        super().__init__(name="dashboard-workload", daemon=True)
        self.rt = rt
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.rounds = 0

    def run(self) -> None:
        run = self.rt.run
        sizes = [reference_size(b) for b in BUCKETS]
        try:
            while not self.stop.is_set():
                for _ in range(1_000):
                    run("hot", 8)
                for size in sizes:
                    run("scale", size)
                    run("shift", size)
                fresh = reference_size(BUCKETS[-1] + 1 + (self.rounds // self.ROUNDS_PER_KEY)
                                       % (63 - BUCKETS[-1]))
                run("grow", fresh)
                run("shift", fresh)
                self.rounds += 1
                # (pacing: all but "hot" stay far below the hot-path rate)
                self.stop.wait(0.005)
        except BaseException as exc:  # reported by the test
            self.error = exc


def register_operations(rt: ar.AdaptiveRuntime) -> None:
    def constant(n: int) -> int:  # a fixed cost, then constant time: wins on large inputs
        sum(range(48))
        return n * (n - 1) // 2

    def linear(n: int) -> int:  # wins on small inputs
        return sum(range(n))

    def broken(n: int) -> int:
        raise RuntimeError("SIMD arm broken (test)")

    def size(n: int) -> int:
        return n

    # (the SCALAR arms of the operations called on huge sizes do not loop over them)
    for name, simd, scalar in (("scale", constant, linear), ("hot", constant, linear),
                               ("shift", broken, size), ("grow", constant, size)):
        op = rt.register(name, size=size, kind="vector")
        op.add_implementation(SIMD, simd)
        op.add_implementation(SCALAR, scalar)
    # a variant of an arm that wins at every size: its commitments show as "simd:direct"
    rt.operation("scale").add_implementation(SIMD, lambda n: n * (n - 1) // 2, name="direct")


def finite(result: list[dict[str, Any]]) -> list[float]:
    return [v for s in result if math.isfinite(v := float(s["value"][1]))]


def positive(result: list[dict[str, Any]]) -> bool:
    return any(v > 0 for v in finite(result))


def values_by(result: list[dict[str, Any]], label: str) -> dict[str, float]:
    return {s["metric"][label]: float(s["value"][1]) for s in result}


SPANS = "Spans exported vs suppressed by reason"
# Rates the workload keeps moving (fresh keys explore, fail over and export first-call spans):
# waited on until above 0, not only present.
MOVING = {("Exploration share", "A"), ("Exploration share by operation", "A"),
          ("Fallbacks/s", "A"), (SPANS, "A"), (SPANS, "B")}


def show(result: list[dict[str, Any]], limit: int = 8) -> str:
    """What Prometheus answered, compactly: ``{labels} value`` per series."""
    if not result:
        return "(no data)"
    rows = []
    for s in sorted(result, key=lambda s: sorted(s["metric"].items())):
        labels = ",".join(f"{k.removeprefix('adaptive_')}={v}"
                          for k, v in sorted(s["metric"].items()))
        value = float(s["value"][1])
        rows.append(f"{{{labels}}} {value:.4g}")
    more = f" ... ({len(rows)} series)" if len(rows) > limit else ""
    return "; ".join(rows[:limit]) + more


@pytest.mark.slow  # Prometheus 2.x scrapes a new target ~5 s after it starts
def test_every_panel_query_returns_data_from_a_real_prometheus(
        prometheus_endpoint: tuple[MeterProvider, str],
        prometheus: Callable[[Sequence[str]], PrometheusServer]) -> None:
    dashboard = json.loads((DASHBOARDS / "adaptive_runtime.json").read_text(encoding="utf-8"))
    provider, target = prometheus_endpoint
    tracer_provider = TracerProvider()  # spans are made and dropped: the gate's counts move
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(), builtin_ops=False,
                            devices=DeviceProbe(gpu=False))
    register_operations(rt)
    ar.telemetry.instrument(rt, tracer_provider=tracer_provider, meter_provider=provider)
    workload = Workload(rt)
    workload.start()
    table: list[tuple[str, str, str]] = []  # (what, PromQL, what Prometheus answered)
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        server = prometheus([target])
        deadline = time.monotonic() + QUERY_DEADLINE_S
        # The variables' queries (Grafana's label_values) through the label values API.
        expected = {"service": {"adaptive_runtime"},
                    "operation": {"scale", "shift", "hot", "grow"},
                    "arm": {"simd", "scalar"}}
        for variable in dashboard["templating"]["list"]:
            match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"])
            assert match is not None, variable["query"]
            metric, label = substitute(match[1]), match[2]
            values = wait(lambda m=metric, lb=label: server.api(f"label/{lb}/values",
                                                                **{"match[]": m}),
                          # every expected value, not the first scrape's
                          lambda v, want=expected[variable["name"]]: want <= set(v),
                          deadline, f"variable {variable['name']}", server)
            table.append((f"variable ${variable['name']}", variable["query"],
                          "values: " + ", ".join(values)))
            assert expected[variable["name"]] <= set(values), (variable["name"], values)
        for title, ref_id, expr in queries(dashboard):
            promql = substitute(expr)
            ok = positive if (title, ref_id) in MOVING else finite
            result = wait(lambda q=promql: server.query(q), ok, deadline,
                          f"{title} [{ref_id}]: {promql}", server)
            results[(title, ref_id)] = result
            table.append((f"{title} [{ref_id}]", promql, show(result)))
    finally:
        workload.stop.set()
        workload.join(30)
        print_table(table)
        tracer_provider.shutdown()
    assert workload.error is None, workload.error

    # What the workload did shows where it should (who is hot, what failed; not timings).
    assert finite(results[("Hot paths active", "A")]) == [1.0]
    assert values_by(results[("Hot paths active by operation", "A")], "adaptive_operation") == {
        "hot": 1.0, "scale": 0.0, "shift": 0.0, "grow": 0.0}
    # every bucket "shift" was called on has its SIMD arm quarantined, nothing else is
    quarantined = results[("Quarantined now: operation, size bucket, arm", "A")]
    assert {(s["metric"]["adaptive_operation"], s["metric"]["adaptive_backend"])
            for s in quarantined} == {("shift", "simd")}
    # (the count was asked first; keys only get added, and a broken arm stays quarantined)
    (count,) = finite(results[("Quarantined arms", "A")])
    assert len(BUCKETS) <= count <= len(quarantined)
    committed = {(s["metric"]["adaptive_operation"], s["metric"]["adaptive_backend"])
                 for s in results[("Committed arm by size bucket", "A")]}
    assert ("shift", "scalar") in committed and ("shift", "simd") not in committed
    assert {"scale", "hot", "grow"} <= {op for op, _arm in committed}
    implementations = {(s["metric"]["adaptive_operation"], s["metric"]["adaptive_implementation"])
                       for s in results[("Committed arm by size bucket", "A")]}
    assert ("scale", "simd:direct") in implementations and ("shift", "scalar") in implementations
    assert {(s["metric"]["adaptive_operation"], s["metric"]["adaptive_backend"],
             s["metric"]["adaptive_fallback_to"])
            for s in results[("Fallbacks/s", "A")]} == {("shift", "simd", "scalar")}
    assert "hot_path" in values_by(results[(SPANS, "B")], "adaptive_sampling_reason")
    assert {"first_call", "error"} <= set(values_by(results[(SPANS, "A")],
                                                   "adaptive_sampling_reason"))
    learned_buckets = {s["metric"]["adaptive_size_bucket"]
                       for s in results[("Learned latency by size bucket: $operation", "A")]}
    assert {f"{b:02d}" for b in BUCKETS} <= learned_buckets  # (zero-padded, as it sorts)


def wait(ask: Callable[[], Any], ok: Callable[[Any], Any], deadline: float, what: str,
         server: PrometheusServer) -> Any:
    """Ask until ``ok(answer)`` is truthy; AssertionError with the last answer and the scrape
    targets' health once ``deadline`` (``time.monotonic()``) has passed."""
    while True:
        answer = ask()
        if ok(answer):
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"no data in time for {what}; last answer: {answer}; "
                                 f"targets: {server.target_health()}")
        time.sleep(0.25)


def print_table(table: Sequence[tuple[str, str, str]]) -> None:
    """What each query was and what Prometheus answered, as Markdown (``pytest -s``)."""
    print("\n| panel [query] | PromQL | Prometheus answered |\n| --- | --- | --- |")
    for what, promql, answer in table:
        print(f"| {what} | `{promql}` | {answer} |")
