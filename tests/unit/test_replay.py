"""Offline replay: policy configurations run over recorded timings (no runtime needed for
most), the runtime's call recorder, and the readers of both sources."""

from __future__ import annotations

import json
import random

import pytest

import adaptive_runtime as ar
from adaptive_runtime.decision import Reason
from adaptive_runtime.offline.replay import (
    CALLS_FORMAT,
    CallTiming,
    calls_from_telemetry,
    parse_config,
    read_calls,
    replay,
)
from adaptive_runtime.policy import PolicyConfig

GPU, SIMD, SCALAR = ar.Backend.GPU, ar.Backend.SIMD, ar.Backend.SCALAR
SIZE = 1 << 12


def log(latency_us: dict[ar.Backend, float], calls: int, *, op: str = "dot",
        size: int = SIZE, start_s: float = 0.0) -> list[CallTiming]:
    """A log that timed every arm on every call (a uniformly exploring recording run)."""
    return [CallTiming(op, size, arm, us, start_s + i + 0.1 * j)
            for i in range(calls) for j, (arm, us) in enumerate(latency_us.items())]


def test_a_stationary_log_replays_to_the_oracle_arm_with_little_regret() -> None:
    result = replay(log({SIMD: 100.0, SCALAR: 300.0}, 500))
    (key,) = result.keys
    assert (key.operation, key.oracle) == ("dot", SIMD)
    assert key.calls == 1000  # every recorded timing is one call
    assert result.switches == 0
    # exploration: the first few calls, then a re-check now and then
    assert 0 < result.exploration_share < 0.05
    assert 0 < result.regret < 0.05
    assert result.reasons[Reason.EXPLOIT] > 900


def test_replay_is_deterministic() -> None:
    rng = random.Random(7)
    calls = [CallTiming("dot", SIZE, arm, base * rng.uniform(0.8, 1.2), float(i))
             for i in range(400) for arm, base in ((SIMD, 100.0), (SCALAR, 104.0))]
    assert replay(calls) == replay(calls)


def test_the_oracle_is_the_arm_with_the_lowest_mean_weighted_by_calls() -> None:
    calls = [CallTiming("dot", SIZE, SIMD, 100.0, 0.0, calls=10),
             CallTiming("dot", SIZE, SIMD, 10.0, 1.0, calls=1),
             CallTiming("dot", SIZE, SCALAR, 60.0, 2.0, calls=1)]
    (key,) = replay(calls).keys
    # SIMD: 100 us answers the call at 0 s (10 calls), 10 us the ones at 1 s and 2 s
    assert key.oracle is SCALAR  # (1000 + 10 + 10) / 12 = 85 us a call, against 60
    assert key.oracle_us == pytest.approx(60.0 * 12)
    assert key.recorded_us == pytest.approx(1000.0 + 10.0 + 60.0)


def test_an_arm_never_timed_on_a_key_is_unevaluable_there() -> None:
    calls = log({SIMD: 100.0, SCALAR: 300.0}, 50, size=SIZE)
    calls += log({SIMD: 100.0}, 50, size=SIZE * 8, start_s=0.05)  # SCALAR never ran there
    result = replay(calls)
    small, large = sorted(result.keys, key=lambda k: k.size_bucket)
    assert small.unevaluable_arms == () and large.unevaluable_arms == (SCALAR,)
    assert result.unevaluable_arms == 1
    assert large.cost_us == pytest.approx(100.0 * 50)  # only SIMD was a candidate


def test_nearest_timings_follow_a_slowdown_in_the_log() -> None:
    calls = log({SIMD: 100.0, SCALAR: 300.0}, 300)
    calls += log({SIMD: 900.0, SCALAR: 300.0}, 300, start_s=300.0)  # SIMD slows 9x
    result = replay(calls)
    (key,) = result.keys
    assert key.switches == 1  # drift, then SCALAR
    assert result.reasons[Reason.DRIFT] >= 1
    # cycling through SIMD's timings instead mixes the two halves (no drift is visible)
    assert replay(calls, pick="cycle").reasons != result.reasons


def test_configurations_differ_where_their_knobs_matter() -> None:
    calls = log({SIMD: 100.0, SCALAR: 200.0}, 300)
    default = replay(calls)
    more = replay(calls, PolicyConfig(min_samples_per_arm=10))  # 10 timings of the slow arm, not 3
    assert more.exploration_share > default.exploration_share
    assert more.regret > default.regret
    assert more.config.min_samples_per_arm == 10


def test_a_converged_timing_stands_for_the_calls_before_it() -> None:
    calls = log({SIMD: 100.0, SCALAR: 300.0}, 20)
    calls.append(CallTiming("dot", SIZE, SIMD, 100.0, 100.0, calls=50))
    result = replay(calls)
    assert result.calls == 40 + 50
    assert result.keys[0].recorded_us == pytest.approx(20 * 400.0 + 50 * 100.0)


def test_parse_config_takes_knobs_and_names_the_wrong_one() -> None:
    config = parse_config("switch_margin=0.1, min_samples_per_arm=5")
    assert (config.switch_margin, config.min_samples_per_arm) == (0.1, 5)
    assert parse_config("") == PolicyConfig()
    with pytest.raises(ValueError, match=r"no_such_knob.*knobs: .*switch_margin"):
        parse_config("no_such_knob=1")
    with pytest.raises(ValueError, match="min_samples_per_arm takes an integer"):
        parse_config("min_samples_per_arm=2.5")
    with pytest.raises(ValueError, match="switch_margin must be"):
        parse_config("switch_margin=-1")


