"""Default-settings programs end to end: ``configure()``, the real OTLP exporter, ``ar.ops``.

Each kind of program a user writes runs in a fresh interpreter (``configure()`` is set once per
process, and each program must start from a clean ``sys.modules``): numpy only; torch
imported late, in the middle of the loop; jax imported late; a torch ``DataLoader`` whose
forked workers run the runtime too. Each takes the default path: the standard
``OTEL_EXPORTER_OTLP_*`` variables pointing at the project's real receiver (``otlp_receiver``),
a plain ``ar.telemetry.configure(service_name=...)``, the process default runtime
(``ar.ops.*``), default settings but for a shorter ``ADAPTIVE_RUNTIME_TRACE_KEY_INTERVAL_S``
(so a key's steady-state span comes within seconds), calls well below the hot path, then
``ar.telemetry.shutdown()``.

What every program must show (issue 38): every key (operation, size bucket) the main process
ran has its commitment span and a steady-state select span after it at the receiver; nothing
admitted was lost (``ar.telemetry.stats()``); no thread died (``threading.excepthook`` never
called, no package thread caught a fault, nothing on stderr). The bug behind it: in a
numpy-only program, ``ar.ops.softmax`` imported torch inside the user's call, the span worker
read the half-imported module, raised and died, and every later span was lost silently.

Forked DataLoader workers exporting their spans once, each marked with its pid, is
``test_dataloader_workers.py``'s; here only that they arrive while the parent's loop runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import child_run
import pytest
from otlp_receiver import OtlpReceiver, ReceivedSpan
from required import require_module

# each program runs for seconds (several with torch or jax to import), as long as the tests
# the project marks slow
pytestmark = pytest.mark.slow

TIMEOUT_S = 120
# a key with no span for 3/4 of this exports an `interval` select span (default 10 s)
KEY_INTERVAL_S = 1.0
LOOP_S = 4.0  # the numpy-only and DataLoader loops (each loop's time runs after its warm-up)
BEFORE_IMPORT_S = 2.0  # the late-import loops: numpy alone, then the import,
AFTER_IMPORT_S = 3.0  # then numpy and the newly imported library's arrays
STEADY_REASONS = frozenset({"interval", "sampled", "slow"})
RE_DECIDED = frozenset({"decision", "commit"})

PROGRAM = textwrap.dedent('''
    import json, os, sys, threading, time

    # Every uncaught exception in a thread: counted, kept for the message, printed as usual.
    faults = []
    _print_as_usual = threading.excepthook

    def counting_excepthook(args):
        faults.append(f"{getattr(args.thread, 'name', '?')}: "
                      f"{args.exc_type.__name__}: {args.exc_value}")
        _print_as_usual(args)

    threading.excepthook = counting_excepthook

    import numpy as np
    import adaptive_runtime as ar

    KIND = sys.argv[1]
    LOOP_S, BEFORE_IMPORT_S, AFTER_IMPORT_S = (float(arg) for arg in sys.argv[2:5])
    WARM_ROUNDS = 20

    ar.telemetry.configure(service_name="default-program-" + KIND)

    rng = np.random.default_rng(0)
    vec = rng.standard_normal(100_000)
    rows = rng.standard_normal(2_000)
    acts = rng.standard_normal(50_000)
    mat = rng.standard_normal((96, 96))


    def numpy_ops():
        ar.ops.dot(vec, vec)
        ar.ops.softmax(rows)
        ar.ops.gelu(acts)
        ar.ops.add(acts, acts)
        ar.ops.matmul(mat, mat)


    def loop(seconds, *more_ops):
        """Every op once per round, ~3 ms apart: a few hundred calls/s per op, never hot.
        The clock starts after the first rounds, which explore each new key's arms (and pay
        for whatever an arm loads or compiles at its first call): ``seconds`` of steady
        state, however long that took."""
        for _ in range(WARM_ROUNDS):
            numpy_ops()
            for ops in more_ops:
                ops()
            time.sleep(0.003)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            numpy_ops()
            for ops in more_ops:
                ops()
            time.sleep(0.003)


    def mapping(value):
        return None if value is None else {str(k): int(n) for k, n in dict(value).items()}


    extra = {}
    if KIND == "numpy":
        loop(LOOP_S)
    elif KIND == "torch":
        loop(BEFORE_IMPORT_S)
        import torch  # late, in the middle of the loop
        t_vec, t_acts = torch.from_numpy(vec), torch.from_numpy(acts)
        t_rows = torch.from_numpy(rows)

        def torch_ops():
            ar.ops.dot(t_vec, t_vec)
            ar.ops.softmax(t_rows)
            ar.ops.add(t_acts, t_acts)

        loop(AFTER_IMPORT_S, torch_ops)
    elif KIND == "jax":
        loop(BEFORE_IMPORT_S)
        import jax  # late, in the middle of the loop
        import jax.numpy as jnp
        j_vec, j_acts, j_rows = jnp.asarray(vec), jnp.asarray(acts), jnp.asarray(rows)

        def jax_ops():
            ar.ops.dot(j_vec, j_vec)
            ar.ops.softmax(j_rows)
            ar.ops.add(j_acts, j_acts)

        loop(AFTER_IMPORT_S, jax_ops)
    elif KIND == "dataloader":
        import torch
        from torch.utils.data import DataLoader, Dataset

        class AdaptiveItems(Dataset):
            """Each item runs the runtime in the worker: a key the parent never runs (its
            first call is always traced), and one the parent learned before the fork."""

            def __len__(self):
                return 1_000_000

            def __getitem__(self, i):
                x = np.linspace(-1.0, 1.0, 3_000 + i % 7)
                ar.ops.relu(x)
                ar.ops.dot(vec, vec)
                time.sleep(0.002)
                return {"pid": os.getpid(), "parent_pid": os.getppid(),
                        "faults": len(faults)}

        loop(1.0)  # the parent learns and exports before it forks
        loader = DataLoader(AdaptiveItems(), batch_size=2, num_workers=2,
                            multiprocessing_context="fork", timeout=30,
                            collate_fn=lambda items: items)
        items = []
        end = time.monotonic() + LOOP_S
        batches = iter(loader)
        while time.monotonic() < end:
            items.extend(next(batches))
            numpy_ops()
            time.sleep(0.003)
        del batches  # (shuts the workers down; they flush their spans as they exit)
        extra = {"worker_pids": sorted({item["pid"] for item in items}),
                 "worker_parents": sorted({item["parent_pid"] for item in items}),
                 "worker_faults": max(item["faults"] for item in items)}
    else:
        raise SystemExit(f"unknown program kind {KIND!r}")

    ar.telemetry.shutdown()  # flushes every admitted span
    stats = ar.telemetry.stats()
    keys = sorted({(r.operation, r.size_bucket) for r in ar.get_runtime().history_snapshot()})
    print("RESULT " + json.dumps({
        "pid": os.getpid(),
        "excepthook_calls": len(faults), "faults": faults,
        "excepthook_still_ours": threading.excepthook is counting_excepthook,
        "spans_admitted": stats.spans_admitted, "spans_exported": stats.spans_exported,
        "spans_dropped": stats.spans_dropped, "dropped": mapping(stats.dropped),
        "spans_pending": stats.spans_pending, "balanced": stats.balanced,
        "thread_faults": mapping(stats.thread_faults),
        "threads_restarted": mapping(stats.threads_restarted),
        "keys": keys,
        "torch_imported": "torch" in sys.modules, "jax_imported": "jax" in sys.modules,
        **extra}), flush=True)
''')


class Ran(child_run.Ran):
    """A program's exit code, output and RESULT line."""

    @property
    def keys(self) -> list[tuple[str, int]]:
        return [(op, bucket) for op, bucket in self.result["keys"]]


