"""The training-framework callbacks with the real frameworks, as users run them: PyTorch
Lightning's ``Trainer`` and Hugging Face's ``Trainer``, a tiny adapted model on the CPU, a few
steps, spans to the OTLP/JSON files, what the runtime learned in the trainer's own loggers
(Lightning's ``CSVLogger``; what Hugging Face's ``on_log`` callbacks receive). Each run is a
fresh interpreter (the global OpenTelemetry providers; a resumed run starts from nothing but its
checkpoint)."""

from __future__ import annotations

import csv
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
from adaptive_runtime.training.lightning import CHECKPOINT_KEY
from adaptive_runtime.training.transformers import HISTORY_FILE

MODEL = textwrap.dedent('''
    import json, logging, os, sys
    import torch
    from torch import nn
    import adaptive_runtime as ar
    import adaptive_runtime.torch as art

    torch.manual_seed(0)
    ar.telemetry.configure(directory="telemetry")
    logging.basicConfig(format="LOG %(name)s %(message)s")  # (the package's INFO lines)
    logging.getLogger("adaptive_runtime").setLevel(logging.INFO)

    def network():
        return art.adapt(nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)))

    def history_size():
        return len(ar.get_runtime().history_snapshot())

    def keys():  # (operation, size bucket) pairs learned
        return len({(r.operation, r.size_bucket) for r in ar.get_runtime().history_snapshot()})

    def result(**values):
        ar.telemetry.shutdown()
        print("RESULT " + json.dumps(values), flush=True)
''')

LIGHTNING = MODEL + textwrap.dedent('''
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import CSVLogger
    from adaptive_runtime.training.lightning import AdaptiveRuntimeCallback

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
    trainer = pl.Trainer(max_epochs=int(sys.argv[1]), accelerator="cpu",
                         logger=CSVLogger("logs", name="", version=0), log_every_n_steps=4,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir="run", callbacks=[AdaptiveRuntimeCallback(), Probe()])
    resume = sys.argv[2] if len(sys.argv) > 2 else None
    trainer.fit(Tiny(), loader, ckpt_path=resume)
    result(steps=trainer.global_step, at_start=Probe.seen, at_end=history_size(), keys=keys(),
           checkpoint=os.path.abspath(trainer.checkpoint_callback.best_model_path),
           metrics=os.path.abspath(os.path.join(trainer.logger.log_dir, "metrics.csv")))
''')

TRANSFORMERS = MODEL + textwrap.dedent('''
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from adaptive_runtime.training.transformers import AdaptiveRuntimeCallback

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

    class Integration(TrainerCallback):
        # what a report_to integration receives: given to the Trainer's constructor, it runs
        # before the callbacks added later, as the Trainer puts its integrations first
        logged = []
        def on_log(self, args, state, control, logs=None, **kwargs):
            if any(k.startswith("adaptive/") for k in logs):
                Integration.logged.append({"step": state.global_step, **logs})

    data = [{"x": torch.randn(16), "labels": torch.tensor(i % 4)} for i in range(64)]
    args = TrainingArguments(output_dir="run", max_steps=int(sys.argv[1]), save_steps=3,
                             per_device_train_batch_size=8, report_to=[], use_cpu=True,
                             logging_steps=2, disable_tqdm=True)
    trainer = Trainer(model=Tiny(), args=args, train_dataset=data, callbacks=[Integration()])
    trainer.add_callback(AdaptiveRuntimeCallback(trainer=trainer))
    trainer.add_callback(Probe())
    resume = sys.argv[2] if len(sys.argv) > 2 else None
    trainer.train(resume_from_checkpoint=resume)
    result(steps=trainer.state.global_step, at_start=Probe.seen, at_end=history_size(),
           keys=keys(), logged=Integration.logged)
''')


def _run(script: str, cwd: Path, *argv: str) -> dict:
    """The script's RESULT, with ``log``: the package's log lines (``LOG <logger> <text>``)."""
    cwd.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", script, *argv], cwd=cwd, env=clean_env(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-6000:]
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads(lines[-1][7:])
    found["log"] = [ln[4:] for ln in done.stderr.splitlines() if ln.startswith("LOG ")]
    return found


