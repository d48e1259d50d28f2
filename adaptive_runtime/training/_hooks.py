"""What the training-framework callbacks (``training.lightning``, ``training.transformers``)
share: a step span opened and closed from separate hooks, and the history synced across ranks
where a process group is up."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._process import process_group
from ..errors import MissingExtraError
from ..runtime import AdaptiveRuntime, get_runtime
from .steps import TrainStep, train_step

__all__ = ["StepSpans", "missing_framework", "sync_across_ranks"]

# the file a checkpoint folder holds the history in (the transformers callback)
HISTORY_FILE = "adaptive_runtime_history.json"


def missing_framework(module: str, framework: str) -> MissingExtraError:
    """The error of importing ``adaptive_runtime.training.<module>`` without its framework:
    the extra of the same name brings it."""
    return MissingExtraError(f"adaptive_runtime.training.{module} needs {framework}: "
                             f"pip install 'adaptive_runtime[{module}]'", name=module)


class StepSpans:
    """One ``train_step`` span at a time, begun by one hook and ended by another (a framework
    calls "batch start" and "batch end", never a ``with`` block). A step still open when the
    next begins (a hook skipped) is ended first, so spans never nest across steps."""

    def __init__(self, runtime: AdaptiveRuntime | None,
                 attributes: Mapping[str, Any] | None) -> None:
        self._runtime = runtime
        self._attributes = dict(attributes or {})
        self._open: TrainStep | None = None

    @property
    def runtime(self) -> AdaptiveRuntime:
        return self._runtime if self._runtime is not None else get_runtime()

    def begin(self, step: int, epoch: int | None = None) -> None:
        self.end()
        span = train_step(step, epoch=epoch, attributes=self._attributes,
                          runtime=self._runtime)
        span.__enter__()
        self._open = span

    def end(self, error: BaseException | None = None) -> None:
        span, self._open = self._open, None
        if span is not None:
            span.__exit__(type(error) if error is not None else None, error,
                          error.__traceback__ if error is not None else None)


def sync_across_ranks(runtime: AdaptiveRuntime) -> bool:
    """``runtime.sync_history()`` where ``torch.distributed`` has a process group of more than
    one rank; ``True`` when it synced (every rank must call this at the same point)."""
    group = process_group()
    if group is None or group[1] == 1:
        return False
    runtime.sync_history()
    return True
