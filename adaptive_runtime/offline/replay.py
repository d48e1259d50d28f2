"""Offline replay: a policy configuration run over recorded per-call timings.

A user tunes the policy for a workload without running the workload again: record one run's
timings, then replay any :class:`~adaptive_runtime.policy.PolicyConfig` over them and compare
its regret against the hindsight oracle, its switches and its exploration share (off-policy
evaluation in the style of the Open Bandit Pipeline).

Where the timings come from:

- :func:`record_calls` (or ``rt.record_calls(path)``): the runtime writes every timed call —
  operation, size, arm, ``duration_us``, the runtime clock's ``time_s``, and ``calls``, how
  many calls the timing stands for (a converged key is timed 1-in-N: the calls in between ran
  the same arm untimed) — as JSON lines, at most ``max_calls`` of them (documented bound).
- :func:`calls_from_telemetry`: the embedded telemetry files (``traces.jsonl``) the runtime
  writes without a collector: each ``adaptive.execute`` span with its ``adaptive.select``
  span's size and sampling weight. Only traced calls are there (every exploring one, a
  weighted sample of the rest), so the recorder's file is the better source.

How a replay answers the arm the replayed policy picks. Replay needs a timing of that arm on
that key, and the log holds only the arms the recording run tried. So:

- an arm with timings on the key answers with one of them: by default (``pick="nearest"``)
  the one recorded nearest in time before the replayed call (the first one after it when there
  is none before), so a slowdown in the log is met at the time it happened; ``pick="cycle"``
  takes the arm's timings in turn instead;
- an arm the log has no timing of on a key is not a candidate there: the replay cannot say
  what it would have cost. Such (key, arm) pairs are counted (``unevaluable_arms``) and listed,
  and the result is read as "among the arms the log can evaluate".

The replayed policy times every call it is given (the log's timed calls, in their order), so
its decision counts — re-check intervals, stale estimates — advance as the runtime's do. The
oracle per key is the arm with the lowest mean timing over the key's calls (weighted by
``calls``), each call answered as a replay answers it (``pick``), so an arm that slowed down
and was timed rarely after counts at its later timings too; regret is the replayed cost over
the oracle's cost, minus one (negative where switching arms beats every single arm).

A limit worth knowing: an arm timed a few times shows few of the machine's stalls, which the
committed arm's many timings include; on a noisy machine that raises every configuration's
regret alike, so compare the configurations with each other and with the recorded run's
regret, printed beside them.
"""

from __future__ import annotations

import bisect
import dataclasses
import difflib
import json
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backend import Backend, Choice, choice_of, choice_order, infer_kind, parse_choice
from ..decision import Reason
from ..history import HistoryStore, KeyHistory
from ..history.recording import CALLS_FORMAT, DEFAULT_MAX_CALLS, CallRecorder
from ..keys import size_bucket
from ..policy import Learner, Policy, PolicyConfig, heuristic_order

__all__ = ["CALLS_FORMAT", "DEFAULT_MAX_CALLS", "CallRecorder", "CallTiming", "KeyReplay",
           "ReplayResult", "calls_from_telemetry", "load_calls", "parse_config", "read_calls",
           "replay"]

@dataclass(frozen=True, slots=True)
class CallTiming:
    """One recorded timed call: ``calls`` is how many calls it stands for (>= 1)."""

    operation: str
    size: int
    arm: Choice
    duration_us: float
    time_s: float
    calls: int = 1


# ------------------------------------------------------------------ reading recorded calls


