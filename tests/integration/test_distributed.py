"""``rt.sync_history()`` over torch.distributed (gloo, processes on this machine): ranks whose
local timings disagree make the same choice for every key after a sync, and keep making the
same choices while they go on learning the same timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from required import require_module

require_module("torch.distributed", "torch")

# Each rank learns from timings that disagree with its neighbours' (even ranks find SIMD
# faster, odd ranks SCALAR; by how much differs per rank), on built-in, registered and
# unregistered operations, and odd ranks see a registered arm fail (a quarantine on their
# clock); it decides, syncs, decides again, then runs the same workload as every other rank
# (select, then report a timing that depends only on the arm) and writes what it saw.
RANK = r"""
import json, sys
import torch.distributed as dist
import adaptive_runtime as ar
from adaptive_runtime.operations import DeviceProbe

rank, world, init, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), devices=DeviceProbe(gpu=False))
op = rt.register("fake", size=lambda n: n, kind="vector")
op.add_implementation(ar.Backend.SIMD, lambda n: n)
op.add_implementation(ar.Backend.SCALAR, lambda n: n)
flaky = rt.register("flaky", size=lambda n: n, kind="vector")


def scalar(n):
    if rank % 2:
        raise RuntimeError("this rank's scalar arm fails")
    return n


flaky.add_implementation(ar.Backend.SIMD, lambda n: n)
flaky.add_implementation(ar.Backend.SCALAR, scalar)
for _ in range(3):
    rt.run("flaky", 50)
keys = [(name, n) for name in ("fake", "dot", "custom_kernel") for n in (100, 5000, 200000)]
keys.append(("flaky", 50))
if rank == world - 1:
    keys_here = keys + [("only_on_the_last_rank", 64)]
else:
    keys_here = keys
fast, slow = (ar.Backend.SIMD, ar.Backend.SCALAR) if rank % 2 == 0 else (ar.Backend.SCALAR,
                                                                        ar.Backend.SIMD)
for name, n in keys_here[:9] + keys_here[10:]:
    for i in range(4 + rank):
        rt.record_performance(name, n, fast, 100.0 + 10 * rank + i)
        rt.record_performance(name, n, slow, 300.0 + 50 * rank)


def decisions():
    return [[d.backend.value, d.reason.value] for d in (rt.decide(*k) for k in keys)]


def rows():
    return sorted([r.operation, r.size_bucket, r.backend.value, r.samples, r.mean_us,
                   r.failures, r.last_update, r.variance_us2] for r in rt.history_snapshot())


before = decisions()
rt.sync_history()
after = decisions()
synced = rows()
rt.sync_history()  # (again: repeated syncs are safe and change nothing among equals)
again = decisions()
# the same workload on every rank: near-ties, so re-checks and switches happen
latency = {"simd": 100.0, "scalar": 104.0}
trail = []
for step in range(200):
    for name, n in keys:
        if name == "flaky":
            continue
        backend = rt.select(name, n)
        trail.append(backend.value)
        rt.record_performance(name, n, backend, latency[backend.value] + step % 3)