def run_program(kind: str, receiver: OtlpReceiver, protocol: str) -> Ran:
    """Run the program ``kind`` in a fresh interpreter, exporting to ``receiver`` over
    ``protocol`` (``grpc`` or ``http/protobuf``) the way a user's environment says where
    (nothing inherited of OTEL_* / ADAPTIVE_RUNTIME_*)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "ADAPTIVE_RUNTIME_"))}
    endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
               ADAPTIVE_RUNTIME_TRACE_KEY_INTERVAL_S=str(KEY_INTERVAL_S),
               PYTHONDONTWRITEBYTECODE="1")
    args = [str(LOOP_S), str(BEFORE_IMPORT_S), str(AFTER_IMPORT_S)]
    proc = subprocess.run([sys.executable, "-c", PROGRAM, kind, *args], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    return Ran(proc)


def own_selects(spans: Iterable[ReceivedSpan]) -> dict[tuple[str, int], list[ReceivedSpan]]:
    """The main process's select spans (a forked worker's carry ``process.pid``) by key, in
    start order."""
    by_key: dict[tuple[str, int], list[ReceivedSpan]] = defaultdict(list)
    for span in spans:
        if span.name.startswith("adaptive.select ") and "process.pid" not in span.attributes:
            key = (span.attributes["adaptive.operation"], span.attributes["adaptive.size_bucket"])
            by_key[key].append(span)
    for selects in by_key.values():
        selects.sort(key=lambda s: s.start_time_unix_nano)
    return by_key


def key_problems(keys: Sequence[tuple[str, int]],
                 selects: Mapping[tuple[str, int], list[ReceivedSpan]]) -> list[str]:
    """What is missing of each key's commitment and steady-state spans."""
    problems = []
    for key in keys:
        spans = selects.get(key, [])
        reasons = [s.attributes.get("adaptive.sampling.reason") for s in spans]
        commits = [s for s in spans if s.attributes.get("adaptive.commit") is True
                   and s.attributes.get("adaptive.sampling.reason") == "commit"]
        if not commits:
            problems.append(f"{key}: no commitment span (select spans' reasons: {reasons})")
            continue
        committed_ns = commits[0].start_time_unix_nano
        # (a key stays visible after it: an interval, sampled or slow span; or, where its
        # arms are near a tie on a noisy machine and it re-decides, the spans of those
        # decisions and commitments, which are exported whatever the interval)
        steady = [s for s in spans if s.start_time_unix_nano > committed_ns
                  and (s.attributes.get("adaptive.sampling.reason") in STEADY_REASONS
                       or s.attributes.get("adaptive.sampling.reason") in RE_DECIDED)]
        if not steady:
            problems.append(f"{key}: no steady-state select span after its commitment "
                            f"(select spans' reasons: {reasons})")
    unexpected = sorted(set(selects) - set(keys))
    if unexpected:
        problems.append(f"select spans of keys the runtime never learned: {unexpected}")
    return problems