def test_replay_rejects_an_unknown_pick() -> None:
    with pytest.raises(ValueError, match="pick"):
        replay([], pick="random")


# ------------------------------------------------------------------ recording


def test_a_run_recorded_and_replayed_with_its_own_configuration_is_reproduced(
        make_runtime, tmp_path) -> None:
    """Every call timed (max_measure_period 1): replaying the default policy over what it
    recorded makes the same choices, so its cost is the recorded cost."""
    h = make_runtime({SIMD: 100.0, SCALAR: 130.0, GPU: 400.0}, max_measure_period=1)
    path = tmp_path / "calls.jsonl"
    with h.rt.record_calls(path) as recorder:
        for i in range(600):
            if i == 300:
                h.arms.latency_us[SIMD] = 500.0  # a slowdown: drift and a switch
            h.clock.advance(0.001)
            h.call()
    assert recorder.written == 600 and recorder.dropped == 0
    calls = read_calls(path)
    assert {c.arm for c in calls} == {SIMD, SCALAR, GPU}
    result = replay(calls)
    assert result.cost_us == pytest.approx(result.recorded_us)
    assert result.switches == 1


def test_the_recorder_is_bounded_and_stops_when_closed(make_runtime, tmp_path) -> None:
    h = make_runtime({SIMD: 100.0, SCALAR: 130.0}, max_measure_period=1)
    path = tmp_path / "calls.jsonl"
    recorder = h.rt.record_calls(path, max_calls=5)
    for _ in range(20):
        h.call()
    recorder.close()
    for _ in range(20):
        h.call()  # not recorded
    assert (recorder.written, recorder.dropped) == (5, 15)
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"format": CALLS_FORMAT}
    assert len(lines) == 6


def test_read_calls_names_a_malformed_line_and_skips_a_torn_last_one(tmp_path) -> None:
    good = json.dumps({"operation": "dot", "size": 8, "arm": "simd", "duration_us": 1.5,
                       "time_s": 1.0, "calls": 1})
    path = tmp_path / "calls.jsonl"
    path.write_text(f'{{"format": "{CALLS_FORMAT}"}}\n{good}\n{{"operation": "d')
    assert read_calls(path) == [CallTiming("dot", 8, SIMD, 1.5, 1.0, 1)]
    path.write_text(f"{good}\n{{\"operation\": \"dot\"}}\n")
    with pytest.raises(ValueError, match=r"calls.jsonl:2: not a recorded call"):
        read_calls(path)
    path.write_text('{"format": "something/9"}\n')
    with pytest.raises(ValueError, match="format"):
        read_calls(path)


# ------------------------------------------------------------------ telemetry files


def _span(name: str, trace: str, start_ns: int, **attributes: object) -> dict[str, object]:
    def value(v: object) -> dict[str, object]:
        if isinstance(v, float):
            return {"doubleValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        return {"stringValue": str(v)}

    return {"name": name, "traceId": trace, "startTimeUnixNano": str(start_ns),
            "attributes": [{"key": k.replace("__", "."), "value": value(v)}
                           for k, v in attributes.items()]}


def test_calls_from_telemetry_pairs_each_execute_span_with_its_select(tmp_path) -> None:
    spans = [
        _span("adaptive.select dot", "t1", 1_000, adaptive__operation="dot",
              adaptive__input_size=4096, adaptive__sampling__weight=1.0),
        _span("adaptive.execute dot", "t1", 1_100, adaptive__operation="dot",
              adaptive__backend="simd", adaptive__duration_us=12.5),
        _span("adaptive.select dot", "t2", 2_000, adaptive__operation="dot",
              adaptive__input_size=4096, adaptive__sampling__weight=100.0),
        _span("adaptive.execute dot", "t2", 2_100, adaptive__operation="dot",
              adaptive__backend="scalar", adaptive__duration_us=30.0),
        _span("adaptive.select dot", "t3", 3_000, adaptive__operation="dot",
              adaptive__input_size=4096),
        _span("adaptive.execute dot", "t3", 3_100, adaptive__operation="dot",
              adaptive__backend="gpu", adaptive__duration_us=1.0, error__type="OOM"),
    ]
    request = {"resourceSpans": [{"resource": {"attributes": []},
                                  "scopeSpans": [{"spans": spans}]}]}
    (tmp_path / "traces.jsonl").write_text(json.dumps(request) + "\n")
    assert calls_from_telemetry(tmp_path) == [
        CallTiming("dot", 4096, SIMD, 12.5, 1.1e-6, 1),
        CallTiming("dot", 4096, SCALAR, 30.0, 2.1e-6, 100),  # (a failed call is left out)
    ]


def test_the_oracle_counts_an_arm_that_slowed_at_its_later_timings_too() -> None:
    """The recording run left GPU when it slowed 5x, timing it once after: over the run GPU
    costs (100 + 500) / 2 a call, SIMD 150. Its recorded timings alone would say 108."""
    calls = [CallTiming("mm", SIZE, SIMD, 150.0, 0.5)]
    calls += [CallTiming("mm", SIZE, GPU, 100.0, float(t)) for t in range(50)]
    calls.append(CallTiming("mm", SIZE, GPU, 500.0, 50.0))
    calls += [CallTiming("mm", SIZE, SIMD, 150.0, 50.5 + t) for t in range(50)]
    result = replay(calls)
    (key,) = result.keys
    assert key.oracle is SIMD
    assert result.regret < 0  # GPU while it was fast, then SIMD: better than either alone
    assert replay(calls, pick="cycle").keys[0].oracle is GPU  # (recorded means only)
