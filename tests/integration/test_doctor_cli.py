"""``adaptive-runtime doctor``: what it reports about this machine and this environment's
settings, against real things — a listening socket for a reachable OTLP endpoint, a closed
port, a port taken, history files the runtime wrote (one with another machine's
fingerprint), ``ADAPTIVE_RUNTIME_*`` variables the runtime refuses or never reads, the torch
installed here — each run as the console script runs (``python -m adaptive_runtime``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import adaptive_runtime as ar
from adaptive_runtime.history import read_history_file, write_history_file
from adaptive_runtime.telemetry.deadline import resolve_shutdown_timeout


def doctor(*argv: str, **env: str) -> tuple[int, str]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("OTEL_", "ADAPTIVE_RUNTIME_"))}
    done = subprocess.run([sys.executable, "-m", "adaptive_runtime", "doctor", *argv],
                          env={**clean, **env}, capture_output=True, text=True, timeout=180,
                          check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout


def test_doctor_json_names_the_arms_threads_and_a_reachable_endpoint(tmp_path: Path) -> None:
    with socket.socket() as collector:
        collector.bind(("127.0.0.1", 0))
        collector.listen()
        port = collector.getsockname()[1]
        status, out = doctor("--json", OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}")
    found = json.loads(out)
    assert status == 0, found["problems"]
    assert found["arms"]["scalar"]["available"] and found["arms"]["simd"]["available"]
    assert found["arms"]["gpu"]["available"] is torch.cuda.is_available()
    assert found["libraries"]["torch"] == torch.__version__
    assert found["threads"]["torch"] == torch.get_num_threads()
    assert isinstance(found["threads"]["blas"], int)
    assert found["telemetry"]["reachable"] is True
    assert found["telemetry"]["destination"] == f"OTLP http/protobuf http://127.0.0.1:{port}"
    assert found["adaptive_runtime"] == ar.__version__


def test_doctor_lists_each_problem_and_exits_1(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = closed.getsockname()[1]
    # a history file written here, but with another machine's fingerprint
    rt = ar.AdaptiveRuntime()
    for _ in range(20):
        rt.run("relu", np.ones(100))
    mine = tmp_path / "history.json"
    rt.save_history(mine)
    theirs = tmp_path / "foreign.json"
    loaded = read_history_file(mine)
    write_history_file(theirs, loaded.records,
                       fingerprint={**loaded.fingerprint, "cpu": "Some Other CPU"})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        status, out = doctor(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{dead}",
                             ADAPTIVE_RUNTIME_HISTORY=str(theirs),
                             ADAPTIVE_RUNTIME_PROMETHEUS_PORT=str(busy))
    assert status == 1, out
    problems = out.split("problems:", 1)[1]
    assert f"127.0.0.1:{dead}" in problems and "refused" in problems.lower()
    assert f"127.0.0.1:{busy} is taken" in problems
    assert "not applied here" in problems and "Some Other CPU" in problems
    status, out = doctor("--json", ADAPTIVE_RUNTIME_HISTORY=str(mine))
    history = json.loads(out)["history"]
    assert (status, history["status"]) == (0, "applies here")
    assert history["records"] == len(loaded.records) > 0


def test_doctor_reports_each_bad_setting_with_the_runtimes_own_error(tmp_path: Path) -> None:
    settings = {
        "ADAPTIVE_RUNTIME_SAMPLING_THRESHOLD_US": "abc",    # refused by the runtime
        "ADAPTIVE_RUNTIME_SHUTDOWN_TIMEOUT_S": "soon",      # refused by configure()
        "ADAPTIVE_RUNTIME_HISTORY_FORCED": "1",             # misspelt: read by nothing
        "ADAPTIVE_RUNTIME_TRACE_SAMPLE_RATE": "0.1",        # removed: read by nothing
        "ADAPTIVE_RUNTIME_TRACING": "off",                  # fine
    }
    with pytest.raises(ar.ConfigError) as refused:
        ar.RuntimeConfig.from_env({"ADAPTIVE_RUNTIME_SAMPLING_THRESHOLD_US": "abc"})
    with pytest.raises(ar.ConfigError) as refused_timeout:
        resolve_shutdown_timeout(None, {"ADAPTIVE_RUNTIME_SHUTDOWN_TIMEOUT_S": "soon"})
    status, out = doctor(**settings)
    assert status == 1, out
    problems = out.split("problems:", 1)[1]
    assert f"settings: {refused.value}" in problems
    assert f"settings: {refused_timeout.value}" in problems
    assert ("ADAPTIVE_RUNTIME_HISTORY_FORCED is not a variable adaptive_runtime reads, so it "
            "changes nothing: did you mean ADAPTIVE_RUNTIME_HISTORY_FORCE?") in problems
    assert "ADAPTIVE_RUNTIME_TRACE_SAMPLE_RATE is no longer read" in problems
    assert "TRACING" not in problems
    status, out = doctor("--json", **settings)
    assert status == 1
    found = json.loads(out)
    assert {s["variable"]: s["status"] for s in found["settings"]} == {
        "ADAPTIVE_RUNTIME_SAMPLING_THRESHOLD_US": "invalid",
        "ADAPTIVE_RUNTIME_SHUTDOWN_TIMEOUT_S": "invalid",
        "ADAPTIVE_RUNTIME_HISTORY_FORCED": "unknown",
        "ADAPTIVE_RUNTIME_TRACE_SAMPLE_RATE": "removed",
        "ADAPTIVE_RUNTIME_TRACING": "ok"}
    assert f"settings: {refused.value}" in found["problems"]
    assert len([p for p in found["problems"] if p.startswith("settings:")]) == 4


def test_doctor_reports_settings_that_conflict_together() -> None:
    status, out = doctor("--json", ADAPTIVE_RUNTIME_FORCE_BACKEND="simd",
                         ADAPTIVE_RUNTIME_DISABLE_BACKENDS="simd")
    with pytest.raises(ar.ConfigError) as refused:
        ar.RuntimeConfig.from_env({"ADAPTIVE_RUNTIME_FORCE_BACKEND": "simd",
                                   "ADAPTIVE_RUNTIME_DISABLE_BACKENDS": "simd"})
    found = json.loads(out)
    assert status == 1
    assert found["problems"] == [f"settings: {refused.value}"]


def test_doctor_table_shows_brackets_as_written(tmp_path: Path) -> None:
    history = tmp_path / "run[otlp]" / "history.json"  # (absent: made at the first save)
    status, out = doctor(ADAPTIVE_RUNTIME_HISTORY=str(history))
    assert status == 0, out
    assert f"{history}: absent" in out  # (a piped table is never wrapped)


def test_doctor_warns_about_a_cuda_build_only_where_it_finds_no_gpu() -> None:
    # (here the CPU build of torch: no warning; a CUDA build on a machine without a GPU gets
    # one, whose text tests/unit/test_doctor_cuda_build.py checks)
    wasted = torch.version.cuda is not None and not torch.cuda.is_available()
    status, out = doctor("--json")
    found = json.loads(out)
    assert status == 0, found["problems"]
    cuda_warnings = [w for w in found["warnings"] if "is a CUDA build" in w]
    assert len(cuda_warnings) == (1 if wasted else 0), cuda_warnings