def _csv_rows(path: str) -> list[dict[str, float]]:
    """The rows of a CSVLogger's metrics.csv holding ``adaptive/`` values, as numbers."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k: float(v) for k, v in row.items() if v != ""} for row in rows
            if any(k.startswith("adaptive/") and v != "" for k, v in row.items())]


def _check_readings(rows: list[dict[str, float]], keys: int) -> None:
    """Every reading holds the per-step values; the last one the keys per committed arm."""
    assert rows, "no adaptive/ values reached the logger"
    for row in rows:
        assert {"adaptive/keys", "adaptive/keys_committed", "adaptive/arm_switches",
                "adaptive/calls", "adaptive/exploring_share", "adaptive/spans_exported",
                "adaptive/spans_suppressed", "adaptive/traced_share",
                "adaptive/hot_operations"} <= set(row), row
        assert 0 <= row["adaptive/keys_committed"] <= row["adaptive/keys"]
        assert 0.0 <= row["adaptive/exploring_share"] <= 1.0
    assert rows[0]["adaptive/calls"] > 0
    last = rows[-1]
    assert last["adaptive/keys"] == keys  # what the runtime holds at the end
    per_arm = {k: v for k, v in last.items() if k.startswith("adaptive/committed_keys/")}
    assert set(per_arm) <= {f"adaptive/committed_keys/{a}" for a in ("gpu", "simd", "scalar")}
    assert sum(per_arm.values()) == last["adaptive/keys_committed"]


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


@pytest.fixture(scope="module")
def lightning_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict, dict]:
    """A Lightning run of one epoch; another process resuming from its checkpoint for a
    second; and one resuming from a copy of the checkpoint without the history, as if saved
    without the callback (the folder, and each run's RESULT)."""
    folder = tmp_path_factory.mktemp("lightning")
    first = _run(LIGHTNING, folder / "first", "1")
    resumed = _run(LIGHTNING, folder / "resumed", "2", first["checkpoint"])
    checkpoint = torch.load(first["checkpoint"], map_location="cpu", weights_only=True)
    del checkpoint[CHECKPOINT_KEY]
    torch.save(checkpoint, folder / "bare.ckpt")
    return folder, first, resumed, _run(LIGHTNING, folder / "bare", "2",
                                        str(folder / "bare.ckpt"))


@pytest.fixture(scope="module")
def transformers_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict,
                                                                         dict]:
    """A Hugging Face run of six steps; the job restarted where it ran, resuming from its
    checkpoint at step 3 (a new process); and again from that checkpoint with its history
    file removed, as if saved without the callback (the folder, and each run's RESULT)."""
    folder = tmp_path_factory.mktemp("transformers")
    first = _run(TRANSFORMERS, folder / "first", "6")
    at_three = folder / "first" / "run" / "checkpoint-3"
    resumed = _run(TRANSFORMERS, folder / "first", "6", str(at_three))
    bare_checkpoint = folder / "bare" / "run" / "checkpoint-3"
    bare_checkpoint.mkdir(parents=True)
    for item in at_three.iterdir():
        if item.name != HISTORY_FILE and item.is_file():
            (bare_checkpoint / item.name).write_bytes(item.read_bytes())
    return folder, first, resumed, _run(TRANSFORMERS, folder / "bare", "4",
                                        str(bare_checkpoint))


def test_lightning_steps_are_spans_and_checkpoints_carry_the_history(
        lightning_runs: tuple[Path, dict, dict, dict]) -> None:
    folder, first, resumed, _bare = lightning_runs
    assert first["steps"] == 8 and first["at_start"] == 0 and first["at_end"] > 0
    children = _steps_with_children(folder / "first")
    assert children and set(children) <= set(range(8)), children
    assert any(n > 0 for n in children.values()), "no adaptive span under a step"
    checkpoint = torch.load(first["checkpoint"], map_location="cpu", weights_only=True)
    saved = parse_history_document("checkpoint", checkpoint[CHECKPOINT_KEY].encode())
    assert len(saved.records) == first["at_end"]
    assert {r.operation.split("@")[0] for r in saved.records} >= {"linear", "gelu"}
    # a new process resuming from the checkpoint starts from what the first one learned
    assert resumed["steps"] == 16
    assert resumed["at_start"] == len(saved.records) > 0


