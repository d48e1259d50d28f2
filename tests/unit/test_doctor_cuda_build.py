"""``doctor``'s warning for a CUDA build of torch on a machine where it finds no GPU (issue 41,
item 3), fed the facts it is made from: torch's version, ``torch.version.cuda``,
``torch.cuda.is_available()`` and the bytes the CUDA libraries take. (This machine's torch is
the CPU build: tests/integration/test_doctor_cli.py checks the real CLI gives no warning.)"""

from __future__ import annotations

from adaptive_runtime.cli.diagnosis import CPU_WHEEL_INDEX, cuda_build_warning


def test_a_cuda_build_without_a_gpu_names_the_cpu_wheels_and_the_disk_it_takes() -> None:
    warning = cuda_build_warning("2.5.1+cu124", "12.4", False, 4_312_000_000)
    assert warning is not None
    assert "torch 2.5.1+cu124 is a CUDA build (CUDA 12.4) but finds no GPU here" in warning
    assert "4.3 GB of disk" in warning
    assert f"pip install torch --index-url {CPU_WHEEL_INDEX}" in warning
    assert CPU_WHEEL_INDEX == "https://download.pytorch.org/whl/cpu"


def test_an_unknown_size_still_warns() -> None:
    warning = cuda_build_warning("2.13.0", "12.8", False, None)
    assert warning is not None and "gigabytes of disk" in warning


def test_no_warning_for_a_cpu_build_or_a_usable_gpu() -> None:
    assert cuda_build_warning("2.13.0+cpu", None, False, None) is None
    assert cuda_build_warning("2.5.1+cu124", "12.4", True, 4_312_000_000) is None
