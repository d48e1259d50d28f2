"""The training-framework callbacks with the real frameworks, as users run them: PyTorch
Lightning's ``Trainer`` and Hugging Face's ``Trainer``, a tiny adapted model on the CPU, a few
steps, spans to the OTLP/JSON files. Each run is a fresh interpreter (the global OpenTelemetry
providers; a resumed run starts from nothing but its checkpoint)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from otlp_receiver import ReceivedSpan
from test_configure import clean_env, file_spans

from adaptive_runtime.history import parse_history_document
from adaptive_runtime.lightning import CHECKPOINT_KEY
from adaptive_runtime.transformers import HISTORY_FILE

MODEL = textwrap.dedent('''
    import json, os, sys
    import torch
    from torch import nn
    import adaptive_runtime as ar
    import adaptive_runtime.torch as art

    torch.manual_seed(0)
    ar.telemetry.configure(directory="telemetry")

    def network():
        return art.adapt(nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)))

    def history_size():
        return len(ar.get_runtime().history_snapshot())

    def result(**values):
        ar.telemetry.shutdown()
        print("RESULT " + json.dumps(values), flush=True)
''')

LIGHTNING = MODEL + textwrap.dedent('''
    import lightning.pytorch as pl
    from adaptive_runtime.lightning import AdaptiveRuntimeCallback

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = network()
        def training_step(self, batch, _index):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Probe(pl.Callback):  # what the runtime held when training started
        seen = None
        def on_train_start(self, trainer, module):
            Probe.seen = history_size()

    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    trainer = pl.Trainer(max_epochs=int(sys.argv[1]), accelerator="cpu", logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir="run", callbacks=[AdaptiveRuntimeCallback(), Probe()])
    resume = sys.argv[2] if len(sys.argv) > 2 else None
    trainer.fit(Tiny(), loader, ckpt_path=resume)
    result(steps=trainer.global_step, at_start=Probe.seen, at_end=history_size(),
           checkpoint=os.path.abspath(trainer.checkpoint_callback.best_model_path))
''')

TRANSFORMERS = MODEL + textwrap.dedent('''
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from adaptive_runtime.transformers import AdaptiveRuntimeCallback

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = network()
        def forward(self, x, labels):
            return {"loss": nn.functional.cross_entropy(self.net(x), labels)}

    class Probe(TrainerCallback):
        seen = None
        def on_train_begin(self, args, state, control, **kwargs):
            Probe.seen = history_size()

    data = [{"x": torch.randn(16), "labels": torch.tensor(i % 4)} for i in range(64)]
    args = TrainingArguments(output_dir="run", max_steps=int(sys.argv[1]), save_steps=3,
                             per_device_train_batch_size=8, report_to=[], use_cpu=True,
                             logging_strategy="no", disable_tqdm=True)
    trainer = Trainer(model=Tiny(), args=args, train_dataset=data,
                      callbacks=[AdaptiveRuntimeCallback(), Probe()])
    resume = sys.argv[2] if len(sys.argv) > 2 else None
    trainer.train(resume_from_checkpoint=resume)
    result(steps=trainer.state.global_step, at_start=Probe.seen, at_end=history_size())
''')


def _run(script: str, cwd: Path, *argv: str) -> dict:
    cwd.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", script, *argv], cwd=cwd, env=clean_env(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-6000:]
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(lines[-1][7:])


def _steps_with_children(folder: Path) -> dict[int, int]:
    """train.step -> how many adaptive spans are its children, over the exported steps."""
    spans = file_spans(folder / "telemetry" / "traces.jsonl")
    steps: dict[str, ReceivedSpan] = {s.span_id: s for s in spans if s.name == "train_step"}
    children = {int(s.attributes["train.step"]): 0 for s in steps.values()}
    for span in spans:
        parent = steps.get(span.parent_span_id)
        if parent is not None and span.name.startswith("adaptive."):
            children[int(parent.attributes["train.step"])] += 1
    return children


def test_lightning_steps_are_spans_and_checkpoints_carry_the_history(tmp_path: Path) -> None:
    first = _run(LIGHTNING, tmp_path / "first", "1")
    assert first["steps"] == 8 and first["at_start"] == 0 and first["at_end"] > 0
    children = _steps_with_children(tmp_path / "first")
    assert children and set(children) <= set(range(8)), children
    assert any(n > 0 for n in children.values()), "no adaptive span under a step"
    checkpoint = torch.load(first["checkpoint"], map_location="cpu", weights_only=True)
    saved = parse_history_document("checkpoint", checkpoint[CHECKPOINT_KEY].encode())
    assert len(saved.records) == first["at_end"]
    assert {r.operation.split("@")[0] for r in saved.records} >= {"linear", "gelu"}
    # a new process resuming from the checkpoint starts from what the first one learned
    resumed = _run(LIGHTNING, tmp_path / "resumed", "2", first["checkpoint"])
    assert resumed["steps"] == 16
    assert resumed["at_start"] == len(saved.records) > 0


def test_transformers_steps_are_spans_and_checkpoint_folders_hold_the_history(
        tmp_path: Path) -> None:
    first = _run(TRANSFORMERS, tmp_path / "first", "6")
    assert first["steps"] == 6 and first["at_start"] == 0 and first["at_end"] > 0
    children = _steps_with_children(tmp_path / "first")
    assert children and set(children) <= set(range(6)), children
    assert any(n > 0 for n in children.values()), "no adaptive span under a step"
    folders = sorted(p.name for p in (tmp_path / "first" / "run").glob("checkpoint-*"))
    assert folders == ["checkpoint-3", "checkpoint-6"]
    for folder in folders:
        path = tmp_path / "first" / "run" / folder / HISTORY_FILE
        assert parse_history_document(str(path), path.read_bytes()).records
    # the job restarted where it ran, resuming from its checkpoint at step 3 (a new process)
    at_three = tmp_path / "first" / "run" / "checkpoint-3"
    expected = parse_history_document("h", (at_three / HISTORY_FILE).read_bytes()).records
    resumed = _run(TRANSFORMERS, tmp_path / "first", "6", str(at_three))
    assert resumed["steps"] == 6
    assert resumed["at_start"] == len(expected) > 0


@pytest.mark.parametrize("module", ["lightning", "transformers"])
def test_a_missing_framework_is_one_error_naming_the_extra(module: str) -> None:
    hide = textwrap.dedent(f'''
        import sys
        sys.modules["{module}"] = None   # (as if not installed)
        sys.modules["pytorch_lightning"] = None
        try:
            import adaptive_runtime.{module}
        except ModuleNotFoundError as exc:
            print(type(exc).__name__, exc)
    ''')
    done = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ})
    assert f"pip install 'adaptive_runtime[{module}]'" in done.stdout, done
    assert done.stdout.startswith("MissingExtraError"), done.stdout
