"""torch DataLoader workers, forked and spawned, using the runtime the parent set up.

Each case is a real ``torch.utils.data.DataLoader(num_workers=2)`` in a fresh interpreter (a
script file, so that spawned workers can import its ``Dataset``), bounded by a timeout (a
deadlocked worker fails the test, it does not hang it). Before the loader starts, the parent
has configured telemetry (the real OTLP receiver of ``otlp_receiver``, or the embedded
OTLP/JSON files), learned on the default runtime and queued spans, so the span worker, the
SDK's export threads, the metric reader and the history saver are all running when the workers
are made. The workers call adaptive operations on numpy arrays and torch tensors and report
what they computed and which threads they have.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import child_run
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from otlp_receiver import OtlpReceiver, ReceivedSpan, flatten_spans
from required import require_module

from adaptive_runtime.offline.report.otlp_files import decode_requests

require_module("torch", "torch")

TIMEOUT_S = 60
ITEMS = 12
SPAN_WORKER = "adaptive-runtime-spans"
HISTORY_SAVER = "adaptive-runtime-history-save"
METRIC_READER = "OtelPeriodicExportingMetricReader"
SPAN_PROCESSOR = "adaptive-runtime-export"  # configure()'s export processor

SCRIPT = textwrap.dedent('''
    import json, os, sys, threading
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Dataset
    import adaptive_runtime as ar

    THREADS = ({threads!r})
    ITEMS = {items}


    def thread_counts():
        names = [thread.name for thread in threading.enumerate()]
        return {{name: names.count(name) for name in THREADS}}


    def dot_rows(rt):
        return sorted([r.size_bucket, r.backend.value, r.samples]
                      for r in rt.history_snapshot() if r.operation == "dot")


    class AdaptiveOps(Dataset):
        """Adaptive operations in the worker: the default runtime (ar.ops) and the runtime the
        dataset holds (the parent's own when forked, a pickled copy when spawned)."""

        def __init__(self, rt):
            self.rt = rt

        def __len__(self):
            return ITEMS

        def __getitem__(self, i):
            x = np.linspace(-1.0, 1.0, 512) * (i + 1)
            t = torch.linspace(-1.0, 1.0, 256, dtype=torch.float64) * (i + 1)
            ok = (np.array_equal(ar.ops.relu(x), np.maximum(x, 0.0))
                  and torch.equal(ar.ops.add(t, t), t + t)
                  and np.array_equal(self.rt.run("relu", x), np.maximum(x, 0.0)))
            return {{"index": i, "pid": os.getpid(), "ok": bool(ok),
                    "threads": thread_counts(), "held_dot": dot_rows(self.rt),
                    "default_dot": dot_rows(ar.get_runtime())}}


    def keep_as_list(items):
        return items


    def main():
        context, endpoint = sys.argv[1], sys.argv[2] or None
        history = os.environ["ADAPTIVE_RUNTIME_HISTORY"]
        ar.telemetry.configure(service_name="dataloader-workers", endpoint=endpoint)
        rt = ar.get_runtime()
        x = np.linspace(-1.0, 1.0, 512)
        for _ in range(40):
            ar.ops.relu(x)
            ar.ops.dot(x, x)
        rt.save_history(history)
        saved = open(history, "rb").read(), os.stat(history).st_ino
        # first calls of new keys (always traced), right before the fork: records still
        # queued in the parent then, which only the parent may export
        for n in (3, 5, 9, 17, 33, 65):
            ar.ops.relu(np.ones(n))
        parent_threads = thread_counts()
        loader = DataLoader(AdaptiveOps(rt), batch_size=3, num_workers=2,
                            multiprocessing_context=context, timeout=30,
                            collate_fn=keep_as_list)
        items = [item for batch in loader for item in batch]
        del loader  # (its workers have ended: they are joined when iteration ends)
        unchanged = (open(history, "rb").read(), os.stat(history).st_ino) == saved
        print("RESULT " + json.dumps({{
            "parent_pid": os.getpid(), "parent_threads": parent_threads, "items": items,
            "parent_dot": dot_rows(rt), "history_unchanged": unchanged}}), flush=True)


    if __name__ == "__main__":
        main()
''').format(threads=(SPAN_WORKER, HISTORY_SAVER, METRIC_READER, SPAN_PROCESSOR), items=ITEMS)


class Ran(child_run.Ran):
    """The script's exit code, output and RESULT line."""

    @property
    def items(self) -> list[dict[str, Any]]:
        return list(self.result["items"])

    @property
    def worker_pids(self) -> set[int]:
        return {item["pid"] for item in self.items}


def run_loader(tmp_path: Path, context: str, endpoint: str = "") -> Ran:
    """Run the script (workers started by ``context``; no endpoint: the OTLP/JSON files under
    ``tmp_path / "telemetry"``) and check what every run must show."""
    script = tmp_path / "loader_script.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "ADAPTIVE_RUNTIME_"))}
    env.update(OTEL_BSP_SCHEDULE_DELAY="50", OTEL_EXPORTER_OTLP_TIMEOUT="2",
               PYTHONDONTWRITEBYTECODE="1",
               ADAPTIVE_RUNTIME_HISTORY=str(tmp_path / "history.json"),
               ADAPTIVE_RUNTIME_TELEMETRY_DIR=str(tmp_path / "telemetry"))
    proc = subprocess.run([sys.executable, str(script), context, endpoint], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
                          check=False)
    ran = Ran(proc)
    assert ran.returncode == 0, ran
    assert "Traceback" not in ran.stderr, ran
    result = ran.result
    # what was running in the parent when it forked or spawned its workers
    assert result["parent_threads"] == {SPAN_WORKER: 1, HISTORY_SAVER: 1, METRIC_READER: 1,
                                        SPAN_PROCESSOR: 1}, ran
    assert sorted(item["index"] for item in ran.items) == list(range(ITEMS)), ran
    assert all(item["ok"] for item in ran.items), ran
    assert len(ran.worker_pids) == 2 and result["parent_pid"] not in ran.worker_pids, ran
    for item in ran.items:  # nothing a worker computes changes what it learned from the parent
        assert item["held_dot"] == result["parent_dot"] != [], item
        assert item["default_dot"] == result["parent_dot"], item
    assert result["history_unchanged"], "a worker wrote the parent's history file"
    return ran


def check_worker_spans(spans: Sequence[ReceivedSpan], ran: Ran) -> None:
    """Spans came from both workers, marked as theirs, and nothing was exported twice."""
    parent = ran.result["parent_pid"]
    by_pid = Counter(span.attributes.get("process.pid") for span in spans)
    assert set(by_pid) == {None, *ran.worker_pids}, by_pid  # None: the parent's own spans
    for span in spans:
        if "process.pid" in span.attributes:
            assert span.attributes["process.parent_pid"] == parent, span
    # (only the workers add tensors: a new key to each, explored, so traced)
    added = [s for s in spans if s.name == "adaptive.select add@torch"]
    assert {s.attributes.get("process.pid") for s in added} == ran.worker_pids
    ids = Counter((span.trace_id, span.span_id) for span in spans)
    assert [key for key, n in ids.items() if n > 1] == []
    # a record the parent had queued and a worker made again would repeat its times
    made = Counter((span.name, span.start_time_unix_nano, span.end_time_unix_nano)
                   for span in spans)
    assert [key for key, n in made.items() if n > 1] == []


def test_forked_workers_export_their_spans_once_and_no_metrics(
        tmp_path: Path, otlp_receiver: OtlpReceiver) -> None:
    ran = run_loader(tmp_path, "fork", otlp_receiver.http_endpoint)
    for item in ran.items:
        threads = item["threads"]
        # one span worker and one SDK span processor of the worker's own; no metric reader
        # (metrics stay the parent's) and no history saver (the file is the parent's)
        assert threads == {SPAN_WORKER: 1, SPAN_PROCESSOR: 1, METRIC_READER: 0,
                           HISTORY_SAVER: 0}, item
    # (the parent flushed everything at its exit, the workers at theirs)
    check_worker_spans(otlp_receiver.spans(), ran)
    assert otlp_receiver.metrics_requests(), "the parent exported no metrics"


def test_forked_workers_append_whole_lines_to_the_parents_span_file(tmp_path: Path) -> None:
    ran = run_loader(tmp_path, "fork")
    for item in ran.items:
        assert item["threads"][SPAN_WORKER] == 1 and item["threads"][METRIC_READER] == 0, item
    traces = tmp_path / "telemetry" / "traces.jsonl"
    # (decoding raises on a line that is not one whole export request)
    spans = [s for request in decode_requests(traces, ExportTraceServiceRequest)
             for s in flatten_spans(request)]
    check_worker_spans(spans, ran)
    assert not list((tmp_path / "telemetry").glob("traces*.jsonl.*")), "a worker rotated"


def test_spawned_workers_get_a_copy_of_the_runtime_and_leave_its_history_file(
        tmp_path: Path, otlp_receiver: OtlpReceiver) -> None:
    # The dataset's runtime reaches each worker pickled (held_dot: its history came along);
    # the workers' default runtime loaded the parent's ADAPTIVE_RUNTIME_HISTORY file
    # (default_dot) and saves nothing to it (history_unchanged), at exit included.
    ran = run_loader(tmp_path, "spawn", otlp_receiver.http_endpoint)
    for item in ran.items:
        # a fresh interpreter: no telemetry unless the worker configures it, no saver
        assert item["threads"] == {SPAN_WORKER: 0, SPAN_PROCESSOR: 0, METRIC_READER: 0,
                                   HISTORY_SAVER: 0}, item
    spans = otlp_receiver.spans()
    assert spans and not any("process.pid" in span.attributes for span in spans)


def test_an_unpickled_runtime_never_saves_to_the_history_file_of_its_original(
        tmp_path: Path) -> None:
    # One process learns with a history file and pickles its runtime; another unpickles it,
    # learns more and exits normally (exit handlers run): the file stays the first one's.
    history, pickled = tmp_path / "history.json", tmp_path / "runtime.pickle"
    first = f'''
import pickle
import adaptive_runtime as ar
rt = ar.AdaptiveRuntime(ar.RuntimeConfig(history_path={str(history)!r},
                                         history_save_interval_s=0))
for i in range(8):
    rt.record_performance("dot", 1000, "simd", 10.0 + i)
open({str(pickled)!r}, "wb").write(pickle.dumps(rt))
'''
    second = f'''
import pickle
copy = pickle.loads(open({str(pickled)!r}, "rb").read())
assert copy.config.history_path == {str(history)!r}
assert sum(r.samples for r in copy.history_snapshot()) == 8
for i in range(8):
    copy.record_performance("dot", 1000, "scalar", 40.0 + i)
'''
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADAPTIVE_RUNTIME_")}

    def run(script: str) -> None:
        proc = subprocess.run([sys.executable, "-W", "error", "-c", script], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
                              check=False)
        assert proc.returncode == 0, proc.stderr

    run(first)
    saved = history.read_bytes(), history.stat().st_ino  # (the first runtime saved at exit)
    run(second)
    assert (history.read_bytes(), history.stat().st_ino) == saved
