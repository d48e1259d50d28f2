"""A history file is compared only on what its keys depend on: a torch-only history survives
JAX being installed or upgraded (issue 41, finding 4), and a refused file names the difference
that refused it. Histories are learned by a real runtime on real torch tensors; the other
machine is simulated through the fingerprint's own inputs (the file's recorded fingerprint,
or an installed distribution's metadata in a child process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import adaptive_runtime as ar
from adaptive_runtime.history import read_history_file
from adaptive_runtime.history.depends import (
    fingerprint_differences,
    record_fields,
)
from adaptive_runtime.history.fingerprint import hardware_fingerprint
from adaptive_runtime.kernels import known_operations
from adaptive_runtime.operations import DeviceProbe

Backend = ar.Backend


def _torch_history(tmp_path: Path) -> Path:
    """A history learned on torch CPU tensors, saved: its keys are all ``relu@torch``."""
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False, choose_threads=False))
    x = torch.linspace(-1.0, 1.0, 512)
    for _ in range(30):
        rt.run("relu", x)
    path = tmp_path / "torch-history.json"
    rt.save_history(path)
    operations = {r.operation for r in read_history_file(path).records}
    assert operations == {"relu@torch"}
    return path


def _rewrite(path: Path, **fingerprint: object) -> None:
    doc = json.loads(path.read_text())
    doc["fingerprint"].update(fingerprint)
    path.write_text(json.dumps(doc))


def _another(version: object) -> str:
    """A version of a library other than ``version`` (this machine's)."""
    return "0.4.1" if version != "0.4.1" else "0.4.2"


def _fresh() -> ar.AdaptiveRuntime:
    return ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False)


def test_a_torch_only_history_applies_after_jax_changes(tmp_path: Path) -> None:
    path = _torch_history(tmp_path)
    here = hardware_fingerprint()
    _rewrite(path, jax=_another(here["jax"]))  # (written before JAX was installed or upgraded)
    rt = _fresh()
    assert rt.load_history(path) is True  # (and no HistoryWarning: warnings are errors here)
    assert {r.operation for r in rt.history_snapshot()} == {"relu@torch"}


def test_a_torch_only_history_is_refused_when_torch_differs_naming_only_torch(
        tmp_path: Path) -> None:
    path = _torch_history(tmp_path)
    here = hardware_fingerprint()
    _rewrite(path, torch="2.12.0", jax=_another(here["jax"]))
    rt = _fresh()
    with pytest.warns(ar.HistoryWarning) as caught:
        assert rt.load_history(path) is False
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"torch {here['torch']} here, 2.12.0 in file" in message
    why = message.split("not applied:", 1)[1]  # (the path names the test: "torch", "jax")
    assert "(1 key of the file depends on it, e.g. 'relu@torch')" in why
    assert "jax" not in why  # (the one difference that refused it, not JAX's)
    assert rt.history_snapshot() == []


def test_a_torch_only_history_applies_where_another_jax_is_installed(tmp_path: Path) -> None:
    """The child process has another JAX installed, as far as package metadata (what the
    fingerprint reads) says: a ``jax-0.99.0.dist-info`` ahead of site-packages on its path."""
    torch_file = _torch_history(tmp_path)
    writer = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False)
    for _ in range(3):
        writer.record_performance("gelu@jax", 4096, "simd", 20.0)
    jax_file = tmp_path / "jax-history.json"
    writer.save_history(jax_file)
    site = tmp_path / "site"
    (site / "jax-0.99.0.dist-info").mkdir(parents=True)
    (site / "jax-0.99.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: jax\nVersion: 0.99.0\n")
    code = textwrap.dedent("""
        import sys, warnings
        import adaptive_runtime as ar
        from adaptive_runtime.history.fingerprint import hardware_fingerprint
        print(hardware_fingerprint()["jax"])
        rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False)
        print(rt.load_history(sys.argv[1]))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            print(rt.load_history(sys.argv[2]))
        print(*(str(w.message) for w in caught), sep="\\n")
    """)
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-c", code, str(torch_file), str(jax_file)],
                          env={**os.environ, "PYTHONPATH": path}, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    version, torch_applied, jax_applied, *warned = done.stdout.splitlines()
    assert (version, torch_applied, jax_applied) == ("0.99.0", "True", "False")
    assert len(warned) == 1
    assert f"jax 0.99.0 here, {hardware_fingerprint()['jax']} in file" in warned[0]
    why = warned[0].split("not applied:", 1)[1]
    assert "(1 key of the file depends on it, e.g. 'gelu@jax')" in why and "torch" not in why


