"""``rt.sync_history()`` over torch.distributed (gloo, processes on this machine): ranks whose
local timings disagree make the same choice for every key after a sync."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Each rank learns from timings that disagree with its neighbours' (even ranks find SIMD
# faster, odd ranks SCALAR; by how much differs per rank), on built-in, registered and
# unregistered operations, decides, syncs, decides again, and writes what it saw.
RANK = r"""
import json, sys
import torch.distributed as dist
import adaptive_runtime as ar

rank, world, init, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), devices=ar.DeviceProbe(gpu=False))
op = rt.register("fake", size=lambda n: n, kind="vector")
op.add_implementation(ar.Backend.SIMD, lambda n: n)
op.add_implementation(ar.Backend.SCALAR, lambda n: n)
keys = [(name, n) for name in ("fake", "dot", "custom_kernel") for n in (100, 5000, 200000)]
fast, slow = (ar.Backend.SIMD, ar.Backend.SCALAR) if rank % 2 == 0 else (ar.Backend.SCALAR,
                                                                        ar.Backend.SIMD)
for name, n in keys:
    for i in range(4 + rank):
        rt.record_performance(name, n, fast, 100.0 + 10 * rank + i)
        rt.record_performance(name, n, slow, 300.0 + 50 * rank)
before = [[d.backend.value, d.reason.value] for d in (rt.decide(*k) for k in keys)]
rt.sync_history()
after = [[d.backend.value, d.reason.value] for d in (rt.decide(*k) for k in keys)]
rows = sorted([r.operation, r.size_bucket, r.backend.value, r.samples, r.mean_us]
              for r in rt.history_snapshot())
rt.sync_history()  # (again: repeated syncs are safe and change nothing among equals)
again = [[d.backend.value, d.reason.value] for d in (rt.decide(*k) for k in keys)]
json.dump({"before": before, "after": after, "again": again, "rows": rows}, open(out, "w"))
dist.destroy_process_group()
"""


@pytest.mark.parametrize("world", [2, 4])
def test_every_rank_decides_alike_after_a_sync(tmp_path: Path, world: int) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    init = f"file://{tmp_path / 'rendezvous'}"
    ranks = [subprocess.Popen([sys.executable, str(script), str(r), str(world), init,
                               str(tmp_path / f"rank{r}.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    for proc in ranks:
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    assert len({json.dumps(s["before"]) for s in seen}) > 1  # they disagreed
    assert all(s["after"] == seen[0]["after"] for s in seen)  # now they agree
    assert all(s["again"] == seen[0]["after"] for s in seen)
    assert all(s["rows"] == seen[0]["rows"] for s in seen)  # identical statistics
    # every rank's samples are in the merge, once: 4 + rank timings of each arm, 9 keys
    assert sum(row[3] for row in seen[0]["rows"]) == 9 * sum(2 * (4 + r) for r in range(world))


def test_sync_without_a_process_group_says_what_is_missing() -> None:
    import adaptive_runtime as ar

    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False)
    with pytest.raises(RuntimeError, match="process group"):
        rt.sync_history()
