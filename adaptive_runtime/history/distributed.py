"""Many ranks, one set of choices: history merged over ``torch.distributed``.

:func:`sync_history` gathers every rank's history (as JSON in a byte tensor: no pickle crosses
the process group) and has every rank *replace* its history with the same merge of all of
them, in rank order (not the others' merged into its own, which would differ per rank) — so
all ranks hold identical statistics and, with the per-key policy state started afresh on each,
make the same choice for every key (``decide()`` agrees across ranks).

What a decision reads is then the same on every rank: the same keys (the union of the ranks'),
the same counts, estimates and variances (one merge, in one order, of the same numbers), the
same ``last_update`` per arm (the latest of the ranks'; later timings are stamped after it,
see ``HistoryStore._stamp``, so re-check order never depends on a rank's clock), no arm
quarantined (quarantine deadlines are local clock readings: they are not carried over), and
fresh per-key policy state (no committed arm, no memo, prior, floors, re-check schedule or
drift statistic; decision counts from zero). Choices drift apart again only as each rank learns
from its own timings; syncing every N steps (``ar.train_step(sync_every=N)``) brings them back.

Counts are kept per rank of origin (a grow-only counter, see
:func:`adaptive_runtime.history.combine_rank_rows`): the first sync sums the ranks' counts,
and syncing again — every N steps, in the same group or another — never counts a sample twice.

A sync in a group of one changes nothing (there is nothing to agree with). Without torch, or
without an initialised process group, it raises ``RuntimeError`` saying what is missing.

torch is imported only when a sync is asked for (which process this is, its rank: ``_process``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .file import record_from_json, record_to_json
from .ranks import combine_rank_rows
from .record import HistoryRecord, Origins

__all__ = ["Syncable", "gather_rank_rows", "merged_history", "sync_history"]


class Syncable(Protocol):
    """A runtime, as :func:`sync_history` sees it."""

    def sync_history(self, group: Any = None) -> None: ...


RankRows = list[tuple[HistoryRecord, Origins]]


def _distributed() -> Any:
    """``torch.distributed``, initialised; ``RuntimeError`` saying what is missing if not."""
    try:
        import torch.distributed as dist
    except ImportError as exc:
        raise RuntimeError("sync_history needs torch.distributed (install torch)") from exc
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("sync_history needs an initialised torch.distributed process group "
                           "(torch.distributed.init_process_group, or run under torchrun)")
    return dist


def sync_history(runtime: Syncable, group: Any = None) -> None:
    """Replace ``runtime``'s history with the merge of every rank's in ``group`` (default: the
    default process group): ``runtime.sync_history(group)``, see the module."""
    runtime.sync_history(group)


def merged_history(rows_of: Callable[[int], RankRows], group: Any = None) -> RankRows | None:
    """The merge of every rank's history rows in ``group`` (default: the default process
    group), ``rows_of(rank)`` being this rank's; ``None`` in a group of one. A collective:
    every rank of the group calls it."""
    dist = _distributed()
    if dist.get_world_size(group) == 1:
        return None
    rank = dist.get_rank()  # (the global rank: origins mean the same in every group)
    return combine_rank_rows(gather_rank_rows(rows_of(rank), rank, group))


def gather_rank_rows(rows: RankRows, rank: int,
                     group: Any = None) -> list[tuple[int, RankRows]]:
    """Every rank's ``(rank, rows)`` (this one's included), in group rank order, over
    ``group`` (default: the default process group)."""
    import torch

    dist = _distributed()
    world = dist.get_world_size(group)
    payload = json.dumps({"rank": rank, "rows": [
        {**record_to_json(r), "origins": [[o, n, f] for o, (n, f) in origins.items()]}
        for r, origins in rows]}).encode("utf-8")
    device = _collective_device(torch, dist, group)
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        gathered = _all_gather_bytes(torch, dist, group, device, world, payload)
    return [_parse(raw) for raw in gathered]


def _parse(raw: bytes) -> tuple[int, RankRows]:
    doc = json.loads(raw.decode("utf-8"))
    rank = doc["rank"]
    if type(rank) is not int or rank < 0:
        raise ValueError(f"a rank's history names rank {rank!r}")
    rows = []
    for row in doc["rows"]:
        origins: Origins = {}
        for o, n, f in row.pop("origins"):
            if not all(type(v) is int and v >= 0 for v in (o, n, f)):
                raise ValueError(f"rank {rank} sent malformed origins {[o, n, f]!r}")
            origins[o] = (n, f)
        rows.append((record_from_json(row), origins))
    return rank, rows


def _collective_device(torch: Any, dist: Any, group: Any) -> Any:
    """Where the gathered tensors live: CPU for gloo (or a group with gloo for CPU tensors),
    this rank's GPU for nccl — the device the process group is bound to, else the current
    CUDA device, else ``LOCAL_RANK``'s when the current one is still the default 0 and
    ``LOCAL_RANK`` names another GPU (a script that never called ``torch.cuda.set_device``
    would otherwise put every rank of a node on GPU 0, which nccl refuses)."""
    backend = str(dist.get_backend(group)).lower()
    if "nccl" not in backend or "gloo" in backend:
        return torch.device("cpu")
    pg = group if group is not None else dist.group.WORLD
    bound = getattr(pg, "bound_device_id", None)
    if bound is not None:
        return bound
    index = torch.cuda.current_device()
    local = os.environ.get("LOCAL_RANK", "")
    if index == 0 and local.isdigit() and 0 < int(local) < torch.cuda.device_count():
        index = int(local)
    return torch.device("cuda", index)


def _all_gather_bytes(torch: Any, dist: Any, group: Any, device: Any, world: int,
                      payload: bytes) -> Sequence[bytes]:
    # (not all_gather_object: that pickles, and unpickling what another process sent can run
    # code; JSON in a byte tensor carries the records and nothing else)
    mine = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(device)
    size = torch.tensor([mine.numel()], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    longest = int(max(s.item() for s in sizes))
    padded = torch.zeros(longest, dtype=torch.uint8, device=device)
    padded[:mine.numel()] = mine
    gathered = [torch.zeros_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded, group=group)
    return [bytes(data[:int(n.item())].cpu().numpy()) for data, n in zip(gathered, sizes,
                                                                          strict=True)]
