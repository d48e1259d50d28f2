"""Which process this is: its rank in a distributed job, and whether it is a DataLoader worker.

Read for span and metric attributes (``adaptive.rank``, ``adaptive.world_size``), the history
sync and the history saver; torch is never imported to ask. :func:`rank_and_world_size` reads
torch.distributed only where torch is loaded, else ``RANK`` / ``WORLD_SIZE`` as ``torchrun``
sets them.
"""

from __future__ import annotations

import os

from ._imported import imported

__all__ = ["in_dataloader_worker", "process_group", "rank_and_world_size", "rank_attributes"]


def process_group() -> tuple[int, int] | None:
    """``(rank, world size)`` in torch.distributed's default process group where one is
    initialised (torch already imported), else ``None``."""
    dist = imported("torch.distributed")  # (not while torch is still being imported)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return None


def rank_and_world_size() -> tuple[int, int] | None:
    """``(rank, world size)`` of this process in a distributed job, or ``None``: the process
    group's, else torchrun's ``RANK`` / ``WORLD_SIZE`` (set before the group is made)."""
    group = process_group()
    if group is not None:
        return group
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


def in_dataloader_worker() -> bool:
    """Whether this process is a ``torch.utils.data.DataLoader`` worker (torch is not
    imported to ask: a process that has not imported it is no worker)."""
    data = imported("torch.utils.data")
    get_worker_info = getattr(data, "get_worker_info", None)
    try:
        return get_worker_info is not None and get_worker_info() is not None
    except Exception:  # (a torch too unlike the one we know: assume no worker)
        return False
