"""PyTorch Lightning: ``Trainer(callbacks=[AdaptiveRuntimeCallback()])``.

- Each training batch is a ``train_step`` span (step = ``trainer.global_step``, with the
  epoch): the runtime's select/execute spans of its forward, backward and optimiser step nest
  under it in Jaeger, sampled as ``ar.train_step`` samples.
- The runtime's history is saved inside every checkpoint Lightning writes (its
  ``"adaptive_runtime_history"`` entry: the history file's JSON, fingerprint included) and
  merged back when a checkpoint is loaded (``Trainer.fit(ckpt_path=...)``): a resumed run
  starts from what the interrupted one learned — unless the checkpoint was written on other
  hardware or library versions (one ``HistoryWarning``, not applied: see
  ``rt.load_history``).
- With several ranks (``torch.distributed`` initialised, DDP), every rank's history is
  merged at fit start and end (``rt.sync_history()``), so all ranks choose alike.

``lightning.pytorch`` where installed (``pip install lightning``), else ``pytorch_lightning``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._training_hooks import StepSpans, missing_framework, sync_across_ranks
from .runtime import AdaptiveRuntime

try:
    from lightning.pytorch import Callback
except ImportError:  # (the older package name)
    try:
        from pytorch_lightning import Callback
    except ImportError as exc:
        raise missing_framework("lightning", "PyTorch Lightning") from exc

__all__ = ["CHECKPOINT_KEY", "AdaptiveRuntimeCallback"]

CHECKPOINT_KEY = "adaptive_runtime_history"


class AdaptiveRuntimeCallback(Callback):  # type: ignore[misc]
    """Step spans, history in checkpoints, ranks synced (see the module docstring).

    ``runtime``: default the process default runtime (what ``ar.ops`` and adapted modules
    use). ``attributes``: more attributes on every step span. ``sync``: merge the ranks'
    histories at fit start and end.
    """

    def __init__(self, runtime: AdaptiveRuntime | None = None, *,
                 attributes: Mapping[str, Any] | None = None, sync: bool = True) -> None:
        super().__init__()
        self._steps = StepSpans(runtime, attributes)
        self._sync = sync

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self._sync:
            sync_across_ranks(self._steps.runtime)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._steps.end()
        if self._sync:
            sync_across_ranks(self._steps.runtime)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        self._steps.begin(int(trainer.global_step), epoch=int(trainer.current_epoch))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._steps.end()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._steps.end(exception)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any,
                           checkpoint: dict[str, Any]) -> None:
        checkpoint[CHECKPOINT_KEY] = self._steps.runtime.history_document().decode("utf-8")

    def on_load_checkpoint(self, trainer: Any, pl_module: Any,
                           checkpoint: dict[str, Any]) -> None:
        document = checkpoint.get(CHECKPOINT_KEY)
        if document is not None:
            self._steps.runtime.load_history_document(
                document, source=f"the checkpoint's {CHECKPOINT_KEY!r} entry")
