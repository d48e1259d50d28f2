"""``adaptive-runtime report`` renders a recorded run: from its history file and from the
telemetry files the runtime wrote, as a table and a PNG; bad inputs are one line and exit 2.

The run is recorded once, in a child process (``ar.telemetry.configure`` installs the global
OpenTelemetry providers, which a process may set only once): a real runtime, tracing into the
embedded OTLP/JSON files, runs two operations whose arms are busy-waits with set costs, so the
fastest arm changes at known sizes — ``blend`` (SIMD and SCALAR) crosses over near 1k elements,
``project`` (GPU, SIMD and SCALAR; the GPU arm a test double) near 512 and 32k. The arms are
about 35 % apart at the buckets either side of each crossing: real timings, clear winners.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from adaptive_runtime import cli
from adaptive_runtime.backend import Backend
from adaptive_runtime.keys import reference_size
from adaptive_runtime.offline.report import (
    ReportInputError,
    crossovers,
    from_history_file,
    from_telemetry,
    otlp_files,
    render_figure,
)
from adaptive_runtime.offline.report.otlp_files import decode_requests

BUCKETS = range(4, 18)
# a learned latency in the table: µs, ±the standard deviation of its timings where there are
# two or more, and their number
LATENCY_CELL = re.compile(r"[\d,.]+(±[\d,.]+)?\(n=[\d,]+\)")

RECORD = textwrap.dedent('''
    import json, math, sys, time
    import numpy as np
    import adaptive_runtime as ar
    from adaptive_runtime.operations import DeviceProbe
    from adaptive_runtime.keys import reference_size

    folder, history = sys.argv[1], sys.argv[2]

    def arm(fixed_us, per_element_us):
        def run(n):
            end = time.perf_counter_ns() + int((fixed_us + per_element_us * n) * 1000)
            while time.perf_counter_ns() < end:
                pass
            return n
        return run

    ar.telemetry.configure(service_name="report-test", directory=folder)
    # every decision traced (no hot path, no span budget), so the spans hold the whole story;
    # three timings of each arm before committing, so a key's exploring spans carry every
    # arm's estimate (with one timing each, the default, the commitment itself is what shows
    # the choice, and an exploit span is only sampled: issue 23)
    config = ar.RuntimeConfig(hot_path_calls_per_sec=1e9, spans_per_sec=math.inf,
                              min_samples_per_arm=3)
    rt = ar.AdaptiveRuntime(config, builtin_ops=False, devices=DeviceProbe(gpu=True))
    blend = rt.register("blend", size=lambda n: n, kind="vector")
    blend.add_implementation("simd", arm(60.0, 0.001))      # = scalar at 1,017 elements
    blend.add_implementation("scalar", arm(0.0, 0.06))
    project = rt.register("project", size=lambda n: n, kind="matrix")
    project.add_implementation("gpu", arm(180.0, 0.0002))   # = simd at 32,768
    project.add_implementation("simd", arm(23.0, 0.005))    # = scalar at 511
    project.add_implementation("scalar", arm(0.0, 0.05))

    sizes = [reference_size(b) for b in range(4, 18)]
    work = [(op, n) for op in ("blend", "project") for n in sizes] * 40
    for i in np.random.default_rng(0).permutation(len(work)):
        rt.run(*work[i])
    rt.save_history(history)
    ar.telemetry.shutdown()
    decided = {}
    for op in ("blend", "project"):
        for n in sizes:
            d = rt.decide(op, n)
            decided[f"{op} {ar.size_bucket(n)}"] = {
                "backend": d.backend.value, "reason": d.reason.value,
                "estimates": {b.value: us for b, us in d.estimates_us.items()}}
    print("RESULT " + json.dumps(decided), flush=True)
''')


@dataclass(frozen=True)
class Recorded:
    folder: Path
    history: Path
    # "op bucket" -> rt.decide(op, reference size): backend, reason, estimates
    decided: dict[str, dict[str, Any]]

    def clear_keys(self) -> dict[tuple[str, int], str]:
        """(op, bucket) -> the arm the runtime runs, for keys it committed to whose fastest
        arm leads the next by 20 % or more (where no sensible report may say otherwise)."""
        out = {}
        for key, d in self.decided.items():
            estimates = sorted(us for us in d["estimates"].values() if math.isfinite(us))
            if d["reason"] == "exploit" and len(estimates) >= 2 \
                    and estimates[1] >= 1.2 * estimates[0]:
                op, bucket = key.split()
                out[(op, int(bucket))] = d["backend"]
        return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    root = tmp_path_factory.mktemp("recorded")
    folder, history = root / "telemetry", root / "history.json"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "ADAPTIVE_RUNTIME_"))}
    env["OTEL_BSP_SCHEDULE_DELAY"] = "50"
    done = subprocess.run([sys.executable, "-W", "error", "-c", RECORD, str(folder),
                           str(history)], cwd=root, env=env, capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    result = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert result, done.stdout + done.stderr
    return Recorded(folder, history, json.loads(result[-1][7:]))


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(["report", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def table_rows(out: str, header: list[str]) -> dict[tuple[str, int], dict[str, str]]:
    """The table's rows by (operation, bucket), each cell under its column's name."""
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if cells and cells[0] in ("blend", "project"):
            assert len(cells) == len(header), line
            rows[(cells[0], int(cells[1]))] = dict(zip(header, cells, strict=True))
    return rows


def header_of(out: str) -> list[str]:
    line = next(ln for ln in out.splitlines() if ln.startswith("operation "))
    # (one name per column: "simd µs" is one column)
    return line.replace(" µs", "_µs").split()


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert data.rstrip(b"\x00")[-8:-4] == b"IEND", "a truncated PNG"
    return width, height


# ------------------------------------------------------------------------------ rendering


@pytest.mark.parametrize("source", ["history", "telemetry"])
def test_report_table_shows_each_key_its_arms_and_the_arm_the_runtime_chose(
        recorded: Recorded, source: str, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    png = tmp_path / "report.png"
    args = ["--history", str(recorded.history)] if source == "history" \
        else ["--telemetry", str(recorded.folder)]
    status, out, err = run_cli(capsys, *args, "--png", str(png))
    assert status == 0, err

    header = header_of(out)
    assert header[:4] == ["operation", "bucket", "sizes", "chosen"]
    assert {"gpu_µs", "simd_µs", "scalar_µs", "samples", "speed-up"} <= set(header)
    # a history file keeps no decisions; the spans do
    assert ("reason" in header) is (source == "telemetry")
    rows = table_rows(out, header)
    assert {(op, b) for op in ("blend", "project") for b in BUCKETS} <= set(rows)

    clear = recorded.clear_keys()
    assert len(clear) >= 10, recorded.decided  # (most keys are clear by construction)
    for key, backend in clear.items():
        assert rows[key]["chosen"] == backend, (key, rows[key], recorded.decided)
    for (op, _), row in rows.items():
        assert int(row["samples"].replace(",", "")) > 0
        assert row[f"{row['chosen']}_µs"] != "-"  # the chosen arm was measured
        # each latency with the spread and number of its timings ("12.3±1.2(n=8)")
        assert all(LATENCY_CELL.fullmatch(row[f"{arm}_µs"]) for arm in ("simd", "scalar")
                   if row[f"{arm}_µs"] != "-"), row
        assert row["gpu_µs"] == "-" or op == "project"  # blend has no GPU arm
    if source == "telemetry":
        assert {row["reason"] for row in rows.values()} <= {
            "heuristic", "explore", "exploit", "recheck", "drift", "forced", "fallback"}

    assert f"wrote {png}: 2 operations" in out
    width, height = png_size(png)
    columns = 2 if source == "telemetry" else 1  # (the timeline beside each latency panel)
    assert 700 * columns <= width <= 1600 and 2 * 300 <= height <= 1200, (width, height)


def test_report_from_telemetry_reads_every_traced_decision_of_the_run(
        recorded: Recorded) -> None:
    report = from_telemetry(recorded.folder)
    spans = [span for request in decode_requests(recorded.folder / "traces.jsonl",
                                                      ExportTraceServiceRequest)
             for resource in request.resource_spans for scope in resource.scope_spans
             for span in scope.spans if span.name.startswith("adaptive.select ")]
    assert len(report.events) == len(spans) > 0
    assert [e.time_s for e in report.events] == sorted(e.time_s for e in report.events)
    assert report.events[0].time_s == 0.0
    # every key explored all its arms: explore decisions for both operations
    assert {(e.operation, e.reason) for e in report.events} >= {("blend", "explore"),
                                                                 ("project", "explore")}
    assert {e.input_size for e in report.events} == {reference_size(b) for b in BUCKETS}


def test_figure_rings_the_chosen_arm_and_labels_each_clear_crossover(
        recorded: Recorded) -> None:
    report = from_history_file(recorded.history)
    cross = [c for c in crossovers(report.rows) if c.clear]
    found = {(c.operation, c.before, c.after): c.size for c in cross}
    # where the set costs cross (within a bucket either way: timings are real)
    assert 512 <= found[("blend", Backend.SCALAR, Backend.SIMD)] <= 2048, cross
    assert 256 <= found[("project", Backend.SCALAR, Backend.SIMD)] <= 1024, cross
    assert 16_384 <= found[("project", Backend.SIMD, Backend.GPU)] <= 65_536, cross

    fig = render_figure(report)
    latency_axes = [ax for ax in fig.axes if "learned latency" in ax.get_title(loc="left")]
    assert [ax.get_title(loc="left").split(":")[0] for ax in latency_axes] == ["blend", "project"]
    for ax, operation in zip(latency_axes, ("blend", "project"), strict=True):
        labels = sorted(t.get_text() for t in ax.texts)
        assert labels == sorted(c.label for c in cross if c.operation == operation)
        assert all("→" in label and "≈" in label for label in labels)
        # the chosen arm's point of every bucket is ringed
        rows = [r for r in report.rows if r.operation == operation]
        # (compared to 1e-9 relative, not rounded: a value on a rounding edge read 202.978562
        # drawn against 202.978563 computed)
        ringed = sorted((round(x), y) for x, y in ax.collections[0].get_offsets())
        expected = sorted((r.reference_size, r.latency_us[r.chosen]) for r in rows
                          if r.chosen is not None)
        assert [x for x, _y in ringed] == [x for x, _y in expected]
        assert [y for _x, y in ringed] == pytest.approx([y for _x, y in expected], rel=1e-9)
    assert not any("traced decisions" in ax.get_title(loc="left") for ax in fig.axes)  # (no spans)


def test_figure_from_telemetry_has_a_timeline_of_decisions_by_reason(
        recorded: Recorded) -> None:
    report = from_telemetry(recorded.folder)
    fig = render_figure(report)
    timelines = [ax for ax in fig.axes if "traced decisions by reason" in ax.get_title(loc="left")]
    assert len(timelines) == 2
    for ax in timelines:
        operation = ax.get_title(loc="left").split(":")[0]
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        counts = {}
        for e in report.events:
            if e.operation == operation:
                label = "commitment" if e.commit else e.reason
                counts[label] = counts.get(label, 0) + 1
        assert counts.get("commitment"), "no commitment drawn"
        assert sorted(legend) == sorted(f"{r} ({n:,})" for r, n in counts.items())
        assert sum(len(c.get_offsets()) for c in ax.collections) == sum(counts.values())


def test_every_key_the_runtime_committed_to_has_its_commitment_span_in_the_files(
        recorded: Recorded) -> None:
    # at default span settings a commitment is always exported (issue 23): the report reads
    # one for every key committed at the end, on the arm the key runs
    report = from_telemetry(recorded.folder)
    committed = {(e.operation, e.input_size.bit_length()): e for e in report.events
                 if e.commit}
    runs = {tuple(key.split()): d for key, d in recorded.decided.items()
            if d["reason"] == "exploit"}
    assert runs
    for (op, bucket), d in runs.items():
        event = committed.get((op, int(bucket)))  # (the key's latest commitment)
        assert event is not None, f"{op} bucket {bucket}: no commitment span"
        assert event.backend.value == d["backend"], (op, bucket)
    assert all(e.reason == "exploit" for e in report.events if e.commit)


def test_history_with_telemetry_takes_rows_from_the_history_and_decisions_from_spans(
        recorded: Recorded, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, err = run_cli(capsys, "--history", str(recorded.history), "--telemetry",
                               str(recorded.folder), "--png", str(tmp_path / "r.png"),
                               "--operation", "proj*")
    assert status == 0, err
    rows = table_rows(out, header_of(out))
    assert {op for op, _ in rows} == {"project"}
    history = {(r.operation, r.size_bucket): r.samples
               for r in from_history_file(recorded.history).rows}
    assert all(int(row["samples"].replace(",", "")) == history[key]
               for key, row in rows.items())
    assert "decisions from" in out and "1 operation," in out


def test_only_the_latest_run_is_read_unless_all_runs(recorded: Recorded,
                                                     tmp_path: Path) -> None:
    # an earlier run appended to the same file: another process (instance id), an hour before
    lines = (recorded.folder / "traces.jsonl").read_text().splitlines()
    earlier = []
    for line in lines:
        tree = json.loads(line)
        for resource in tree["resourceSpans"]:
            for attr in resource["resource"]["attributes"]:
                if attr["key"] == "service.instance.id":
                    attr["value"]["stringValue"] = "an-earlier-run"
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    for field in ("startTimeUnixNano", "endTimeUnixNano"):
                        span[field] = str(int(span[field]) - 3600 * 10**9)
        earlier.append(json.dumps(tree))
    folder = tmp_path / "two-runs"
    folder.mkdir()
    (folder / "traces.jsonl").write_text("\n".join(earlier + lines) + "\n")

    latest = from_telemetry(recorded.folder)
    assert len(from_telemetry(folder).events) == len(latest.events)
    assert "1 of 2 runs" in from_telemetry(folder).source
    assert len(from_telemetry(folder, all_runs=True).events) == 2 * len(latest.events)


def test_a_torn_last_line_is_a_write_in_progress_not_an_error(
        recorded: Recorded, tmp_path: Path) -> None:
    text = (recorded.folder / "traces.jsonl").read_text()
    (tmp_path / "traces.jsonl").write_text(text + text.splitlines()[0][:100])
    assert len(from_telemetry(tmp_path).events) == len(from_telemetry(recorded.folder).events)


def test_a_line_over_the_limit_is_an_error_naming_it_not_read_whole(
        recorded: Recorded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (recorded.folder / "traces.jsonl").read_text()
    longest = max(len(line.encode()) for line in text.splitlines()) + 1  # (with its newline)
    # the limit lowered to the longest real line: every real line is still read
    monkeypatch.setattr(otlp_files, "_MAX_LINE_BYTES", longest)
    lines = len(text.splitlines())
    (tmp_path / "traces.jsonl").write_text(text + "x" * (3 * longest) + "\n" + text)
    assert len(from_telemetry(recorded.folder).events) > 0
    with pytest.raises(ReportInputError, match=f"traces.jsonl:{lines + 1}: a line of over"):
        from_telemetry(tmp_path)


# ------------------------------------------------------------------------------ bad inputs


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


BAD_INPUTS = {
    "missing history": (lambda d, r: ["--history", str(d / "nope.json")], "not found"),
    "empty history": (lambda d, r: ["--history", str(_write(d / "h.json", ""))], "is empty"),
    "truncated history": (
        lambda d, r: ["--history", str(_write(d / "h.json", r.history.read_text()[:300]))],
        "not valid JSON"),
    "history of nothing": (
        lambda d, r: ["--history", str(_write(d / "h.json", json.dumps(
            {"format": "adaptive_runtime.history/1", "records": []})))],
        "holds no measurement"),
    "missing folder": (lambda d, r: ["--telemetry", str(d / "nowhere")], "does not exist"),
    "folder without spans": (lambda d, r: ["--telemetry", str(d)], "no traces.jsonl"),
    "empty spans file": (lambda d, r: ["--telemetry", str(_write(d / "traces.jsonl", "").parent)],
                         "holds no adaptive.select span"),
    "corrupt spans file": (
        lambda d, r: ["--telemetry", str(_write(d / "traces.jsonl", "{not json\n" + (
            r.folder / "traces.jsonl").read_text()).parent)],
        "traces.jsonl:1: not a JSON line"),
    "foreign JSON lines": (
        lambda d, r: ["--telemetry", str(_write(d / "traces.jsonl",
                                                '{"resourceSpans": 3}\n').parent)],
        "traces.jsonl:1: not an OTLP/JSON trace request"),
    "no such operation": (
        lambda d, r: ["--history", str(r.history), "--operation", "softmax"],
        "no operation matches softmax"),
    "PNG in a missing folder": (
        lambda d, r: ["--history", str(r.history), "--png", str(d / "no" / "r.png")],
        "cannot write the PNG"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_a_bad_input_is_one_line_on_stderr_and_exit_status_2(
        case: str, recorded: Recorded, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    make_args, expected = BAD_INPUTS[case]
    args = make_args(tmp_path, recorded)
    if "--png" not in args:
        args += ["--png", str(tmp_path / "report.png")]
    status, out, err = run_cli(capsys, *args)
    assert status == 2, (out, err)
    assert len(err.splitlines()) == 1, err
    assert err.startswith("adaptive-runtime report: error: ") and expected in err, err
    assert "Traceback" not in err
    if case != "PNG in a missing folder":  # (that one fails after the table was printed)
        assert out == ""
    assert not (tmp_path / "report.png").exists()


# ------------------------------------------------------------------------------ the demo


def test_demo_prints_one_parseable_line_per_key_and_shows_progress(
        capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main(["demo", "--calls", "400", "--max-size", "4096", "--no-telemetry"])
    out, err = capsys.readouterr()
    assert status == 0, err
    header = header_of(out)
    assert header[:6] == ["operation", "bucket", "sizes", "chosen", "reason", "conf"]
    rows = [line.split() for line in out.splitlines() if line.startswith(("dot ", "add "))]
    assert len(rows) >= 10 and all(len(r) == len(header) for r in rows), out
    assert {r[3] for r in rows} <= {"simd", "scalar", "gpu"}
    arms = [i for i, name in enumerate(header) if name.endswith("_µs")]
    assert arms and all(LATENCY_CELL.fullmatch(r[i]) or r[i] == "-" for r in rows for i in arms)
    assert any("±" in r[i] for r in rows for i in arms), out
    assert "400 calls in" in out
    # off a terminal: a progress line per tenth of the work, on stderr
    progress = [ln for ln in err.splitlines() if ln.startswith("demo: ")]
    assert progress[-1] == "demo: 400/400 calls (100%)" and len(progress) == 10, err


def test_report_json_holds_the_tables_rows_and_crossovers(
        recorded: Recorded, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_cli(capsys, "--telemetry", str(recorded.folder), "--json")
    assert status == 0, err
    doc = json.loads(out)  # one JSON document, nothing else on stdout
    rows = {(r["operation"], r["size_bucket"]): r for r in doc["rows"]}
    assert {(op, b) for op in ("blend", "project") for b in BUCKETS} <= set(rows)
    for key, backend in recorded.clear_keys().items():
        assert rows[key]["chosen"] == backend
        assert rows[key]["latency_us"][backend] > 0 and rows[key]["samples"] > 0
        assert rows[key]["timings"][backend] >= 1  # (the spans carry each arm's timings)
        assert set(rows[key]["stdev_us"]) <= set(rows[key]["timings"])
    assert doc["decisions"] > 0 and isinstance(doc["crossovers"], list)
    assert not Path("report.png").exists()  # (--json draws nothing)
