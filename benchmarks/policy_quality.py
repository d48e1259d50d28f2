"""Quality of the selection policy: regret, reaction to a slowdown, stability on a near-tie.

Method. Three synthetic arms (GPU, SIMD, SCALAR) of one registered ``vector`` operation
busy-wait on ``time.perf_counter_ns`` for a set latency read from a mutable dict, so the
latency of each arm is known exactly and can be changed mid-run. Every call goes through the
real runtime (``rt.run``: select → execute → time → learn) with the default ``RuntimeConfig``;
nothing is tuned to this benchmark. The GPU arm is made available with
``DeviceProbe(gpu=True)``: a test double standing in for a GPU, not a device.

Per call we record what the runtime did: its decision (arm and reason) from the change in
``rt.selection_counts()`` across the call — every call is counted there exactly once — and,
through a side channel in the busy-wait functions, the arm that actually ran. ``rt.decide``
(side-effect free) is also asked just before each call, and any call where it disagreed with
what the call then did is reported. Scenarios (fresh runtime each, ``TRIALS`` runs each):

1. stationary — arms at 100 / 150 / 300 µs;
2. slowdown — as (1), but the best arm (GPU) becomes 5x slower halfway through;
3. near-tie — two arms 2.5 % apart (200 / 205 µs), the third clearly worse (300 µs);
4. wrong heuristic — the cold-start order's first arm (SIMD, 400 µs) is over 3x the plain
   loop (SCALAR, 120 µs), the GPU double slower still (600 µs): a prior is a guess, and the
   other arms must be timed within a few calls whatever it says;
5. 3x slowdown — as (1), but the best arm (GPU) becomes 3x slower halfway through (a
   sustained change, smaller than (2)'s);
6. spike — as (1), with one call of the best arm (GPU) taking 20x its time halfway through;
7. bimodal — the best arm (GPU) takes 60 µs or, one call in four at random, 250 µs (mean
   107.5 µs), beside SIMD at 150 µs: the slow mode is not a slowdown, and its mean stays lower.

Then the policy offline (``adaptive_runtime.offline.replay``, what ``adaptive-runtime replay``
runs): each scenario's first trial records its timed calls (``rt.record_calls``), and the default
policy configuration and a few others are replayed over that recording — regret against the
hindsight oracle of the measured timings, switches of the committed arm, exploration share —
the way a user tunes the policy for a workload without running it again. (Informational: the
targets above are judged on the live runs.)

Metrics (worst of the trials is judged; the median is shown beside it):

- regret vs the best arm in hindsight, per call:
  (Σ set latency of the arm that ran − Σ set latency of the best arm at that call)
  / Σ best latency. Set latencies, not measured ones, so machine noise stays out of the ratio;
  the measured wall time of the calls against an oracle that runs the best arm directly is
  printed below the table for transparency. Target ≤ 2 %.
- slowdown: calls after the change before the runtime settles on the new best arm — the
  first call from which every ``exploit`` decision picks the new best arm (re-checks of other
  arms after that do not count against it). Target ≤ 20 for the 5x slowdown, ≤ 10 for the
  3x one.
- near-tie: switches of the committed arm after the first commit — ``exploit`` calls whose
  arm differs from the previous ``exploit`` call's arm. Target ≤ 3; for the spike and the
  bimodal arm, 0.
- wrong heuristic: the call at which the best arm (SCALAR) first runs. Target: within the
  first 3 calls; regret ≤ 1 %.

For the bimodal scenario the best arm in hindsight is the one with the lower mean (no policy
can know which mode the next call will be in), and regret is measured against its latency at
each call.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from _table import print_table, verdict

import adaptive_runtime as ar
from adaptive_runtime.offline.replay import parse_config, read_calls, replay
from adaptive_runtime.operations import DeviceProbe
from adaptive_runtime.records import SelectionKey

OP = "synthetic"
SIZE = 1 << 16  # a vector op of this size: cold-start heuristic says SIMD
CALLS = 4_000
TRIALS = 5
REGRET_TARGET_PCT = 2.0
WRONG_HEURISTIC_REGRET_TARGET_PCT = 1.0
SWITCH_CALLS_TARGET = 20
SWITCH_CALLS_3X_TARGET = 10
FLIPS_TARGET = 3
FIRST_TIMED_TARGET = 3  # the best arm runs within this many calls, whatever the heuristic
# policy configurations replayed over each scenario's recorded trial (besides the default)
REPLAYED = ("switch_margin=0", "min_samples_per_arm=6", "drift_threshold=12")

GPU, SIMD, SCALAR = ar.Backend.GPU, ar.Backend.SIMD, ar.Backend.SCALAR
Latencies = dict[ar.Backend, float]


def spin(duration_us: float) -> None:
    """Busy-wait ``duration_us`` on the same clock the runtime times with."""
    deadline = time.perf_counter_ns() + int(duration_us * 1000.0)
    while time.perf_counter_ns() < deadline:
        pass


@dataclass(frozen=True)
class Scenario:
    name: str
    latencies_us: Latencies
    # (call index, arm, new latency): applied just before that call
    change: tuple[int, ar.Backend, float] | None = None
    # (call index, arm, latency of that one call)
    spike: tuple[int, ar.Backend, float] | None = None
    # (arm, fast latency, slow latency, share of slow calls), drawn per call from a fixed seed
    bimodal: tuple[ar.Backend, float, float, float] | None = None

    def expected(self, call: int) -> Latencies:
        """Each arm's expected latency at ``call`` (what an oracle could know)."""
        latencies = dict(self.latencies_us)
        if self.change is not None and call >= self.change[0]:
            latencies[self.change[1]] = self.change[2]
        if self.bimodal is not None:
            arm, fast, slow, share = self.bimodal
            latencies[arm] = fast * (1.0 - share) + slow * share
        return latencies

    def at(self, call: int, draw: random.Random) -> Latencies:
        """Each arm's latency at ``call``."""
        latencies = dict(self.latencies_us)
        if self.change is not None and call >= self.change[0]:
            latencies[self.change[1]] = self.change[2]
        if self.bimodal is not None:
            arm, fast, slow, share = self.bimodal
            latencies[arm] = slow if draw.random() < share else fast
        if self.spike is not None and call == self.spike[0]:
            latencies[self.spike[1]] = self.spike[2]
        return latencies


