"""Every fenced ``python`` block of README.md and docs/*.md runs as a user pastes it.

Each block runs on its own: written to a file and run by this environment's ``python`` in a
fresh process, its working directory a temporary folder (the files it writes land there),
telemetry's files written there too (``ADAPTIVE_RUNTIME_TELEMETRY_DIR``), none of the test
run's ``OTEL_*`` or ``ADAPTIVE_RUNTIME_*`` settings, within ``TIMEOUT_S``. It must exit 0 and
write nothing to stderr: no traceback, no warning, no arm quarantined for a wrong result.

A block that cannot run on its own, because it names what only the reader has (their model,
their loader, their kernels), says so on its first line, where the reader sees it::

    # fragment: <what it needs from you>

A fragment is compiled (its syntax checked), not run. The shell blocks are held to the pip
path: they run ``adaptive-runtime`` and ``python`` from the environment the package was
installed into, never the ``make`` path's ``.venv/bin/``, and README's ``replay`` command is
run on the calls its ``record_calls`` block records.

(The blocks run side by side, each process on its own, so that the file takes about as long
as its slowest few blocks: most of a torch block's time is importing torch.)
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FRAGMENT = "# fragment:"
TIMEOUT_S = 120
PARALLEL = 4
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is (``README.md:101``), its language and its text."""

    where: str
    language: str
    code: str

    @property
    def fragment(self) -> bool:
        return self.code.startswith(FRAGMENT)


def _blocks(language: str) -> list[Block]:
    found = []
    for path in DOCUMENTS:
        text = path.read_text()
        for match in _FENCE.finditer(text):
            if match.group(1) == language:
                line = text.count("\n", 0, match.start()) + 1
                found.append(Block(f"{path.relative_to(ROOT)}:{line}", language,
                                   match.group(2)))
    return found


PYTHON_BLOCKS = _blocks("python")


def _environment(folder: Path) -> dict[str, str]:
    """The test run's environment without its telemetry and runtime settings, telemetry's
    files in ``folder``, and this environment's scripts first on PATH (``adaptive-runtime``)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "ADAPTIVE_RUNTIME_"))}
    env["ADAPTIVE_RUNTIME_TELEMETRY_DIR"] = str(folder / "telemetry")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@dataclass(frozen=True)
class Ran:
    """A block's run: the folder it ran in and what the process did."""

    folder: Path
    done: subprocess.CompletedProcess[str]


def _run_python(block: Block, folder: Path) -> Ran:
    folder.mkdir(parents=True)
    script = folder / "snippet.py"
    script.write_text(block.code)
    done = subprocess.run([sys.executable, str(script)], cwd=folder, env=_environment(folder),
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    return Ran(folder, done)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """Every block that is not a fragment, run (each in its own process and folder)."""
    base = tmp_path_factory.mktemp("snippets")
    runnable = [b for b in PYTHON_BLOCKS if not b.fragment]
    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = {b.where: pool.submit(_run_python, b, base / f"block{i}")
                   for i, b in enumerate(runnable)}
        return {where: future.result() for where, future in futures.items()}


def test_the_documents_hold_python_blocks_to_run() -> None:
    runnable = [b for b in PYTHON_BLOCKS if not b.fragment]
    assert len(runnable) >= 10, [b.where for b in PYTHON_BLOCKS]
    assert any(b.where.startswith("README.md") for b in runnable)


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[b.where for b in PYTHON_BLOCKS])
def test_each_python_block_runs_as_pasted_or_is_marked_a_fragment(
        block: Block, runs: dict[str, Ran]) -> None:
    if block.fragment:
        compile(block.code, block.where, "exec")  # (a fragment still has to be Python)
        return
    done = runs[block.where].done
    assert done.returncode == 0, f"{block.where} failed as pasted:\n{done.stderr[-3000:]}"
    assert done.stderr == "", f"{block.where} wrote to stderr:\n{done.stderr[-3000:]}"


def test_no_shell_block_runs_the_make_paths_venv() -> None:
    """``.venv/bin/...`` exists only where ``make`` made ``.venv``; after ``pip install`` the
    commands are ``adaptive-runtime`` and ``python`` (README says where the make path differs)."""
    offending = [f"{b.where}: {line}" for b in _blocks("sh") for line in b.code.splitlines()
                 if ".venv/bin/" in line]
    assert offending == []


def test_readmes_replay_command_runs_on_what_its_record_calls_block_records(
        runs: dict[str, Ran]) -> None:
    record = next(b for b in PYTHON_BLOCKS
                  if b.where.startswith("README.md") and "record_calls(" in b.code)
    ran = runs[record.where]
    assert ran.done.returncode == 0, ran.done.stderr[-3000:]
    assert (ran.folder / "calls.jsonl").stat().st_size > 0
    command = next(line for b in _blocks("sh") if b.where.startswith("README.md")
                   for line in b.code.splitlines() if line.startswith("adaptive-runtime replay"))
    replay = subprocess.run(shlex.split(command), cwd=ran.folder, env=_environment(ran.folder),
                            capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert replay.returncode == 0, replay.stderr[-3000:]
    assert "switch_margin=0.1" in replay.stdout, replay.stdout