def test_lightning_logs_what_the_runtime_learns_into_the_trainers_logger(
        lightning_runs: tuple[Path, dict, dict, dict]) -> None:
    _folder, first, _resumed, _bare = lightning_runs
    rows = _csv_rows(first["metrics"])
    # log_every_n_steps=4 over 8 batches: steps 4 and 8, and the end of training
    assert [row["step"] for row in rows] == [4.0, 8.0, 8.0], rows
    _check_readings(rows, first["keys"])
    assert "adaptive/history_restored" not in rows[0]  # (not a resumed run)


def test_lightning_says_whether_a_checkpoint_held_a_history(
        lightning_runs: tuple[Path, dict, dict, dict]) -> None:
    _folder, first, resumed, bare = lightning_runs
    restored = [ln for ln in resumed["log"] if "history restored from the checkpoint" in ln]
    assert restored and restored[0].startswith("adaptive_runtime."), resumed["log"]
    assert first["checkpoint"] in restored[0]
    rows = _csv_rows(resumed["metrics"])
    _check_readings(rows, resumed["keys"])
    assert rows[0]["adaptive/history_restored"] == 1.0
    # a checkpoint with no history (saved without the callback): said, and logged as 0
    assert bare["steps"] == 16 and bare["at_start"] == 0
    assert any("holds no adaptive_runtime history" in ln for ln in bare["log"]), bare["log"]
    assert _csv_rows(bare["metrics"])[0]["adaptive/history_restored"] == 0.0


def test_transformers_steps_are_spans_and_checkpoint_folders_hold_the_history(
        transformers_runs: tuple[Path, dict, dict, dict]) -> None:
    folder, first, resumed, _bare = transformers_runs
    assert first["steps"] == 6 and first["at_start"] == 0 and first["at_end"] > 0
    children = _steps_with_children(folder / "first")
    assert children and set(children) <= set(range(6)), children
    assert any(n > 0 for n in children.values()), "no adaptive span under a step"
    folders = sorted(p.name for p in (folder / "first" / "run").glob("checkpoint-*"))
    assert folders == ["checkpoint-3", "checkpoint-6"]
    for name in folders:
        path = folder / "first" / "run" / name / HISTORY_FILE
        assert parse_history_document(str(path), path.read_bytes()).records
    at_three = folder / "first" / "run" / "checkpoint-3" / HISTORY_FILE
    expected = parse_history_document("h", at_three.read_bytes()).records
    assert resumed["steps"] == 6
    assert resumed["at_start"] == len(expected) > 0


def test_transformers_report_to_integrations_get_what_the_runtime_learns(
        transformers_runs: tuple[Path, dict, dict, dict]) -> None:
    _folder, first, _resumed, _bare = transformers_runs
    # logging_steps=2: at each logging step, and at the Trainer's last log its committed arms
    assert [row["step"] for row in first["logged"]] == [2, 4, 6, 6], first["logged"]
    _check_readings(first["logged"], first["keys"])


def test_transformers_says_whether_a_checkpoint_held_a_history(
        transformers_runs: tuple[Path, dict, dict, dict]) -> None:
    folder, _first, resumed, bare = transformers_runs
    restored = [ln for ln in resumed["log"] if "history restored from" in ln]
    at_three = folder / "first" / "run" / "checkpoint-3"
    assert restored and str(at_three) in restored[0], resumed["log"]
    assert resumed["logged"][0]["adaptive/history_restored"] == 1.0
    # a checkpoint with no history (saved without the callback): said, and logged as 0
    assert bare["steps"] == 4 and bare["at_start"] == 0
    assert any("holds no adaptive_runtime history" in ln for ln in bare["log"]), bare["log"]
    assert bare["logged"][0]["adaptive/history_restored"] == 0.0


@pytest.mark.parametrize("module", ["lightning", "transformers"])
def test_a_missing_framework_is_one_error_naming_the_extra(module: str) -> None:
    hide = textwrap.dedent(f'''
        import sys
        sys.modules["{module}"] = None   # (as if not installed)
        sys.modules["pytorch_lightning"] = None
        try:
            import adaptive_runtime.training.{module}
        except ModuleNotFoundError as exc:
            print(type(exc).__name__, exc)
    ''')
    done = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ})
    assert f"pip install 'adaptive_runtime[{module}]'" in done.stdout, done
    assert done.stdout.startswith("MissingExtraError"), done.stdout