@dataclass
class Trial:
    """What one run of a scenario did, call by call."""

    ran: list[ar.Backend]  # side channel: the arm whose kernel ran
    chosen: list[ar.Backend]  # the runtime's decision, from its selection counters
    reasons: list[ar.Reason]
    set_us: list[float]  # set latency of the arm that ran
    best_us: list[float]  # set latency of the best arm at that call
    wall_ns: int  # sum of the measured durations of rt.run
    ran_other: int  # calls whose kernel was not the arm the runtime counted
    decide_disagreed: int  # calls where rt.decide() just before named another arm or reason

    @property
    def regret_pct(self) -> float:
        best = sum(self.best_us)
        return 100.0 * (sum(self.set_us) - best) / best

    def reason_counts(self) -> Counter[str]:
        return Counter(r.value for r in self.reasons)


def make_runtime(latencies: Latencies, ran: list[ar.Backend]) -> ar.AdaptiveRuntime:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(), builtin_ops=False,
                            devices=DeviceProbe(gpu=True))
    op = rt.register(OP, size=lambda *_args: SIZE, kind="vector")

    def arm(backend: ar.Backend) -> Callable[[], None]:
        def kernel() -> None:
            ran.append(backend)  # side channel: which arm really ran
            spin(latencies[backend])
        return kernel

    for backend in (GPU, SIMD, SCALAR):
        op.add_implementation(backend, arm(backend))
    return rt


def run_trial(scenario: Scenario, record: str | None = None) -> Trial:
    latencies = dict(scenario.latencies_us)  # the busy-wait kernels read this, live
    draw = random.Random(0)
    ran: list[ar.Backend] = []
    rt = make_runtime(latencies, ran)
    recorder = rt.record_calls(record) if record is not None else None
    run, decide, counts, timer = rt.run, rt.decide, rt.selection_counts, time.perf_counter_ns
    trial = Trial(ran, [], [], [], [], 0, 0, 0)
    before: dict[SelectionKey, int] = {}
    for i in range(CALLS):
        latencies.update(scenario.at(i, draw))
        predicted = decide(OP, SIZE)
        start = timer()
        run(OP)
        trial.wall_ns += timer() - start
        after = counts()
        (key,) = [k for k, n in after.items() if n != before.get(k, 0)]
        assert after[key] == before.get(key, 0) + 1, "one call, one selection"
        before = after
        trial.chosen.append(key.backend)
        trial.reasons.append(key.reason)
        trial.ran_other += ran[-1] is not key.backend
        trial.decide_disagreed += (predicted.backend, predicted.reason) != (key.backend,
                                                                             key.reason)
        trial.set_us.append(latencies[ran[-1]])
        expected = scenario.expected(i)
        trial.best_us.append(latencies[min(expected, key=expected.__getitem__)])
    assert len(ran) == CALLS, "a call ran no arm or more than one (fallback?)"
    if recorder is not None:
        recorder.close()
    return trial


