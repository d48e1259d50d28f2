"""Exemplars on the latency histogram: a real Prometheus, with exemplar storage on, scrapes the
endpoint ``configure()`` serves while a training loop runs, and each exemplar it stored names
the trace and span of one traced call, whose kernel time is the exemplar's value. The loop runs
in a fresh interpreter (``configure()`` installs process-wide providers)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_server import PrometheusServer, free_loopback_port
from test_configure import clean_env, file_spans

_TRAIN = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    import numpy as np
    import adaptive_runtime as ar

    folder, port, stop = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    ar.telemetry.configure(directory=folder, prometheus_port=port)
    rt = ar.AdaptiveRuntime()
    x = np.linspace(-1.0, 1.0, 200_000)
    step, deadline = 0, time.monotonic() + 120
    while not stop.exists() and time.monotonic() < deadline:
        with ar.train_step(step):
            for _ in range(20):
                rt.run("relu", x)
        step += 1
        time.sleep(0.05)
''')


def _wait_for_endpoint(port: int, process: subprocess.Popen[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        with contextlib.suppress(OSError), \
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2):
            return
        time.sleep(0.1)
    raise AssertionError(f"no scrape endpoint on port {port} after {timeout_s:g} s")


def test_prometheus_stores_exemplars_that_name_the_traced_calls_spans(
        tmp_path: Path, prometheus: Callable[..., PrometheusServer]) -> None:
    port, stop, folder = free_loopback_port(), tmp_path / "stop", tmp_path / "telemetry"
    process = subprocess.Popen([sys.executable, "-c", _TRAIN, str(folder), str(port), str(stop)],
                               env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        _wait_for_endpoint(port, process, 60)
        server = prometheus([f"127.0.0.1:{port}"], features=["exemplar-storage"])
        query = "adaptive_op_duration_seconds_bucket"
        deadline = time.monotonic() + 40
        stored: list[dict] = []
        while time.monotonic() < deadline and len(stored) < 3:
            time.sleep(1)
            series = server.api("query_exemplars", query=query, start=str(time.time() - 600),
                                end=str(time.time() + 60))
            stored = [dict(e, series=s["seriesLabels"]) for s in series for e in s["exemplars"]]
        assert len(stored) >= 3, (stored, server.target_health())
    finally:
        stop.touch()
        _out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "Traceback" not in err, err

    executes = {(s.trace_id, s.span_id): s for s in file_spans(folder / "traces.jsonl")
                if s.name == "adaptive.execute relu"}
    for exemplar in stored:
        labels, series = exemplar["labels"], exemplar["series"]
        span = executes.get((labels["trace_id"], labels["span_id"]))
        assert span is not None, f"an exemplar names no exported kernel span: {exemplar}"
        # the exemplar is that call: its kernel time, on the series of its arm
        assert float(exemplar["value"]) == span.attributes["adaptive.duration_us"] / 1e6
        assert series["adaptive_operation"] == "relu"
        assert series["adaptive_backend"] == span.attributes["adaptive.backend"]
        assert series.get("adaptive_variant", "") == span.attributes.get("adaptive.variant", "")
        upper = float(series["le"])
        assert float(exemplar["value"]) <= upper
