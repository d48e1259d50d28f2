"""The training wing: what a training loop wraps around its steps.

``train_step`` (``ar.train_step``) makes each step a span that parents the step's decisions and
can sync the ranks' history; ``lightning`` and ``transformers`` hold the callbacks for
PyTorch Lightning's and Hugging Face's trainers (each imports its framework: import the one
you use). This wing sits above the runtime and imports it directly.
"""

from __future__ import annotations

from .steps import TrainStep, train_step

__all__ = ["TrainStep", "train_step"]