def replay_rows(scenario: Scenario, path: str) -> list[list[object]]:
    """The default policy configuration and ``REPLAYED`` run offline over a recording."""
    calls = read_calls(path)
    rows: list[list[object]] = []
    for name in ("default", *REPLAYED):
        result = replay(calls, parse_config("" if name == "default" else name))
        if name == "default":
            rows.append([scenario.name, "(as recorded)", f"{result.recorded_regret:+.2%}",
                         "", ""])
        rows.append([scenario.name, name, f"{result.regret:+.2%}", result.switches,
                     f"{result.exploration_share:.2%}"])
    return rows


def oracle_wall_ns(best_us: list[float]) -> int:
    """Measured time of calling the best arm directly, with no runtime, for the same calls."""
    start = time.perf_counter_ns()
    for us in best_us:
        spin(us)
    return time.perf_counter_ns() - start


def exploits(trial: Trial, start: int = 0) -> list[tuple[int, ar.Backend]]:
    return [(i, trial.chosen[i]) for i in range(start, len(trial.reasons))
            if trial.reasons[i] is ar.Reason.EXPLOIT]


def calls_to_switch(trial: Trial, change_at: int, new_best: ar.Backend) -> int | None:
    """Calls after ``change_at`` before the first exploit from which every exploit is
    ``new_best``; ``None`` if the runtime never settles on it."""
    settled: int | None = None
    for i, backend in exploits(trial, change_at):
        if backend is new_best:
            if settled is None:
                settled = i
        else:
            settled = None
    return None if settled is None else settled - change_at


def committed_flips(trial: Trial) -> int:
    """Changes of the exploited arm after the first commit."""
    arms = [b for _, b in exploits(trial)]
    return sum(1 for prev, cur in itertools.pairwise(arms) if cur is not prev)


def summary(values: list[float], fmt: str) -> str:
    return f"worst {fmt.format(max(values))} (median {fmt.format(statistics.median(values))})"


