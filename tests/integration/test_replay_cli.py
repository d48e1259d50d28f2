"""``adaptive-runtime replay`` on a recorded run: a real process records its timed calls
(``rt.record_calls``) and writes the embedded telemetry files; the command, run as a user
runs it, replays policy configurations over either source."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from adaptive_runtime.offline.replay import read_calls, replay

RECORD = textwrap.dedent('''
    import math, sys, time
    import adaptive_runtime as ar
    from adaptive_runtime.operations import DeviceProbe

    folder, calls_path = sys.argv[1], sys.argv[2]
    latency_us = {"simd": 40.0, "scalar": 90.0}

    def arm(name):
        def run(n):
            end = time.perf_counter_ns() + int(latency_us[name] * (n / 4096) * 1000)
            while time.perf_counter_ns() < end:
                pass
            return n
        return run

    ar.telemetry.configure(service_name="replay-test", directory=folder)
    config = ar.RuntimeConfig(hot_path_calls_per_sec=1e9, spans_per_sec=math.inf)
    rt = ar.AdaptiveRuntime(config, builtin_ops=False, devices=DeviceProbe(gpu=False))
    op = rt.register("blend", size=lambda n: n, kind="vector")
    for name in latency_us:
        op.add_implementation(name, arm(name))
    with rt.record_calls(calls_path) as recorder:
        for i in range(1500):
            if i == 750:
                latency_us["simd"] = 400.0  # the committed arm slows down
            rt.run("blend", 4096 if i % 2 else 8192)
    ar.telemetry.shutdown()
    print("RECORDED", recorder.written, flush=True)
''')


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("replay")
    folder, calls = root / "telemetry", root / "calls.jsonl"
    done = subprocess.run([sys.executable, "-W", "error", "-c", RECORD, str(folder), str(calls)],
                          cwd=root, env=_env(), capture_output=True, text=True, timeout=180,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "RECORDED" in done.stdout
    return folder, calls


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "ADAPTIVE_RUNTIME_"))}
    env["OTEL_BSP_SCHEDULE_DELAY"] = "50"
    return env


def replay_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "adaptive_runtime", "replay", *argv],
                          env=_env(), capture_output=True, text=True, timeout=120, check=False)


def rows(out: str) -> dict[str, list[str]]:
    """The summary table's rows by policy name (the cells after it)."""
    found = {}
    for line in out.splitlines():
        cells = line.split()
        if cells and (cells[0] == "default" or "=" in cells[0]):
            found[cells[0]] = cells[1:]
    return found


def test_replay_of_recorded_calls_prints_each_configuration(recorded) -> None:
    _folder, calls = recorded
    done = replay_cli(str(calls), "--config", "switch_margin=0.2,min_samples_per_arm=5",
                      "--config", "drift_threshold=1000")
    assert done.returncode == 0, done.stderr
    assert "regret vs oracle" in done.stdout and "exploration" in done.stdout
    table = rows(done.stdout)
    assert set(table) == {"default", "switch_margin=0.2,min_samples_per_arm=5",
                          "drift_threshold=1000"}
    # the same calls under every configuration; no arm missing from the recorder's log
    assert len({cells[0] for cells in table.values()}) == 1
    assert all(cells[-1] == "0" for cells in table.values())
    # what the command printed is what the function computes
    result = replay(read_calls(calls))
    assert table["default"][1] == f"{result.regret:+.2%}"
    assert f"recorded run's regret {result.recorded_regret:+.2%}" in done.stdout
    # the slowdown is seen (a switch) by the default, not by a drift alarm set out of reach
    assert int(table["default"][2]) >= 1
    assert "blend" in done.stdout  # the per-key table


def test_replay_of_the_telemetry_folder(recorded) -> None:
    folder, _calls = recorded
    done = replay_cli(str(folder), "--keys", "0")
    assert done.returncode == 0, done.stderr
    assert "default" in rows(done.stdout)
    assert "blend" not in done.stdout  # --keys 0: no per-key table


def test_replay_errors_are_one_line_and_exit_2(recorded, tmp_path) -> None:
    _folder, calls = recorded
    for argv, message in (((str(calls), "--config", "nope=1"), "nope=1"),
                          ((str(tmp_path / "missing.jsonl"),), "cannot be read"),
                          ((str(tmp_path),), "no traces.jsonl")):
        done = replay_cli(*argv)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr


def test_replay_json_is_one_document_with_the_tables_figures(recorded) -> None:
    _folder, calls = recorded
    done = replay_cli(str(calls), "--config", "drift_threshold=1000", "--json", "--keys", "3")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    result = replay(read_calls(calls))
    assert [c["name"] for c in doc["configurations"]] == ["default", "drift_threshold=1000"]
    default = doc["configurations"][0]
    assert default["regret"] == pytest.approx(result.regret)
    assert default["calls"] == result.calls == doc["calls"]
    assert doc["recorded_regret"] == pytest.approx(result.recorded_regret)
    assert len(doc["worst_keys"]) == min(3, len(result.keys))
    assert {k["operation"] for k in doc["worst_keys"]} <= {"blend"}
