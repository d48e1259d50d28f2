"""Where adapting pays: a training loop and numpy calls beside what takes the machine's cores.

A training loop rarely has the machine to itself: DataLoader workers prepare the next batches,
a tokenizer or another job runs beside it. Which thread count, which kernel wins then is not
what wins on a quiet machine, and no fixed choice survives both. Two workloads:

- ``mlp``: the digits MLP (64-256-256-10, GELU, LayerNorm, ReLU; SGD, batch 64) trained
  ``STEPS`` steps from scikit-learn's bundled digits;
- ``numpy``: the built-ins ``sum``, ``relu``, ``softmax``, ``add`` and ``dot`` at 2^16, 2^18
  and 2^20 float64 elements, ``CALLS`` calls a key, in a fixed shuffled order per pass;

in four scenarios:

- ``quiet``: nothing else runs (the default is right here: adapting can only cost);
- ``neighbour``: a process spinning on one core the whole run (what a DataLoader worker does
  while it prepares batches);
- ``loader``: the loop takes its batches (the numpy workload: one batch per pass over its
  keys) from a real ``torch.utils.data.DataLoader(num_workers=1)`` whose dataset does
  CPU-bound work per item; the share of the run its worker was busy is printed;
- ``phases``: the neighbour stopped and started every ``PHASE_S`` seconds (SIGSTOP/SIGCONT).

Modes, each run in its own process, the modes of a scenario taking turns in a rotating order,
``ROUNDS`` rounds:

- ``mlp``: plain torch at its default threads (the baseline a user has), plain at 1 thread,
  ``adapt(model)`` on a default runtime learning from nothing, the same from a history saved
  by a quiet run, and plain again (the A/A row: the noise floor);
- ``numpy``: the static size rule (Trueno's: under 1,000 elements SCALAR, else SIMD, the
  kernel called directly, as ``decision_quality.py``), the rule with every pool at one thread
  (numba, BLAS, torch), the adaptive runtime learning from nothing and from a saved history,
  and the rule again (A/A).

Every ratio is taken within a round (a mode against its baseline of the same round), and the
verdict reads the rounds' ratios: their median with a 95 % bootstrap interval, "meets" only
when the interval is within the target (``_verdicts``). Targets (issue 40): beside the
neighbour, adaptive <= 0.70x the baseline and <= 1.05x the better of plain at one thread and
(numpy) the per-key best of the two fixed thread settings; with the loader, adaptive <= the
better fixed thread count; in phases, <= 0.90x the best fixed thread count; quiet, the adapted
loop <= 1.02x plain torch (learning included), numpy from a saved history <= 1.01x the static
rule and from nothing <= 1.03x.

Two more tables (issue 40):

- phases: after a phase change, how long each key took to switch. In the phases scenario the
  adaptive modes watch what they chose (``_learned.ChoiceWatch``): each key's committed
  choice (an arm or a variant, ``simd:numba@1``) — read right after each of its calls in the
  numpy workload, at each step in the mlp — and, in the mlp, the thread count the runtime
  holds torch at, every change stamped with ``time.monotonic()``, as the parent stamps each
  stop and start of the neighbour. A key "switches" after a change where the choice it holds
  at the next change (or the run's end) differs from the one it held at this one; the delay
  is from the change to its commitment to that choice, in seconds and in the key's calls
  (steps for torch's pool), against max(``SWITCH_CALLS`` calls, ``SWITCH_S``). A key whose
  best choice is the same in both phases needs no switch: it is counted as "no switch", not
  as a miss (and so is a switch that came only after the next change). The watch's reads
  stay in the seconds; their cost, measured after the run, is printed (~1 us a read).
- every adaptive run: its keys with at least 200 calls and, on each, the available
  candidates never timed (target: none), with candidates still left out of a key until their
  code is compiled listed apart (``_learned.untimed``).

``CONTENTION_ROUNDS``, ``CONTENTION_STEPS``, ``CONTENTION_CALLS``, ``CONTENTION_SCENARIOS``
(comma list) and ``CONTENTION_WORKLOADS`` shrink a run.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Any

from _learned import ChoiceWatch, untimed, untimed_table
from _table import print_table
from _verdicts import Ratio, judge, paired_ratio

ROUNDS = int(os.environ.get("CONTENTION_ROUNDS", "5"))
STEPS = int(os.environ.get("CONTENTION_STEPS", "600"))
CALLS = int(os.environ.get("CONTENTION_CALLS", "1000"))
SCENARIOS = tuple(os.environ.get("CONTENTION_SCENARIOS",
                                 "quiet,neighbour,loader,phases").split(","))
WORKLOADS = tuple(os.environ.get("CONTENTION_WORKLOADS", "mlp,numpy").split(","))
PHASE_S = 2.0
BATCH = 64
OPERATIONS = ("sum", "relu", "softmax", "add", "dot")
SIZES = (1 << 16, 1 << 18, 1 << 20)
# numpy work per dataset item in the loader scenario (element-wise passes over 64 floats)
ITEM_PASSES = 60
# after a phase change a key switches within this many of its calls or SWITCH_S, whichever
# is longer (issue 40)
SWITCH_CALLS = 20
SWITCH_S = 1.0
ADAPTIVE_MODES = ("adaptive", "history")

MODES = {"mlp": ("plain", "plain1", "adaptive", "history", "plain_again"),
         "numpy": ("static", "static1", "adaptive", "history", "static_again")}
BASELINE = {"mlp": "plain", "numpy": "static"}
ONE_THREAD = {"mlp": "plain1", "numpy": "static1"}
AGAIN = {"mlp": "plain_again", "numpy": "static_again"}

# ----------------------------------------------------------------------------- the child


def one_thread() -> None:
    """Every pool at one thread: torch's (if loaded), numba's, BLAS's."""
    import numba
    import threadpoolctl

    numba.set_num_threads(1)
    threadpoolctl.threadpool_limits(1)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def runtime(history: str | None) -> Any:
    """A default runtime; from a copy of the saved history where given (the copy: a runtime
    with a history path saves to it at exit)."""
    import adaptive_runtime as ar

    if history is None:
        return ar.AdaptiveRuntime()
    copy = os.path.join(tempfile.mkdtemp(prefix="contention-run-"), "history.json")
    shutil.copyfile(history, copy)
    return ar.AdaptiveRuntime(ar.RuntimeConfig(history_path=copy))


