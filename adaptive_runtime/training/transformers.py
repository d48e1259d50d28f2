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
- What the runtime learns is logged each time the Trainer logs (``logging_strategy``): the
  ``adaptive/*`` values of :mod:`adaptive_runtime._training_metrics` (keys committed, arm
  switches, exploring share, tracing cost), and with the Trainer's last log (its
  ``train_runtime``) the keys committed to each arm and, where every ``report_to``
  integration takes text (TensorBoard, W&B), each key's committed arm as a table. The
  ``report_to`` integrations are callbacks that run *before* any given to the Trainer, so a
  callback cannot add to what they were given: with ``trainer=`` the values go through
  ``trainer.log()``, which every callback and integration sees; without it they are added to
  the logs the callbacks after this one see (the console's), and one INFO line says so where
  ``report_to`` names integrations.
- A resumed run says what became of the checkpoint's history: one INFO line (logger
  ``adaptive_runtime.training``) and ``adaptive/history_restored`` (1 applied; 0 none in the
  checkpoint folder, or refused).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from ..runtime import AdaptiveRuntime
from ._hooks import HISTORY_FILE, StepSpans, missing_framework, sync_across_ranks
from ._metrics import LearningLog, committed_table, restored_message

try:
    from transformers import TrainerCallback
except ImportError as exc:
    raise missing_framework("transformers", "Hugging Face transformers") from exc

__all__ = ["HISTORY_FILE", "AdaptiveRuntimeCallback"]

_log = logging.getLogger("adaptive_runtime.training")
# report_to integrations that log a str value as text (TensorBoard's add_text, W&B's log);
# the others drop it with a warning (MLflow's), so they get the counts only
_TAKE_TEXT = frozenset({"tensorboard", "wandb"})
# a key of the Trainer's last log, made at the end of training (speed_metrics("train", ...))
_LAST_LOG_KEY = "train_runtime"


def _checkpoint_folder(args: Any, state: Any) -> str:
    # (the Trainer's own naming: PREFIX_CHECKPOINT_DIR-<global step> under output_dir)
    return os.path.join(args.output_dir, f"checkpoint-{state.global_step}")


class AdaptiveRuntimeCallback(TrainerCallback):  # type: ignore[misc]
    """Step spans, history in checkpoint folders, ranks synced, what the runtime learns in
    the Trainer's logs (see the module docstring).

    ``runtime``: default the process default runtime. ``attributes``: more attributes on
    every step span. ``sync``: merge the ranks' histories at train begin and end.
    ``trainer``: the ``Trainer`` this callback is added to, for its values to reach the
    ``report_to`` integrations (``trainer.add_callback(AdaptiveRuntimeCallback(
    trainer=trainer))``).
    """

    def __init__(self, runtime: AdaptiveRuntime | None = None, *,
                 attributes: Mapping[str, Any] | None = None, sync: bool = True,
                 trainer: Any = None) -> None:
        self._steps = StepSpans(runtime, attributes)
        self._sync = sync
        self._trainer = trainer
        self._learning = LearningLog()
        self._logged_step = -1
        self._logging = False  # inside our own trainer.log(): its on_log is ours
        self._told = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        runtime = self._steps.runtime
        if state.global_step:  # resumed: the checkpoint it resumed from may hold a history
            folder = os.path.abspath(_checkpoint_folder(args, state))
            path = os.path.join(folder, HISTORY_FILE)
            found = os.path.isfile(path)
            restored_message(self._learning, runtime, path if found else folder,
                             runtime.load_history(path) if found else None)
        if self._sync:
            sync_across_ranks(runtime)
        self._learning.start(runtime)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._steps.end()
        if self._sync:
            sync_across_ranks(self._steps.runtime)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._steps.begin(int(state.global_step), epoch=int(state.epoch or 0))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._steps.end()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        if self._logging or logs is None:
            return
        last = _LAST_LOG_KEY in logs
        if not last and state.global_step == self._logged_step:
            return  # (an evaluation's log at a step already read)
        self._logged_step = state.global_step
        runtime = self._steps.runtime
        values: dict[str, Any] = (self._learning.final(runtime) if last
                                  else self._learning.reading(runtime))
        report_to = list(getattr(args, "report_to", None) or ())
        if last and report_to and set(report_to) <= _TAKE_TEXT:
            values["adaptive/committed_arms"] = committed_table(self._learning.keys)
        if self._trainer is None:
            logs.update(values)
            if report_to and not self._told:
                self._told = True
                _log.info("adaptive_runtime: the report_to integrations (%s) run before "
                          "AdaptiveRuntimeCallback and do not get its adaptive/* values: "
                          "add it with trainer.add_callback(AdaptiveRuntimeCallback("
                          "trainer=trainer))", ", ".join(report_to))
            return
        self._logging = True
        try:
            self._trainer.log(values)
        finally:
            self._logging = False

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            folder = _checkpoint_folder(args, state)
            if os.path.isdir(folder):
                self._steps.runtime.save_history(os.path.join(folder, HISTORY_FILE))