after_workload = decisions()
pairs = None
if world == 4:
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    for i in range(rank + 1):  # (different local timings again)
        rt.record_performance("dot", 100, fast, 50.0)
    rt.sync_history(groups[rank // 2])
    pairs = {"rows": rows(), "decisions": decisions()}
json.dump({"before": before, "after": after, "again": again, "rows": synced, "trail": trail,
           "after_workload": after_workload, "pairs": pairs}, open(out, "w"))
dist.destroy_process_group()
"""


def _ranks(tmp_path: Path, world: int, script: str = RANK) -> list[dict]:
    path = tmp_path / "rank.py"
    path.write_text(script)
    init = f"file://{tmp_path / 'rendezvous'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADAPTIVE_RUNTIME_")}
    ranks = [subprocess.Popen([sys.executable, str(path), str(r), str(world), init,
                               str(tmp_path / f"rank{r}.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(world)]
    try:
        for proc in ranks:
            _out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.mark.parametrize("world", [2, 4])
def test_every_rank_decides_alike_after_a_sync(tmp_path: Path, world: int) -> None:
    seen = _ranks(tmp_path, world)
    assert len({json.dumps(s["before"]) for s in seen}) > 1  # they disagreed
    assert all(s["after"] == seen[0]["after"] for s in seen)  # now they agree
    assert all(s["again"] == seen[0]["after"] for s in seen)
    assert all(s["rows"] == seen[0]["rows"] for s in seen)  # identical statistics
    rows = seen[0]["rows"]
    # every rank's samples are in the merge, once: 4 + rank timings of each arm, 9 keys on
    # every rank, one more on the last
    recorded = [r for r in rows if r[0] != "flaky"]
    assert sum(row[3] for row in recorded) == (
        9 * sum(2 * (4 + r) for r in range(world)) + 2 * (4 + world - 1))
    assert any(r[0] == "only_on_the_last_rank" for r in rows)  # every rank has every key
    # the failures of the odd ranks' scalar arm, summed; no rank sees it quarantined
    (flaky_scalar,) = [r for r in rows if r[0] == "flaky" and r[2] == "scalar"]
    assert flaky_scalar[5] >= sum(1 for r in range(world) if r % 2) > 0
    # learning the same timings afterwards, they keep choosing alike, call after call
    assert all(s["trail"] == seen[0]["trail"] for s in seen)
    assert all(s["after_workload"] == seen[0]["after_workload"] for s in seen)
    assert len(set(seen[0]["trail"])) == 2  # (both arms were tried: the schedule was at work)
    if world == 4:  # a sync within a group involves that group only
        pairs = [s["pairs"] for s in seen]
        assert pairs[0] == pairs[1] and pairs[2] == pairs[3]
        assert pairs[0]["rows"] != pairs[2]["rows"]


SOLO = r"""
import json, sys
import torch.distributed as dist
import adaptive_runtime as ar
from adaptive_runtime.operations import DeviceProbe

dist.init_process_group("gloo", init_method=sys.argv[3], rank=0, world_size=1)
rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False,
                        devices=DeviceProbe(gpu=False))
for i in range(5):
    rt.record_performance("dot", 1000, "simd", 10.0 + i)
    rt.record_performance("dot", 1000, "scalar", 30.0)
picked = [rt.select("dot", 1000).value for _ in range(20)]
snap = rt.history_snapshot()
before = rt.decide("dot", 1000)
rt.sync_history()
after = rt.decide("dot", 1000)
json.dump({"same": before == after and snap == rt.history_snapshot()}, open(sys.argv[4], "w"))
dist.destroy_process_group()
"""


def test_a_sync_in_a_group_of_one_changes_nothing(tmp_path: Path) -> None:
    (seen,) = _ranks(tmp_path, 1, SOLO)
    assert seen["same"] is True


def test_sync_without_a_process_group_says_what_is_missing() -> None:
    import adaptive_runtime as ar

    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False)
    with pytest.raises(RuntimeError, match="process group"):
        rt.sync_history()


def test_rank_and_world_size_from_torchrun_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from adaptive_runtime._process import rank_and_world_size

    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    found = rank_and_world_size()
    torch = sys.modules.get("torch")
    if torch is not None and torch.distributed.is_initialized():
        pytest.skip("a process group is initialised in this process")
    assert found == (3, 8)
    monkeypatch.setenv("RANK", "8")
    assert rank_and_world_size() is None
    monkeypatch.delenv("RANK")
    assert rank_and_world_size() is None


class _FakeDist:
    def __init__(self, backend: str, bound: object = None) -> None:
        self.backend = backend
        self.group = type("G", (), {"WORLD": type("PG", (), {"bound_device_id": bound})()})

    def get_backend(self, group: object) -> str:
        return self.backend


def test_nccl_syncs_on_this_ranks_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from adaptive_runtime.history.distributed import _collective_device

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert _collective_device(torch, _FakeDist("gloo"), None) == torch.device("cpu")
    assert _collective_device(torch, _FakeDist("cpu:gloo,cuda:nccl"), None) == torch.device("cpu")
    # never set: LOCAL_RANK's GPU, not every rank of the node on GPU 0
    assert _collective_device(torch, _FakeDist("nccl"), None) == torch.device("cuda", 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert _collective_device(torch, _FakeDist("nccl"), None) == torch.device("cuda", 3)
    bound = torch.device("cuda", 1)
    assert _collective_device(torch, _FakeDist("nccl", bound), None) == bound