def main() -> None:
    half = CALLS // 2
    stationary = Scenario("stationary", {GPU: 100.0, SIMD: 150.0, SCALAR: 300.0})
    slowdown = Scenario("slowdown", {GPU: 100.0, SIMD: 150.0, SCALAR: 300.0},
                        change=(half, GPU, 500.0))
    near_tie = Scenario("near-tie", {GPU: 200.0, SIMD: 205.0, SCALAR: 300.0})
    wrong = Scenario("wrong heuristic", {GPU: 600.0, SIMD: 400.0, SCALAR: 120.0})
    slowdown_3x = Scenario("3x slowdown", {GPU: 100.0, SIMD: 150.0, SCALAR: 300.0},
                           change=(half, GPU, 300.0))
    spike = Scenario("spike", {GPU: 100.0, SIMD: 150.0, SCALAR: 300.0},
                     spike=(half, GPU, 2000.0))
    bimodal = Scenario("bimodal", {GPU: 60.0, SIMD: 150.0, SCALAR: 300.0},
                       bimodal=(GPU, 60.0, 250.0, 0.25))
    scenarios = [stationary, slowdown, near_tie, wrong, slowdown_3x, spike, bimodal]

    started = time.perf_counter()
    folder = tempfile.mkdtemp(prefix="policy_quality.")
    recorded = {s.name: os.path.join(folder, f"{s.name}.jsonl") for s in scenarios}
    trials = {s.name: [run_trial(s, recorded[s.name] if i == 0 else None)
                       for i in range(TRIALS)] for s in scenarios}
    oracle = {name: [oracle_wall_ns(t.best_us) for t in ts] for name, ts in trials.items()}
    elapsed_s = time.perf_counter() - started

    rows: list[list[object]] = []
    for s in scenarios:
        regrets = [t.regret_pct for t in trials[s.name]]
        regret_target = WRONG_HEURISTIC_REGRET_TARGET_PCT if s is wrong else REGRET_TARGET_PCT
        rows.append([s.name, "regret vs best arm in hindsight", summary(regrets, "{:.2f} %"),
                     f"<= {regret_target:g} %", verdict(max(regrets) <= regret_target)])
        if s is wrong:
            firsts = [float(t.ran.index(SCALAR) + 1) if SCALAR in t.ran else math.inf
                      for t in trials[s.name]]
            rows.append([s.name, "call at which the best arm (scalar) first runs",
                         summary(firsts, "{:.0f}"), f"<= {FIRST_TIMED_TARGET}",
                         verdict(max(firsts) <= FIRST_TIMED_TARGET)])
        if s.change is not None:
            change_at = s.change[0]
            after = {**s.latencies_us, s.change[1]: s.change[2]}
            new_best = min(after, key=after.__getitem__)
            switches = [calls_to_switch(t, change_at, new_best) for t in trials[s.name]]
            limit = SWITCH_CALLS_3X_TARGET if s is slowdown_3x else SWITCH_CALLS_TARGET
            ok = all(n is not None and n <= limit for n in switches)
            measured = ("never settles" if any(n is None for n in switches)
                        else summary([float(n) for n in switches if n is not None], "{:.0f}"))
            rows.append([s.name, f"calls to switch to {new_best.value} after slowdown",
                         measured, f"<= {limit}", verdict(ok)])
        if s in (near_tie, spike, bimodal):
            flips = [float(committed_flips(t)) for t in trials[s.name]]
            limit = FLIPS_TARGET if s is near_tie else 0
            rows.append([s.name, "switches of committed arm after first commit",
                         summary(flips, "{:.0f}"), f"<= {limit}",
                         verdict(max(flips) <= limit)])
    print_table(f"policy quality ({TRIALS} trials x {CALLS} calls per scenario, default "
                f"RuntimeConfig; GPU arm = test double via DeviceProbe(gpu=True), no real GPU)",
                ["scenario", "metric", "measured", "target", "verdict"], rows)

    print("\nset latencies (us): "
          + "; ".join(f"{s.name}: " + ", ".join(f"{b.value} {us:g}"
                                                for b, us in s.latencies_us.items())
                      + (f", {s.change[1].value} -> {s.change[2]:g} at call {s.change[0]}"
                         if s.change else "")
                      + (f", {s.spike[1].value} {s.spike[2]:g} at call {s.spike[0]} only"
                         if s.spike else "")
                      + (f", {s.bimodal[0].value} {s.bimodal[1]:g} or {s.bimodal[2]:g} "
                         f"({s.bimodal[3]:.0%} of calls)" if s.bimodal else "")
                      for s in scenarios))
    print("measured wall time of rt.run calls vs oracle (best arm called directly), "
          "summed over trials:")
    for s in scenarios:
        wall = sum(t.wall_ns for t in trials[s.name]) / 1e6
        best = sum(oracle[s.name]) / 1e6
        reasons = sum((t.reason_counts() for t in trials[s.name]), Counter())
        ran_other = sum(t.ran_other for t in trials[s.name])
        disagreed = sum(t.decide_disagreed for t in trials[s.name])
        calls = CALLS * TRIALS
        print(f"  {s.name:<10} runtime {wall:8.1f} ms, oracle {best:8.1f} ms "
              f"({100.0 * (wall - best) / best:+.2f} %, "
              f"{1000.0 * (wall - best) / calls:+.1f} us/call); decisions: "
              + ", ".join(f"{r} {n}" for r, n in sorted(reasons.items()))
              + (f"; {ran_other} calls ran another arm than counted" if ran_other else "")
              + (f"; rt.decide() just before disagreed with {disagreed} calls" if disagreed
                 else ""))
        print(f"  {'':<10} per trial: regret "
              + " ".join(f"{t.regret_pct:.2f}%" for t in trials[s.name])
              + "; committed-arm switches "
              + " ".join(str(committed_flips(t)) for t in trials[s.name]))
    print_table("policy replayed offline over each scenario's first trial, recorded "
                "(adaptive_runtime.offline.replay: regret vs the hindsight oracle of the measured "
                "timings)", ["scenario", "policy", "regret", "switches", "exploration"],
                [row for s in scenarios for row in replay_rows(s, recorded[s.name])])
    print(f"total benchmark time {elapsed_s:.1f} s")


if __name__ == "__main__":
    main()
