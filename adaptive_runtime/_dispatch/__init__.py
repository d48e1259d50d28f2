"""The hot path of one call: select → execute → measure → learn → (trace), split by job.

Fast path (a converged key, a call not chosen for timing; ``fastpath``): two dict lookups, the
operation's ``size_of`` (and its input-family classifier, where it has one: calls of another
family — torch tensors, JAX arrays, inputs already on the GPU — go to the operation's twin for
that family), ``keys.unchecked_bucket`` (``int.bit_length``) and one ``next()`` on the key's
ticket iterator, then the kernel. No lock, no clock read, no allocation. ``next()`` on it is a
single C call, so concurrent threads each get a distinct ticket and no call goes uncounted
(see ``entry.Entry``).

A ticket ``t`` with ``t & mask == 0`` (every call, for a key still being explored) is a timed
call (``timed``): it runs the arm decided for it in advance between two timer reads
(``attempt``, which also checks its result: ``checks``), then takes the lock once to count
itself, feed the hot-path rate, learn from the timing and decide the key's next timed call
(``settle``, through the policy's one learning loop, ``policy.Learner``: following the
exploration plan when there is one, else asking the policy), and point the fast path at the
committed arm, timed 1-in-N (``period``) — N set by what learning from a timing was measured
to cost (a third timer read, after the lock). A failed arm hands the call to the
next (``fallback``); what a call did goes to the telemetry sinks (``emission``).

The modules, one job each: ``core`` (what the parts share: collaborators, settings, the
lock), ``entry`` (a key's fast-path state, the route table's types), ``fastpath`` (routes,
family twins, the call), ``timed`` (a timed call), ``attempt`` (one timed run of an arm),
``settle`` (after a timed call: counts, learning, the next decision), ``period`` (the fast
path's arm and measurement period), ``call_site`` (routes kept per input signature),
``profiling`` (profiler ranges), ``watch`` (a slow key's watched kernel), ``candidates`` (which
arms a call may run on), ``fallback`` (fallback and quarantine), ``checks`` (wrong results),
``counts`` (counters and the label cap), ``emission`` (telemetry), ``trueno`` (the
Trueno-style API), ``dispatcher`` (the facade that wires them).
"""

from .counts import MAX_SELECT_LABELS, OTHER_LABEL, RETIRED_ENTRIES
from .dispatcher import Dispatcher

__all__ = ["MAX_SELECT_LABELS", "OTHER_LABEL", "RETIRED_ENTRIES", "Dispatcher"]