def health_problems(ran: Ran) -> list[str]:
    """Nothing lost, no thread died, nothing went wrong on stderr."""
    result = ran.result
    problems = []
    if result["excepthook_calls"] != 0:
        problems.append(f"threading.excepthook called {result['excepthook_calls']} times: "
                        f"{result['faults']}")
    if not result["excepthook_still_ours"]:
        problems.append("threading.excepthook was replaced: its count proves nothing")
    for name in ("thread_faults", "threads_restarted"):
        value = result[name]
        if value is None:
            problems.append(f"ar.telemetry.stats() has no {name}")
        elif any(value.values()):
            problems.append(f"stats().{name} = {value}")
    if result["spans_dropped"] != 0 or any(result["dropped"].values()):
        problems.append(f"spans lost: {result['spans_dropped']} ({result['dropped']})")
    if result["spans_pending"] != 0 or not result["balanced"]:
        problems.append(f"spans unaccounted for after shutdown: admitted "
                        f"{result['spans_admitted']}, exported {result['spans_exported']}, "
                        f"pending {result['spans_pending']}, balanced {result['balanced']}")
    if result["spans_exported"] == 0:
        problems.append("no span exported")
    for text in ("Exception in thread", "Traceback"):
        if text in ran.stderr:
            problems.append(f"{text!r} on stderr")
    return problems


