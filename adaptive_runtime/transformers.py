"""Hugging Face ``Trainer``: ``Trainer(..., callbacks=[AdaptiveRuntimeCallback()])``.

- Each optimisation step is a ``train_step`` span (step = ``state.global_step``, with the
  epoch), the runtime's spans of its forward and backward passes nested under it.
- The runtime's history is saved in every checkpoint folder the Trainer writes
  (``checkpoint-<step>/adaptive_runtime_history.json``, on the main process) and loaded back
  when training resumes from that checkpoint (``trainer.train(resume_from_checkpoint=...)``
  with a checkpoint of ``output_dir``, or ``True`` for its latest), unless it was written on
  other hardware or library versions (one ``HistoryWarning``). (A callback is not told which
  checkpoint a run resumed from: the one of the resumed step in ``output_dir`` is read.)
- With several ranks (``torch.distributed`` initialised), every rank's history is merged at
  train begin and end (``rt.sync_history()``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ._training_hooks import HISTORY_FILE, StepSpans, missing_framework, sync_across_ranks
from .runtime import AdaptiveRuntime

try:
    from transformers import TrainerCallback
except ImportError as exc:
    raise missing_framework("transformers", "Hugging Face transformers") from exc

__all__ = ["HISTORY_FILE", "AdaptiveRuntimeCallback"]


def _checkpoint_folder(args: Any, state: Any) -> str:
    # (the Trainer's own naming: PREFIX_CHECKPOINT_DIR-<global step> under output_dir)
    return os.path.join(args.output_dir, f"checkpoint-{state.global_step}")


class AdaptiveRuntimeCallback(TrainerCallback):  # type: ignore[misc]
    """Step spans, history in checkpoint folders, ranks synced (see the module docstring).

    ``runtime``: default the process default runtime. ``attributes``: more attributes on
    every step span. ``sync``: merge the ranks' histories at train begin and end.
    """

    def __init__(self, runtime: AdaptiveRuntime | None = None, *,
                 attributes: Mapping[str, Any] | None = None, sync: bool = True) -> None:
        self._steps = StepSpans(runtime, attributes)
        self._sync = sync

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step:  # resumed: the checkpoint it resumed from may hold a history
            path = os.path.join(_checkpoint_folder(args, state), HISTORY_FILE)
            if os.path.isfile(path):
                self._steps.runtime.load_history(path)
        if self._sync:
            sync_across_ranks(self._steps.runtime)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._steps.end()
        if self._sync:
            sync_across_ranks(self._steps.runtime)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._steps.begin(int(state.global_step), epoch=int(state.epoch or 0))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._steps.end()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            folder = _checkpoint_folder(args, state)
            if os.path.isdir(folder):
                self._steps.runtime.save_history(os.path.join(folder, HISTORY_FILE))
