"""Many ranks, one set of choices: history merged over ``torch.distributed``.

:func:`sync_history` gathers every rank's history records (as JSON, in a byte tensor: no pickle
crosses the process group) and has every rank rebuild its history from the same merge, in rank
order — so all ranks hold identical statistics and, with the per-key policy state started
afresh on each, make the same choice for every key (``decide()`` agrees across ranks). Choices
drift apart again as each rank learns from its own timings; syncing every N steps
(``ar.train_step(sync_every=N)``) brings them back.

torch is imported only when a sync is asked for. :func:`rank_and_world_size` (for span and
metric attributes) reads torch.distributed only if torch is loaded, else ``RANK`` /
``WORLD_SIZE`` as ``torchrun`` sets them.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

from .history import HistoryRecord, record_from_json, record_to_json

if TYPE_CHECKING:
    from .runtime import AdaptiveRuntime

__all__ = ["gather_records", "rank_and_world_size", "rank_attributes"]


def rank_and_world_size() -> tuple[int, int] | None:
    """``(rank, world size)`` of this process in a distributed job, or ``None``."""
    torch = sys.modules.get("torch")
    if torch is not None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None or world is None:
        return None
    try:
        found = int(rank), int(world)
    except ValueError:
        return None
    return found if 0 <= found[0] < found[1] else None


def rank_attributes() -> dict[str, int]:
    """``adaptive.rank`` and ``adaptive.world_size`` in a distributed job, else nothing."""
    found = rank_and_world_size()
    if found is None:
        return {}
    rank, world_size = found
    return {"adaptive.rank": rank, "adaptive.world_size": world_size}


def gather_records(records: list[HistoryRecord], group: Any = None) -> list[list[HistoryRecord]]:
    """Every rank's ``records`` (this one's included), in rank order, over ``group`` (default:
    the default process group). Raises ``RuntimeError`` when torch.distributed is not
    initialised."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        raise RuntimeError("sync_history needs torch.distributed (install torch)") from exc
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("sync_history needs an initialised torch.distributed process group "
                           "(torch.distributed.init_process_group, or run under torchrun)")
    world = dist.get_world_size(group)
    # nccl moves CUDA tensors only; gloo (and others) CPU ones
    device = (torch.device("cuda", torch.cuda.current_device())
              if dist.get_backend(group) == "nccl" else torch.device("cpu"))
    payload = json.dumps([record_to_json(r) for r in records]).encode("utf-8")
    mine = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(device)
    size = torch.tensor([mine.numel()], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    longest = int(max(s.item() for s in sizes))
    padded = torch.zeros(longest, dtype=torch.uint8, device=device)
    padded[:mine.numel()] = mine
    gathered = [torch.zeros_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded, group=group)
    out = []
    for data, n in zip(gathered, sizes, strict=True):
        raw = bytes(data[:int(n.item())].cpu().numpy())
        out.append([record_from_json(row) for row in json.loads(raw.decode("utf-8"))])
    return out


def sync_history(runtime: AdaptiveRuntime, group: Any = None) -> None:
    """Replace ``runtime``'s history with the merge of every rank's (see the module)."""
    per_rank = gather_records(runtime.history_snapshot(), group)
    runtime._replace_history([r for records in per_rank for r in records])