def check_default_program(ran: Ran, receiver: OtlpReceiver, *, ops: Iterable[str],
                          absent_modules: Iterable[str] = ()) -> list[ReceivedSpan]:
    """Every check of issue 38 at once (each one failing is reported, not only the first):
    the program ran ``ops`` (operation names of ``ar.ops`` calls, ``dot@torch`` for one on
    torch tensors), never imported ``absent_modules``, lost nothing, no thread died, and every
    key it ran has its commitment and steady-state spans. Returns the spans received."""
    assert ran.returncode == 0 and ran.result, ran
    spans = receiver.spans()
    problems = health_problems(ran)
    missing_ops = sorted(set(ops) - {op for op, _ in ran.keys})
    if missing_ops:
        problems.append(f"the runtime learned no key of {missing_ops}: {ran.keys}")
    problems += key_problems(ran.keys, own_selects(spans))
    own = [s for s in spans if "process.pid" not in s.attributes]
    if len(own) != ran.result["spans_exported"]:
        problems.append(f"the receiver got {len(own)} spans of the program's own, stats() "
                        f"says {ran.result['spans_exported']} exported")
    for module in absent_modules:
        if ran.result[f"{module}_imported"]:
            problems.append(f"{module} was imported (sys.modules) by a program that never "
                            "imports it")
    assert not problems, "\n".join(problems) + f"\n{ran!r}"
    return spans


NUMPY_OPS = ("dot", "softmax", "gelu", "add", "matmul")


def test_a_numpy_only_program_exports_each_keys_spans_loses_none_and_imports_no_torch_or_jax(
        otlp_receiver: OtlpReceiver) -> None:
    ran = run_program("numpy", otlp_receiver, "http/protobuf")
    check_default_program(ran, otlp_receiver, ops=NUMPY_OPS, absent_modules=("torch", "jax"))


def test_torch_imported_mid_loop_keeps_every_keys_spans_and_loses_none(
        otlp_receiver: OtlpReceiver) -> None:
    require_module("torch", "torch")
    ran = run_program("torch", otlp_receiver, "grpc")
    check_default_program(ran, otlp_receiver,
                          ops=(*NUMPY_OPS, "dot@torch", "softmax@torch", "add@torch"),
                          absent_modules=("jax",))
    assert ran.result["torch_imported"]


def test_jax_imported_mid_loop_keeps_every_keys_spans_and_loses_none(
        otlp_receiver: OtlpReceiver) -> None:
    require_module("jax", "jax")
    ran = run_program("jax", otlp_receiver, "http/protobuf")
    check_default_program(ran, otlp_receiver,
                          ops=(*NUMPY_OPS, "dot@jax", "softmax@jax", "add@jax"))
    assert ran.result["jax_imported"]


def test_a_program_with_a_forked_dataloader_worker_keeps_every_keys_spans_and_the_workers_arrive(
        otlp_receiver: OtlpReceiver) -> None:
    require_module("torch", "torch")
    ran = run_program("dataloader", otlp_receiver, "grpc")
    spans = check_default_program(ran, otlp_receiver, ops=NUMPY_OPS, absent_modules=("jax",))
    result = ran.result
    workers = result["worker_pids"]
    assert len(workers) == 2 and result["pid"] not in workers, result
    assert result["worker_parents"] == [result["pid"]], result
    assert result["worker_faults"] == 0, "threading.excepthook was called in a worker"
    by_worker: defaultdict[int, list[ReceivedSpan]] = defaultdict(list)
    for span in spans:
        if "process.pid" in span.attributes:
            assert span.attributes["process.parent_pid"] == result["pid"], span
            by_worker[span.attributes["process.pid"]].append(span)
    assert sorted(by_worker) == workers, "a worker's spans did not arrive"
    for pid, made in by_worker.items():
        # the key only the workers run: its first call (always traced) in each worker
        relu = [s for s in made if s.name == "adaptive.select relu"]
        assert relu, f"worker {pid}: no relu select span ({sorted({s.name for s in made})})"
