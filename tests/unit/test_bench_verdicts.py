"""The benchmarks' verdicts (``benchmarks/_verdicts.py``): decided by the rounds' interval,
never by one run, and never "meets" over nothing."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from _verdicts import MANY_ROUNDS, judge, paired_ratio, rounds_to_decide  # noqa: E402


def test_ratios_are_paired_round_by_round_not_pooled() -> None:
    """Each round's ratio is taken within the round: a machine twice as slow in round 2 moves
    both modes alike and changes no ratio."""
    ratio = paired_ratio([1.0, 2.0, 1.0, 2.0, 1.0], [2.0, 4.0, 2.0, 4.0, 2.0])
    assert ratio.median == pytest.approx(0.5)
    assert ratio.low == pytest.approx(0.5) and ratio.high == pytest.approx(0.5)
    assert ratio.rounds == 5


def test_an_interval_inside_the_target_meets_and_one_beyond_it_misses() -> None:
    under = paired_ratio([0.60, 0.62, 0.65, 0.61, 0.63], [1.0] * 5)
    over = paired_ratio([0.90, 0.95, 0.92, 0.91, 0.94], [1.0] * 5)
    assert judge(under, 0.70) == "meets"
    assert judge(over, 0.70) == "MISSES"


def test_an_interval_across_the_target_is_inconclusive_and_says_how_many_rounds_decide() -> None:
    ratio = paired_ratio([0.95, 1.04, 0.99, 1.06, 0.97], [1.0] * 5)
    verdict = judge(ratio, 1.02)
    assert verdict.startswith("inconclusive (~") and verdict.endswith(" rounds)")
    assert ratio.rounds < rounds_to_decide(ratio, 1.02) <= MANY_ROUNDS


def test_a_median_on_the_target_says_no_run_here_would_decide() -> None:
    ratio = paired_ratio([0.95, 1.04, 0.99, 1.06, 0.97], [1.0] * 5)
    assert rounds_to_decide(ratio, 1.0) > MANY_ROUNDS
    assert judge(ratio, 1.0) == f"inconclusive (> {MANY_ROUNDS} rounds)"


def test_nothing_judged_is_never_a_meet() -> None:
    assert judge(paired_ratio([], []), 2.0) == "not judged"
    assert judge(paired_ratio([1.0, 1.0], [1.0, 1.0]), 2.0, judged=0) == "not judged"
    # (rounds where a mode measured nothing are left out, not read as a ratio of zero)
    assert paired_ratio([0.0, 1.0], [1.0, 1.0]).rounds == 1
