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
- What the runtime learns goes to the trainer's own loggers (``trainer.loggers``: CSV,
  TensorBoard, W&B, MLflow, ...), every ``log_every_n_steps`` batches and at each epoch's end:
  the ``adaptive/*`` values of :mod:`adaptive_runtime._training_metrics` (keys committed, arm
  switches, exploring share, tracing cost), and at the end of training the keys committed to
  each arm (``adaptive/committed_keys/<arm>``) and, for a logger that takes text or tables
  (TensorBoard's ``add_text``, W&B's ``log_table``), each key's committed arm. (Written
  through ``logger.log_metrics``, not ``LightningModule.log``: these are readings, not values
  to average over an epoch, and ``log`` is not allowed at the end of training.)
- A resumed run says what became of the checkpoint's history: one INFO line (logger
  ``adaptive_runtime.training``) and ``adaptive/history_restored`` (1 applied; 0 none in the
  checkpoint, or refused).

``lightning.pytorch`` where installed (``pip install lightning``), else ``pytorch_lightning``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..runtime import AdaptiveRuntime
from ._hooks import StepSpans, missing_framework, sync_across_ranks
from ._metrics import KeyChoice, LearningLog, committed_table, restored_message

try:
    from lightning.pytorch import Callback
except ImportError:  # (the older package name)
    try:
        from pytorch_lightning import Callback
    except ImportError as exc:
        raise missing_framework("lightning", "PyTorch Lightning") from exc

__all__ = ["CHECKPOINT_KEY", "AdaptiveRuntimeCallback"]

CHECKPOINT_KEY = "adaptive_runtime_history"
_TABLE = "adaptive/committed_arms"
_COLUMNS = ["operation", "size bucket", "committed arm"]


def _log_table(logger: Any, keys: list[KeyChoice], step: int) -> None:
    """Each key's committed arm, where ``logger`` takes tables or text (W&B's
    ``log_table``, TensorBoard's ``SummaryWriter.add_text``); others get the counts only."""
    if hasattr(logger, "log_table"):
        logger.log_table(key=_TABLE, columns=_COLUMNS, step=step,
                         data=[[k.operation, k.size_bucket, k.choice or "(exploring)"]
                               for k in keys])
        return
    add_text = getattr(getattr(logger, "experiment", None), "add_text", None)
    if callable(add_text):
        add_text(_TABLE, committed_table(keys), step)


class AdaptiveRuntimeCallback(Callback):  # type: ignore[misc]
    """Step spans, history in checkpoints, ranks synced, what the runtime learns in the
    trainer's loggers (see the module docstring).

    ``runtime``: default the process default runtime (what ``ar.ops`` and adapted modules
    use). ``attributes``: more attributes on every step span. ``sync``: merge the ranks'
    histories at fit start and end.
    """

    def __init__(self, runtime: AdaptiveRuntime | None = None, *,
                 attributes: Mapping[str, Any] | None = None, sync: bool = True) -> None:
        super().__init__()
        self._steps = StepSpans(runtime, attributes)
        self._sync = sync
        self._learning = LearningLog()
        self._batches = 0  # training batches since the last reading

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self._sync:
            sync_across_ranks(self._steps.runtime)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._steps.end()
        if self._sync:
            sync_across_ranks(self._steps.runtime)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._learning.start(self._steps.runtime)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        self._steps.begin(int(trainer.global_step), epoch=int(trainer.current_epoch))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._steps.end()
        self._batches += 1
        every = int(trainer.log_every_n_steps or 0)
        if every > 0 and self._batches % every == 0:
            self._log(trainer, self._learning.reading)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._batches:
            self._log(trainer, self._learning.reading)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._log(trainer, self._learning.final, table=True)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._steps.end(exception)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any,
                           checkpoint: dict[str, Any]) -> None:
        checkpoint[CHECKPOINT_KEY] = self._steps.runtime.history_document().decode("utf-8")

    def on_load_checkpoint(self, trainer: Any, pl_module: Any,
                           checkpoint: dict[str, Any]) -> None:
        runtime = self._steps.runtime
        document = checkpoint.get(CHECKPOINT_KEY)
        path = getattr(trainer, "ckpt_path", None)
        where = f"the checkpoint {path}" if path else "the checkpoint"
        applied = None if document is None else runtime.load_history_document(
            document, source=f"{where} ({CHECKPOINT_KEY!r} entry)")
        restored_message(self._learning, runtime, where, applied)

    def _log(self, trainer: Any, read: Callable[[AdaptiveRuntime], dict[str, float]],
             table: bool = False) -> None:
        """One reading (``read``: the learning log's ``reading`` or ``final``) to every
        logger of ``trainer``; none read where it has none."""
        self._batches = 0
        loggers = list(getattr(trainer, "loggers", None) or ())
        if not loggers:
            return
        step = int(trainer.global_step)
        values = read(self._steps.runtime)
        for logger in loggers:
            logger.log_metrics(values, step=step)
            if table and trainer.is_global_zero:
                _log_table(logger, self._learning.keys, step)