def test_an_operation_of_the_programs_own_compares_every_library(tmp_path: Path) -> None:
    source = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False)
    for _ in range(3):
        source.record_performance("huber", 1000, "simd", 10.0)
    path = tmp_path / "own.json"
    source.save_history(path)
    _rewrite(path, jax=_another(hardware_fingerprint()["jax"]))
    with pytest.warns(ar.HistoryWarning, match="an operation of the program's own") as caught:
        assert _fresh().load_history(path) is False
    why = str(caught[0].message).split("not applied:", 1)[1]
    assert why.startswith(" measured on other hardware or library versions: jax ")
    assert "e.g. 'huber', an operation of the program's own" in why


def test_the_gpu_is_compared_only_for_records_that_ran_on_it(tmp_path: Path) -> None:
    source = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False,
                                devices=DeviceProbe(gpu=True))
    for _ in range(3):
        source.record_performance("dot", 1000, "simd", 10.0)
    cpu_only = tmp_path / "cpu.json"
    source.save_history(cpu_only)
    _rewrite(cpu_only, gpu="Imaginary GPU", gpu_driver="999.1")
    assert _fresh().load_history(cpu_only) is True
    for _ in range(3):
        source.record_performance("matmul", 10**6, "gpu", 300.0)
    with_gpu = tmp_path / "gpu.json"
    source.save_history(with_gpu)
    _rewrite(with_gpu, gpu="Imaginary GPU")
    if hardware_fingerprint()["gpu"] is not None:  # (unknown here: not compared, as documented)
        with pytest.warns(ar.HistoryWarning, match="'Imaginary GPU' in file"):
            assert _fresh().load_history(with_gpu) is False


@pytest.mark.parametrize(("operation", "backend", "fields"), [
    ("linear@torch:bfloat16+grad", Backend.SIMD, ("torch",)),
    ("gelu@jax:float16", Backend.GPU, ("jax", "gpu", "gpu_driver")),
    ("relu@device", Backend.SIMD, ("torch", "gpu", "gpu_driver")),
    ("relu", Backend.SCALAR, ()),
    ("gelu", Backend.SIMD, ("torch",)),
    ("matmul", Backend.GPU, ("torch", "gpu", "gpu_driver")),
    ("huber", Backend.SIMD, ("torch", "jax")),
    ("huber@mine", Backend.SIMD, ("torch", "jax")),
])
def test_what_a_record_depends_on_is_read_from_its_key(operation: str, backend: ar.Backend,
                                                       fields: tuple[str, ...]) -> None:
    assert record_fields(operation, backend, known_operations()) == fields


def test_the_builtin_lists_match_the_registry() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    assert set(rt.operations) == known_operations().names
    # (torch is installed here: the implementations that run torch on numpy arrays exist)
    assert {name for name in rt.operations
            if any(impl.needs == "torch" for impl in rt.operation(name).implementations())
            } == known_operations().through_torch


def test_fingerprint_differences_list_always_compared_fields_without_a_key() -> None:
    here = {"cpu": "AMD EPYC", "torch": "2.13.0", "jax": "0.10.2", "numba": "0.61.0"}
    there = {"cpu": "Intel Xeon", "torch": "2.12.0", "jax": "none", "numba": "0.60.0"}
    assert fingerprint_differences(here, there, []) == [
        "cpu model 'AMD EPYC' here, 'Intel Xeon' in file", "numba 0.61.0 here, 0.60.0 in file"]