def read_calls(path: str | os.PathLike[str]) -> list[CallTiming]:
    """The calls of a :class:`CallRecorder` file; ``ValueError`` naming the line when one is
    malformed (a last line cut short by a crash is skipped)."""
    out = []
    name = os.fspath(path)
    with open(name, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                if not line.endswith("\n"):
                    break  # (a write in progress, or torn by a crash)
                raise ValueError(f"{name}:{number}: not a JSON line") from None
            if number == 1 and isinstance(row, dict) and "format" in row:
                if row["format"] != CALLS_FORMAT:
                    raise ValueError(f"{name}: format {row['format']!r}, not {CALLS_FORMAT!r}")
                continue
            try:
                out.append(_call_from_json(row))
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{name}:{number}: not a recorded call ({exc})") from None
    return out


def _call_from_json(row: Mapping[str, Any]) -> CallTiming:
    duration_us = float(row["duration_us"])
    calls = int(row.get("calls", 1))
    if not (math.isfinite(duration_us) and duration_us >= 0.0) or calls < 1:
        raise ValueError("duration_us must be a finite time >= 0 and calls >= 1")
    return CallTiming(str(row["operation"]), int(row["size"]), parse_choice(row["arm"]),
                      duration_us, float(row["time_s"]), calls)


def calls_from_telemetry(directory: str | os.PathLike[str]) -> list[CallTiming]:
    """The traced calls in a telemetry folder's ``traces.jsonl`` (and its rotated backup):
    each successful ``adaptive.execute`` span, with the size and sampling weight of its
    ``adaptive.select`` span (``calls``: the calls the span stands for, rounded)."""
    from .report.otlp_files import key_values, request_lines, trace_files

    out = []
    for path in trace_files(directory):
        for _size, tree, _where in request_lines(path):
            if tree is not None:
                out.extend(_executes(tree, key_values))
    out.sort(key=lambda c: c.time_s)
    return out


def _executes(tree: Mapping[str, Any], attributes: Any) -> Iterator[CallTiming]:
    for resource_spans in tree.get("resourceSpans", ()):
        for scope in resource_spans.get("scopeSpans", ()):
            # (a call's select span comes right before its execute span, in one trace)
            selects: dict[tuple[str, str], Mapping[str, Any]] = {}
            for span in scope.get("spans", ()):
                name = str(span.get("name", ""))
                a = attributes(span.get("attributes", ()))
                op = str(a.get("adaptive.operation", ""))
                trace = str(span.get("traceId", ""))
                if name.startswith("adaptive.select "):
                    selects[(trace, op)] = a
                elif name.startswith("adaptive.execute ") and "error.type" not in a:
                    select = selects.pop((trace, op), None)
                    if select is None or "adaptive.duration_us" not in a:
                        continue
                    weight = float(select.get("adaptive.sampling.weight", 1.0))
                    arm = Backend.parse(a["adaptive.backend"])
                    yield CallTiming(op, int(select["adaptive.input_size"]),
                                     choice_of(arm, str(a.get("adaptive.variant", ""))),
                                     float(a["adaptive.duration_us"]),
                                     int(span["startTimeUnixNano"]) / 1e9,
                                     max(1, round(weight)))


# ------------------------------------------------------------------ the replay


@dataclass(frozen=True, slots=True)
class KeyReplay:
    """The replay of one (operation, size bucket)."""

    operation: str
    size_bucket: int
    calls: int  # calls the key's timings stand for
    cost_us: float  # what the replayed policy's choices cost
    recorded_us: float  # what the recorded run's choices cost
    oracle: Choice  # the arm with the lowest mean recorded timing
    oracle_us: float  # calls x that mean
    switches: int  # changes of the committed arm after the first commitment
    exploring_calls: int  # calls not run as a plain exploit
    unevaluable_arms: tuple[Choice, ...]  # arms seen on the operation, never on this key

    @property
    def regret(self) -> float:
        """Cost over the oracle's, minus one (0.02: 2 % slower than the oracle)."""
        return self.cost_us / self.oracle_us - 1.0 if self.oracle_us > 0 else 0.0


@dataclass(frozen=True)
class ReplayResult:
    """A policy configuration replayed over recorded calls, key by key and in total."""

    config: PolicyConfig
    keys: tuple[KeyReplay, ...]
    reasons: Mapping[Reason, int] = field(default_factory=dict)  # decisions by reason

    @property
    def calls(self) -> int:
        return sum(k.calls for k in self.keys)

    @property
    def cost_us(self) -> float:
        return sum(k.cost_us for k in self.keys)

    @property
    def oracle_us(self) -> float:
        return sum(k.oracle_us for k in self.keys)

    @property
    def recorded_us(self) -> float:
        return sum(k.recorded_us for k in self.keys)

    @property
    def regret(self) -> float:
        """Total cost over the hindsight oracle's, minus one."""
        oracle = self.oracle_us
        return self.cost_us / oracle - 1.0 if oracle > 0 else 0.0

    @property
    def recorded_regret(self) -> float:
        """The recorded run's own regret (what the policy that ran did)."""
        oracle = self.oracle_us
        return self.recorded_us / oracle - 1.0 if oracle > 0 else 0.0

    @property
    def switches(self) -> int:
        return sum(k.switches for k in self.keys)

    @property
    def exploration_share(self) -> float:
        """Share of the calls not run as a plain exploit (heuristic, explore, re-check,
        drift)."""
        calls = self.calls
        return sum(k.exploring_calls for k in self.keys) / calls if calls else 0.0

    @property
    def unevaluable_arms(self) -> int:
        """(key, arm) pairs left out: the arm ran on the operation, never on the key."""
        return sum(len(k.unevaluable_arms) for k in self.keys)


class _Timings:
    """The recorded timings of one (key, arm), in time order, answered by ``pick``."""

    __slots__ = ("durations", "next", "times")

    def __init__(self) -> None:
        self.times: list[float] = []
        self.durations: list[float] = []
        self.next = 0

    def answer(self, time_s: float, pick: str) -> float:
        if pick == "cycle":
            duration = self.durations[self.next % len(self.durations)]
            self.next += 1
            return duration
        i = bisect.bisect_right(self.times, time_s)
        return self.durations[i - 1 if i else 0]


class _KeyRun:
    """Per-key bookkeeping of one replay."""

    __slots__ = ("arms", "calls", "candidates", "cost_us", "exploring", "key", "last_exploit",
                 "means", "recorded_us", "switches", "timings", "unevaluable")

    def __init__(self, timings: dict[Choice, _Timings], means: dict[Choice, float],
                 candidates: tuple[Choice, ...], unevaluable: tuple[Choice, ...]) -> None:
        self.timings = timings
        self.means = means
        self.candidates = candidates
        self.unevaluable = unevaluable
        self.key: KeyHistory | None = None
        self.calls = self.exploring = self.switches = 0
        self.cost_us = self.recorded_us = 0.0
        self.last_exploit: Choice | None = None


def replay(calls: Iterable[CallTiming], config: PolicyConfig | None = None, *,
           pick: str = "nearest") -> ReplayResult:
    """Run :class:`~adaptive_runtime.policy.Policy` with ``config`` (default: the default
    configuration) over recorded ``calls`` and measure it against the hindsight oracle (see
    the module docstring for how an arm the policy picks is answered, and which arms a key
    cannot evaluate). ``pick``: ``"nearest"`` or ``"cycle"``."""
    if pick not in ("nearest", "cycle"):
        raise ValueError(f"pick must be 'nearest' or 'cycle', got {pick!r}")
    ordered = sorted(calls, key=lambda c: c.time_s)
    runs = _key_runs(ordered, pick)
    # (the runtime's own learning loop, over a history of the replay's own)
    learner = Learner(Policy(config), HistoryStore(max(len(runs), 1) + 1))
    reasons: dict[Reason, int] = defaultdict(int)
    for call in ordered:
        run = runs[(call.operation, size_bucket(call.size))]
        reasons[_replay_call(learner, run, call, pick)] += 1
    keys = tuple(_result(op, bucket, run) for (op, bucket), run in sorted(runs.items()))
    return ReplayResult(learner.policy.config, keys, dict(reasons))


def _key_runs(ordered: Sequence[CallTiming], pick: str) -> dict[tuple[str, int], _KeyRun]:
    """Each key's recorded timings per arm, the oracle means, and its candidates: the arms
    it has timings of, in the cold-start order of its first call's size."""
    timings: dict[tuple[str, int], dict[Choice, _Timings]] = defaultdict(dict)
    calls: dict[tuple[str, int], list[CallTiming]] = defaultdict(list)
    arms_of_op: dict[str, set[Choice]] = defaultdict(set)
    for c in ordered:
        key = (c.operation, size_bucket(c.size))
        calls[key].append(c)
        t = timings[key].setdefault(c.arm, _Timings())
        t.times.append(c.time_s)
        t.durations.append(c.duration_us)
        arms_of_op[c.operation].add(c.arm)
    runs = {}
    for key, per_arm in timings.items():
        means = {arm: _mean_us(t, calls[key], arm, pick) for arm, t in per_arm.items()}
        first_size = calls[key][0].size
        candidates = heuristic_order(infer_kind(key[0]), first_size, tuple(per_arm))
        missing = tuple(sorted((b for b in arms_of_op[key[0]] if b not in per_arm),
                               key=choice_order))
        runs[key] = _KeyRun(per_arm, means, candidates, missing)
    return runs


def _mean_us(timings: _Timings, calls: Sequence[CallTiming], arm: Choice, pick: str) -> float:
    """What ``arm`` costs a call of the key on average, in hindsight. ``"nearest"``: over
    every call of the key, each answered as a replay answers it (the arm's timing recorded
    nearest before the call) — the log samples the arms unevenly over time (an arm that
    slowed down is timed rarely after), so the mean of its recorded timings alone would
    weigh its good times more. ``"cycle"``: the mean of its recorded timings."""
    if pick == "nearest":
        total = sum(c.calls * timings.answer(c.time_s, pick) for c in calls)
        return total / sum(c.calls for c in calls)
    mine = [c for c in calls if c.arm is arm]
    return sum(c.duration_us * c.calls for c in mine) / sum(c.calls for c in mine)


def _replay_call(learner: Learner, run: _KeyRun, call: CallTiming, pick: str) -> Reason:
    """One recorded call replayed: the learner's decision, answered from the log, learned."""
    key = run.key
    if key is None:  # the key's first call (as the runtime's: no plan followed)
        key = run.key = learner.history.key(call.operation, size_bucket(call.size))
        state = learner.start(key, None)  # (no implementation floors recorded)
        fast_arm = None
        decision = learner.decide(key, state, run.candidates, call.time_s)
    else:
        state = learner.state_of(key)
        # (the calls before this timed one, untimed, ran the arm committed to until now)
        fast_arm = state.incumbent
        decision, _how = learner.next(key, state, run.candidates, call.time_s)
    arm = decision.choice
    duration_us = run.timings[arm].answer(call.time_s, pick)
    rest = call.calls - 1
    rest_us = 0.0
    if rest:
        rest_us = run.timings[fast_arm or arm].answer(call.time_s, pick)
    learner.learn(key, state, arm, duration_us, call.size, decision, call.calls)
    run.calls += call.calls
    run.cost_us += duration_us + rest * rest_us
    run.recorded_us += call.duration_us * call.calls
    if decision.reason is Reason.EXPLOIT:
        if run.last_exploit is not None and arm is not run.last_exploit:
            run.switches += 1
        run.last_exploit = arm
    else:
        run.exploring += 1
    return decision.reason


def _result(operation: str, bucket: int, run: _KeyRun) -> KeyReplay:
    oracle = min(run.means, key=lambda b: (run.means[b], b.value))
    return KeyReplay(operation, bucket, run.calls, run.cost_us, run.recorded_us, oracle,
                     run.means[oracle] * run.calls, run.switches, run.exploring,
                     run.unevaluable)


def load_calls(source: str | os.PathLike[str]) -> list[CallTiming]:
    """Recorded calls from ``source``: a telemetry folder (its ``traces.jsonl``) or a
    :class:`CallRecorder` file."""
    return calls_from_telemetry(source) if Path(source).is_dir() else read_calls(source)


def parse_config(text: str, base: PolicyConfig | None = None) -> PolicyConfig:
    """A :class:`~adaptive_runtime.policy.PolicyConfig` from ``"knob=value,knob=value"``
    (e.g. ``"switch_margin=0.1,min_samples_per_arm=5"``) over ``base``; ``ValueError`` naming
    the knob (and the knobs there are) when one is unknown, its value not a number of its type
    or out of the knob's range (:class:`~adaptive_runtime.errors.ConfigError`, a ``ValueError``)."""
    config = base or PolicyConfig()
    knobs = {f.name: f for f in dataclasses.fields(PolicyConfig)}
    changes: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in knobs:
            close = difflib.get_close_matches(name, knobs, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ValueError(f"{item!r} is not KNOB=VALUE with a policy knob ({hint}knobs: "
                             f"{', '.join(sorted(knobs))})")
        integer = knobs[name].type in (int, "int")
        try:
            number = int(value) if integer else float(value)
        except ValueError:
            what = "an integer" if integer else "a number"
            raise ValueError(f"policy knob {name} takes {what}, got {value.strip()!r}") from None
        changes[name] = number
    return dataclasses.replace(config, **changes)  # (PolicyConfig checks each knob's range)
