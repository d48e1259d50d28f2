"""Is an arm's result wrong: the shape/dtype check of every timed call, validation mode's value
comparison, and the quarantine of an arm found wrong (see ``results``)."""

from __future__ import annotations

import logging
from typing import Any

from ..backend import Choice
from ..errors import ResultMismatchError
from ..history import KeyHistory
from ..operations import Operation
from .core import Core
from .entry import Entry
from .period import Periods
from .results import (
    compare_values,
    describe_signature,
    input_signature,
    result_signature,
    signatures_agree,
)
from .settle import Settler

_log = logging.getLogger(__name__.rpartition(".")[0])

# Input signatures (argument shapes and dtypes) per key whose expected result signature is
# kept for the wrong-shape check (see ResultChecks.check); calls of further signatures on the
# key are not checked.
_MAX_SIGNATURES = 16


class ResultChecks:
    """Checks of timed calls' results; an arm found wrong is quarantined like one that
    raised."""

    def __init__(self, core: Core, settler: Settler, periods: Periods) -> None:
        self._core = core
        self._settler = settler
        self._periods = periods
        self._reported: set[tuple[str, Choice]] = set()  # wrong results logged (once each)

    def check(self, op: Operation, entry: Entry, backend: Choice, args: tuple[Any, ...],
              result: Any, ticket: int) -> ResultMismatchError | None:
        """The error of a wrong result of ``backend`` on a timed call, else ``None``.

        Every timed call (never a fast-path one) compares its result's shape and dtype with
        what the first arm to answer inputs of the same signature (shapes, dtypes, and the
        values of plain integer and string arguments: see ``input_signature``) on this key
        returned: a few attribute reads and a dict lookup, inside the measured cost of a
        timed call that sets the fast path's timing period. In validation mode a sample of
        calls is also re-run on another arm and the values compared (:meth:`_validate`).
        """
        try:
            in_sig = input_signature(args)
            seen = entry.expected.get(in_sig)
        except Exception:  # a shape or dtype that cannot be read or hashed: not checked
            in_sig = seen = None
        if seen is not None:
            # The usual case inline (no call, no signature built): the very dtype object
            # the first answer had and an equal shape, which signatures_agree() accepts;
            # anything else goes through it in full.
            expected_shape, expected_dtype = seen[0]
            try:
                agrees = (getattr(result, "dtype", None) is expected_dtype
                          and expected_shape == getattr(result, "shape", None))
            except Exception:  # (an odd result: signatures_agree() copes with it)
                agrees = False
            if not agrees:
                out_sig = result_signature(result)
                if not signatures_agree(seen[0], out_sig):
                    wrong = self._settle_signatures(op, entry, backend, args, in_sig,
                                                    out_sig, seen)
                    if wrong is not None:
                        return wrong
        elif in_sig is not None and len(entry.expected) < _MAX_SIGNATURES:
            entry.expected[in_sig] = (result_signature(result), backend)
        mask = self._core.validate_mask
        if mask >= 0 and ((ticket >= 0 and not ticket & mask)
                          or self._on_trial(entry.key, backend)):
            return self._validate(op, entry, backend, args, result)
        return None

    def _on_trial(self, key: KeyHistory, backend: Choice) -> bool:
        """Whether ``backend`` is still being tried on ``key`` (its first timings in this
        epoch, or its first call back from a quarantine): validation mode checks each such
        call, so an arm that comes back wrong is not committed to on its word."""
        stats = key.arms.get(backend)
        return (stats is None or stats.epoch_samples < self._core.min_samples
                or stats.consecutive_failures > 0)

    def _settle_signatures(self, op: Operation, entry: Entry, ran: Choice,
                           args: tuple[Any, ...], in_sig: Any, out_sig: tuple[Any, Any],
                           seen: tuple[tuple[Any, Any], Choice]) -> ResultMismatchError | None:
        """``ran`` answered with another signature than ``seen`` (the first answer to such
        inputs): a third arm, where one can run, says which is wrong; else the first answer
        stands (two arms alone cannot tell)."""
        ref_sig, ref_arm = seen
        third = self._witness(entry, (ran, ref_arm))
        if third is not None:
            ok, other = self._run_aside(entry, third, args)
            other_sig = result_signature(other)
            if ok and signatures_agree(other_sig, out_sig) and not signatures_agree(other_sig,
                                                                                   ref_sig):
                # the first answer was the wrong one: what ``ran`` returned is expected now
                # (list() copies in one step: another thread may add to the dict meanwhile)
                kept = [(k, v) for k, v in list(entry.expected.items()) if v[1] is not ref_arm]
                entry.expected = dict(kept)
                entry.expected[in_sig] = (out_sig, ran)
                if ref_arm is not ran:
                    self._quarantine(entry, ResultMismatchError(
                        op.name, ref_arm, ran,
                        f"{describe_signature(ref_sig)} where the {ran.value} and "
                        f"{third.value} arms return {describe_signature(out_sig)}"))
                return None
        return self._reported_error(ResultMismatchError(
            op.name, ran, ref_arm, f"{describe_signature(out_sig)} where the {ref_arm.value} "
            f"arm returned {describe_signature(ref_sig)} for inputs of the same shapes, dtypes "
            "and integer arguments"))

    def _validate(self, op: Operation, entry: Entry, ran: Choice, args: tuple[Any, ...],
                  result: Any) -> ResultMismatchError | None:
        """Validation mode: re-run this call on another arm and compare the values. On a
        mismatch, the side with NaN the other has none of is wrong; otherwise a third arm
        decides where one can run, else the arm being validated is taken to be wrong."""
        ref = self._witness(entry, (ran,))
        if ref is None:
            return None
        ok, expected = self._run_aside(entry, ref, args)
        if not ok:
            return None  # (the reference's own failures are found when it is chosen)
        mismatch = compare_values(result, expected)
        if mismatch is None:
            return None
        suspect = mismatch.suspect
        if not suspect:
            third = self._witness(entry, (ran, ref))
            ok, other = self._run_aside(entry, third, args) if third else (False, None)
            suspect = ("reference" if ok and compare_values(result, other) is None
                       and compare_values(expected, other) is not None else "result")
        if suspect == "reference":
            reverse = compare_values(expected, result)
            self._quarantine(entry, ResultMismatchError(
                op.name, ref, ran, reverse.detail if reverse else mismatch.detail))
            return None
        return self._reported_error(ResultMismatchError(op.name, ran, ref, mismatch.detail))

    def _witness(self, entry: Entry, exclude: tuple[Choice, ...]) -> Choice | None:
        """The arm to compare a result with: the fastest known candidate not in ``exclude``
        and not quarantined, or ``None``."""
        key = entry.key
        core = self._core
        with core.lock:
            now = core.clock()
            barred = {b: None for b in entry.candidates
                      if b in exclude or b not in entry.impls
                      or (b in key.arms and key.arms[b].quarantined_until_s > now)}
            return core.policy.fallback(key, entry.candidates, barred)

    @staticmethod
    def _run_aside(entry: Entry, backend: Choice, args: tuple[Any, ...]) -> tuple[bool, Any]:
        """Run ``backend`` on a call's arguments to compare results: untimed, not learned from,
        its failure only means there is nothing to compare with."""
        impl = entry.impls[backend]
        try:
            if impl.sync is not None:
                impl.sync(args)
            result = impl.fn(*args)
            if impl.sync is not None:
                impl.sync(result)
        except Exception as exc:
            _log.debug("no result from %s to compare with: %r", backend.value, exc)
            return False, None
        return True, result

    def _quarantine(self, entry: Entry, error: ResultMismatchError) -> None:
        """An arm other than the one that ran this call was found wrong: count its failure
        (quarantine with back-off) as if it had raised."""
        backend: Choice = error.backend  # type: ignore[assignment]
        with self._core.lock:
            self._settler.failed(entry, backend)
            self._periods.refresh(entry, entry.key)
        self._reported_error(error)

    def _reported_error(self, error: ResultMismatchError) -> ResultMismatchError:
        """Log a wrong result, once per operation and arm (its failures are counted, its
        fallbacks counted and traced as any failure's)."""
        tag = (error.operation, error.backend)
        if tag not in self._reported:
            self._reported.add(tag)  # (bounded: registered operations x three arms)
            _log.warning("%s; the arm is quarantined with back-off (logged once per operation "
                         "and arm)", error)
        return error