class Augment:
    """A dataset whose items cost CPU to make, as decoding and augmentation do."""

    def __init__(self, images: Any) -> None:
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> Any:
        import numpy as np

        x = self.images[i]
        for _ in range(ITEM_PASSES):
            x = np.tanh(x * 1.0001 + 1e-4)
        return x.astype(np.float32), i


def loader_batches(images: Any) -> tuple[Any, Any]:
    """An endless iterator of batches from a DataLoader with one worker, and that worker's pid."""
    import torch

    loader = torch.utils.data.DataLoader(Augment(images), batch_size=BATCH, shuffle=True,
                                         num_workers=1, persistent_workers=True,
                                         generator=torch.Generator().manual_seed(1))
    iterator = iter(loader)
    workers = getattr(iterator, "_workers", [])
    pid = workers[0].pid if workers else None

    def endless() -> Any:
        nonlocal iterator
        while True:
            try:
                yield next(iterator)
            except StopIteration:
                iterator = iter(loader)

    return endless(), pid


def cpu_seconds(pid: int | None) -> float:
    """CPU time (user + system) of process ``pid`` so far (0 where unreadable)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def run_mlp(mode: str, history: str | None, loader: bool, watching: bool) -> dict[str, Any]:
    import numpy as np
    import torch
    from _gpu_correctness import digits, mlp

    import adaptive_runtime.torch as art

    if mode == "plain1":
        one_thread()
    images, labels = digits(torch, "cpu")
    warm = mlp(torch, "cpu")  # (torch's lazy set-up, outside the timing: every mode)
    for _ in range(3):
        torch.nn.functional.cross_entropy(warm(images[:BATCH]), labels[:BATCH]).backward()
    model = mlp(torch, "cpu")
    rt = watch = None
    if mode in ADAPTIVE_MODES:
        rt = runtime(history)
        model = art.adapt(model, runtime=rt)
        if watching:
            watch = ChoiceWatch(rt, torch_pool=True)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.05)
    if loader:
        batches, worker = loader_batches(images.numpy().astype(np.float64))
    else:
        picks = torch.Generator().manual_seed(1)
        batches, worker = ((images[p], p) for p in iter(
            lambda: torch.randint(len(labels), (BATCH,), generator=picks), None)), None
    cpu_before, start = cpu_seconds(worker), time.perf_counter()
    for _ in range(STEPS):
        if watch is not None:
            watch.step()
        x, index = next(batches)
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(model(x), labels[index]).backward()
        optimiser.step()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "busy": (cpu_seconds(worker) - cpu_before) / seconds,
            "keys": {}, "runtime": rt,
            "watch": watch.result() if watch is not None else None,
            "untimed": untimed(rt) if rt is not None else None}


def numpy_calls() -> list[tuple[str, int, tuple[Any, ...]]]:
    """(operation, size, inputs) of every key, float64, from a fixed seed."""
    import numpy as np
    from decision_quality import WORKLOAD

    rng = np.random.default_rng(40)
    return [(name, n, WORKLOAD[name][0](rng, n)) for name in OPERATIONS for n in SIZES]


def run_numpy(mode: str, history: str | None, loader: bool, watching: bool
              ) -> dict[str, Any]:
    import numpy as np
    from decision_quality import available_choices, fixed_kernel, static_arm

    import adaptive_runtime as ar
    from adaptive_runtime.keys import size_bucket

    batches, worker = None, None
    if loader:  # (a training program: torch is loaded, so ATen's kernels compete too)
        batches, worker = loader_batches(np.random.default_rng(1).random((1797, 64)))
    if mode == "static1":
        one_thread()
    rt = runtime(history) if mode in ADAPTIVE_MODES else ar.AdaptiveRuntime()
    calls = numpy_calls()
    watch = ChoiceWatch(rt) if watching and mode in ADAPTIVE_MODES else None
    labels = ([watch.watch(name, size_bucket(n)) for name, n, _args in calls]
              if watch is not None else [])
    if mode in ADAPTIVE_MODES:
        run = [lambda args, name=name: rt.run(name, *args) for name, _n, _args in calls]
    else:
        choices = available_choices(rt, list(OPERATIONS))
        run = []
        for name, _n, args in calls:
            op = rt.operation(name)
            kernel = fixed_kernel(op, static_arm(op, op.size_of(*args), choices))
            run.append(lambda args, kernel=kernel: kernel(*args))
    order = np.random.default_rng(41).permutation(len(calls))
    per_key = [0.0] * len(calls)
    clock = time.perf_counter
    cpu_before, start = cpu_seconds(worker), clock()
    for _ in range(CALLS):
        if batches is not None:
            next(batches)
        if watch is None:
            for k in order:
                began = clock()
                run[k](calls[k][2])
                per_key[k] += clock() - began
            continue
        watch.step(read=False)  # (a pass over the keys; each read right after its call)
        for k in order:
            began = clock()
            run[k](calls[k][2])
            per_key[k] += clock() - began
            watch.after_call(labels[k])
    seconds = clock() - start
    learned = None
    if mode in ADAPTIVE_MODES:
        learned = untimed(rt, {(name, size_bucket(n)): CALLS for name, n, _args in calls})
    return {"seconds": seconds, "busy": (cpu_seconds(worker) - cpu_before) / seconds,
            "keys": {f"{name}/{n}": t for (name, n, _), t in zip(calls, per_key, strict=True)},
            "runtime": rt, "watch": watch.result() if watch is not None else None,
            "untimed": learned}


def child(workload: str, mode: str, history: str | None, loader: bool,
          save: str | None, watching: bool) -> None:
    result = (run_mlp if workload == "mlp" else run_numpy)(mode, history, loader, watching)
    if save is not None:
        result["runtime"].save_history(save)
    print(json.dumps({k: v for k, v in result.items()
                      if k in ("seconds", "busy", "keys", "watch", "untimed")}))


# ----------------------------------------------------------------------------- the parent


def run_child(workload: str, mode: str, scenario: str, history: str | None,
              save: str | None = None) -> dict[str, Any]:
    """One run in its own process, with the scenario's neighbour beside it."""
    neighbour = None
    stop = threading.Event()
    toggles: list[list[Any]] = []  # [monotonic time, the neighbour running after it]
    if scenario in ("neighbour", "phases"):
        neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    if scenario == "phases":
        def toggle() -> None:
            running = True
            while not stop.wait(PHASE_S):
                running = not running
                neighbour.send_signal(signal.SIGCONT if running else signal.SIGSTOP)
                toggles.append([time.monotonic(), running])

        threading.Thread(target=toggle, daemon=True).start()
    command = [sys.executable, __file__, "--child", workload, mode]
    if scenario == "phases" and mode in ADAPTIVE_MODES:
        command.append("--watch")
    if history is not None:
        command += ["--history", history]
    if save is not None:
        command += ["--save", save]
    if scenario == "loader":
        command.append("--loader")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900,
                              cwd=os.path.dirname(os.path.abspath(__file__)))
    finally:
        stop.set()
        if neighbour is not None:
            neighbour.send_signal(signal.SIGCONT)
            neighbour.kill()
            neighbour.wait()
    if done.returncode != 0:
        raise RuntimeError(f"contention: {workload}/{mode}/{scenario} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["toggles"] = toggles
    return result


def per_key_best(results: dict[str, list[dict[str, Any]]], modes: tuple[str, ...]
                 ) -> list[float]:
    """Per round: the sum over keys of the faster of ``modes`` on each key."""
    rounds = len(results[modes[0]])
    return [sum(min(results[m][r]["keys"][k] for m in modes)
                for k in results[modes[0]][r]["keys"])
            for r in range(rounds)]


def table(workload: str, scenario: str, results: dict[str, list[dict[str, Any]]]) -> None:
    base, one, again = BASELINE[workload], ONE_THREAD[workload], AGAIN[workload]
    seconds = {mode: [r["seconds"] for r in runs] for mode, runs in results.items()}
    better_fixed = [min(a, b) for a, b in zip(seconds[base], seconds[one], strict=True)]
    if workload == "numpy":
        best = [min(a, b) for a, b in zip(better_fixed, per_key_best(results, (base, one)),
                                          strict=True)]
        best_name = "the better of one thread and the per-key best"
    else:
        best, best_name = better_fixed, "the better of default and one thread"
    targets: list[tuple[str, str, list[float], float]] = []
    if scenario == "neighbour":
        targets = [("adaptive", f"vs {base}", seconds[base], 0.70),
                   ("adaptive", f"vs {best_name}", best, 1.05),
                   ("history", f"vs {base}", seconds[base], 0.70)]
    elif scenario == "loader":
        targets = [("adaptive", "vs the better fixed thread count", better_fixed, 1.00),
                   ("history", "vs the better fixed thread count", better_fixed, 1.00)]
    elif scenario == "phases":
        targets = [("adaptive", "vs the better fixed thread count", better_fixed, 0.90),
                   ("history", "vs the better fixed thread count", better_fixed, 0.90)]
    else:
        quiet = {"mlp": [("adaptive", f"vs {base}", seconds[base], 1.02)],
                 "numpy": [("adaptive", f"vs {base}", seconds[base], 1.03),
                           ("history", f"vs {base}", seconds[base], 1.01)]}
        targets = quiet[workload]
    rows: list[list[object]] = []
    for mode in MODES[workload]:
        rows.append([mode, f"{statistics.median(seconds[mode]):.3f}",
                     str(paired_ratio(seconds[mode], seconds[base])), "-", "-"])
    for mode, against, reference, target in targets:
        ratio = paired_ratio(seconds[mode], reference)
        rows.append([f"{mode} {against}", "-", str(ratio), f"<= {target:.2f}x",
                     judge(ratio, target)])
    aa: Ratio = paired_ratio(seconds[again], seconds[base])
    rows.append([f"A/A: {again} vs {base}", "-", str(aa), "(noise floor)", "-"])
    if workload == "numpy":
        headroom = paired_ratio(per_key_best(results, (base, one)), seconds[base])
        rows.append(["headroom: per-key best thread setting vs default", "-", str(headroom),
                     "-", "-"])
    busy = [r["busy"] for runs in results.values() for r in runs if r["busy"]]
    note = f"; loader worker busy {statistics.median(busy):.0%} of the run" if busy else ""
    print_table(f"{workload}, {scenario}: seconds (median of {len(seconds[base])} rounds), "
                f"ratio to {base} per round: median [95 % bootstrap]{note}",
                ["mode", "seconds", f"ratio to {base}", "target", "verdict"], rows)


POOL = "torch threads held"


def _timelines(watch: dict[str, Any]) -> dict[str, list[tuple[float, int, str]]]:
    """Per key (and torch's pool), its committed choice's changes: (time, steps done, choice)."""
    lines: dict[str, list[tuple[float, int, str]]] = {}
    for label, at, done, choice in watch["events"]:
        lines.setdefault(label, []).append((at, done, choice))
    for at, done, count in watch["pool"]:
        lines.setdefault(POOL, []).append((at, done, f"{count}" if count else "pool size"))
    return lines


def _held(line: list[tuple[float, int, str]], at: float) -> str | None:
    """The choice held at time ``at`` (None: none committed yet)."""
    i = bisect.bisect_right([t for t, _d, _c in line], at)
    return line[i - 1][2] if i else None


def phase_changes(result: dict[str, Any]) -> list[tuple[float, bool]]:
    """The phase changes of a watched run while its loop ran: (time, neighbour running)."""
    watch = result.get("watch")
    if not watch or not watch["stamps"]:
        return []
    return [(at, running) for at, running in result["toggles"]
            if watch["stamps"][0] < at < watch["end"]]


def phase_switches(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per phase change inside one watched run, and per key (and torch's pool): the choice
    held at the change and at the next one (or the run's end). ``status``: ``switch`` where
    they differ — ``delay_s`` from the change to the first commitment to the later choice,
    ``calls`` the key's calls meanwhile (its steps since the change times its calls a step;
    the pool's: training steps), ``within`` the target max(``SWITCH_CALLS`` calls,
    ``SWITCH_S``) —; ``none`` where they are the same (``flips``: commitments between);
    ``uncommitted`` where no choice was committed at the change."""
    changes = phase_changes(result)
    if not changes:
        return []
    watch = result["watch"]
    stamps, end = watch["stamps"], watch["end"]
    lines = _timelines(watch)
    found = []
    for i, (at, running) in enumerate(changes):
        until = changes[i + 1][0] if i + 1 < len(changes) else end
        steps_before = bisect.bisect_right(stamps, at)
        for label, line in lines.items():
            before, after = _held(line, at), _held(line, until)
            row: dict[str, Any] = {"key": label, "on": running, "from": before, "to": after}
            if before is None:
                row["status"] = "uncommitted"
            elif before == after:
                row["status"] = "none"
                row["flips"] = sum(at < t <= until for t, _d, _c in line)
            else:
                t, done = next((t, d) for t, d, c in line if at < t <= until and c == after)
                per_step = 1.0 if label == POOL else watch["per_step"].get(label, 1.0)
                calls = max(done - steps_before, 0) * per_step
                delay = t - at
                row.update(status="switch", delay_s=delay, calls=calls,
                           within=delay <= SWITCH_S or calls <= SWITCH_CALLS)
            found.append(row)
    return found


def _median_max(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} [{format(max(values), fmt)}]"


def switch_table(workload: str, results: dict[str, list[dict[str, Any]]]) -> None:
    """The phases scenario: after each phase change, how long each key (and torch's pool)
    took to switch its choice, against max(``SWITCH_CALLS`` of its calls, ``SWITCH_S``)."""
    rows: list[list[object]] = []
    total: Counter[str] = Counter()
    changes = 0
    watched = []
    for mode in ADAPTIVE_MODES:
        found = []
        for run in results[mode]:
            found += phase_switches(run)
            changes += len(phase_changes(run))
            if run.get("watch"):
                watched.append(run["watch"]["reads"] * run["watch"]["read_us"] * 1e-6)
        by_key: dict[tuple[str, bool], list[dict[str, Any]]] = {}
        for r in found:
            total[r["status"]] += 1
            if r["status"] == "switch":
                total["within" if r["within"] else "later"] += 1
            by_key.setdefault((r["key"], r["on"]), []).append(r)
        for (key, on), made in sorted(by_key.items(), key=lambda kv: (kv[0][0] == POOL,
                                                                        kv[0][0], kv[0][1])):
            switched = [r for r in made if r["status"] == "switch"]
            if not switched:
                continue
            within = sum(r["within"] for r in switched)
            rows.append([mode, key, "neighbour on" if on else "neighbour off",
                         f"{len(switched)} of {len(made)}",
                         ", ".join(sorted({f"{r['from']} -> {r['to']}" for r in switched})),
                         _median_max([r["delay_s"] for r in switched], ".2f"),
                         _median_max([r["calls"] for r in switched], ".0f"),
                         f"{within} of {len(switched)}"])
    switches = total["switch"]
    if not switches:
        outcome = "not judged (no switch measured)"
    elif total["later"]:
        outcome = f"MISSES ({total['later']} of {switches} later)"
    else:
        outcome = f"meets ({switches} of {switches} within)"
    target = f"max({SWITCH_CALLS} calls, {SWITCH_S:g} s)"
    rows += [
        ["all", f"switches within {target}", "-", "-", "-", "-", "-",
         f"{total['within']} of {switches}"],
        ["all", "switches later", "-", "-", "-", "-", "-", f"{total['later']}"],
        ["all", "no switch: the choice held at the change held at the next", "-", "-", "-",
         "-", "-", f"{total['none']} (key x change)"],
        ["all", "no choice committed yet at the change", "-", "-", "-", "-", "-",
         f"{total['uncommitted']} (key x change)"],
        ["verdict", f"a key switches within {target}", "-", "-", "-", "-", "-", outcome]]
    note = (f"; the watch's reads (in the seconds): about {statistics.median(watched) * 1e3:.1f}"
            " ms a run" if watched else "")
    print_table(
        f"{workload}, phases: after a phase change (neighbour stopped or started every "
        f"{PHASE_S:g} s; phase changes inside the adaptive runs: {changes}), each key whose "
        "committed choice at the next change differs from the one at this change (and torch's "
        f"held thread count: its calls are steps), delay median [max]; target {target}. A key "
        "whose best choice is the same in both phases needs no switch: it counts under \"no "
        "switch\", not as a miss (so does a switch that came only after the next change)"
        f"{note}", ["mode", "key", "change", "switched", "from -> to", "delay s",
                    "delay, its calls", "within target"], rows)


def untimed_report(results: dict[str, dict[str, dict[str, list[dict[str, Any]]]]]) -> None:
    """Every adaptive run's keys with >= 200 calls and their candidates never timed."""
    groups = [(f"{workload} {scenario} {mode}",
               [run.get("untimed") for run in results[scenario][workload][mode]])
              for scenario in results for workload in results[scenario]
              for mode in ADAPTIVE_MODES]
    untimed_table("arms never timed (contention)", groups)


def main() -> None:
    started = time.perf_counter()
    print(f"contention: {ROUNDS} rounds; scenarios {', '.join(SCENARIOS)}; workloads "
          f"{', '.join(WORKLOADS)}; mlp {STEPS} steps, numpy {CALLS} calls a key; "
          f"{os.cpu_count()} cores", flush=True)
    histories: dict[str, str] = {}
    folder = tempfile.mkdtemp(prefix="contention-")
    for workload in WORKLOADS:  # (a history learned quietly, as a user's last run left it)
        histories[workload] = os.path.join(folder, f"{workload}.json")
        run_child(workload, "adaptive", "quiet", None, save=histories[workload])
    results = {s: {w: {m: [] for m in MODES[w]} for w in WORKLOADS} for s in SCENARIOS}
    for round_ in range(ROUNDS):
        for scenario in SCENARIOS:
            for workload in WORKLOADS:
                modes = MODES[workload]
                shift = round_ % len(modes)
                for mode in modes[shift:] + modes[:shift]:
                    history = histories[workload] if mode == "history" else None
                    results[scenario][workload][mode].append(
                        run_child(workload, mode, scenario, history))
        print(f"  round {round_ + 1}/{ROUNDS} done ({time.perf_counter() - started:.0f} s)",
              flush=True)
    for scenario in SCENARIOS:
        for workload in WORKLOADS:
            table(workload, scenario, results[scenario][workload])
    if "phases" in SCENARIOS:
        for workload in WORKLOADS:
            switch_table(workload, results["phases"][workload])
    untimed_report(results)
    shutil.rmtree(folder, ignore_errors=True)
    print(f"\ntotal benchmark time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "MODE"))
    parser.add_argument("--history")
    parser.add_argument("--save")
    parser.add_argument("--loader", action="store_true")
    parser.add_argument("--watch", action="store_true")
    options = parser.parse_args()
    if options.child:
        child(*options.child, options.history, options.loader, options.save, options.watch)
    else:
        main()
