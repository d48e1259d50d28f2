"""History files that know their machine: fingerprint, force switch, corrupt files moved aside,
atomic durable writes, periodic saves, and no saving from a forked child."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from internals import history_saver

import adaptive_runtime as ar
from adaptive_runtime.history import (
    HISTORY_FORMAT,
    LEGACY_HISTORY_FORMAT,
    HistoryStore,
    move_aside,
    read_history_file,
)
from adaptive_runtime.history import file as history_module
from adaptive_runtime.history.fingerprint import differences, hardware_fingerprint
from adaptive_runtime.operations import DeviceProbe

Backend = ar.Backend
P = "ADAPTIVE_RUNTIME_"


@pytest.fixture(autouse=True)
def _no_history_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HISTORY", "HISTORY_FORCE", "HISTORY_SAVE_INTERVAL_S"):
        monkeypatch.delenv(P + var, raising=False)


def _rt(**config: object) -> ar.AdaptiveRuntime:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False, **config), builtin_ops=False,
                            devices=DeviceProbe(gpu=True))
    saver = history_saver(rt)
    if saver is not None:
        # (a test's runtime must not save into its tmp_path at interpreter exit)
        atexit.unregister(saver.at_exit)
    return rt


def _stop(rt: ar.AdaptiveRuntime) -> None:
    saver = history_saver(rt)
    if saver is not None:
        saver.stop()


def _learned(**config: object) -> ar.AdaptiveRuntime:
    rt = _rt(**config)
    for i in range(6):
        rt.record_performance("dot", 1000, "simd", 10.0 + i % 2)
        rt.record_performance("dot", 1000, "scalar", 40.0)
        rt.record_performance("matmul", 10**6, "gpu", 300.0)
    return rt


def _rows(rt: ar.AdaptiveRuntime) -> list[tuple[object, ...]]:
    return [(r.operation, r.size_bucket, r.backend, r.samples, r.mean_us, r.failures)
            for r in rt.history_snapshot()]


def _saved(tmp_path: Path, name: str = "history.json") -> tuple[Path, ar.AdaptiveRuntime]:
    source = _learned()
    path = tmp_path / name
    source.save_history(path)
    return path, source


def _rewrite(path: Path, **fingerprint: object) -> None:
    doc = json.loads(path.read_text())
    doc["fingerprint"].update(fingerprint)
    path.write_text(json.dumps(doc))


def _corrupt_files(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".corrupt-*"))


# --------------------------------------------------------------------------- the fingerprint


def test_fingerprint_is_a_small_json_object_computed_once() -> None:
    fp = hardware_fingerprint()
    assert json.loads(json.dumps(fp)) == fp
    assert {"cpu", "cpu_count", "blas", "numpy", "numba", "torch", "jax", "gpu"} <= set(fp)
    assert all(v is None or isinstance(v, str | int) for v in fp.values())
    assert hardware_fingerprint() == fp
    fp["cpu"] = "changed by the caller"
    assert hardware_fingerprint()["cpu"] != "changed by the caller"  # (a copy each call)


def test_fingerprint_imports_neither_torch_nor_jax() -> None:
    code = ("import sys\nfrom adaptive_runtime.history.fingerprint import hardware_fingerprint\n"
            "fp = hardware_fingerprint()\n"
            "assert 'torch' not in sys.modules and 'jax' not in sys.modules, sorted(sys.modules)\n"
            "print(fp['torch'], fp['jax'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def test_fingerprint_records_the_thread_counts_of_numba_and_torch_without_comparing() -> None:
    import numba
    import torch

    fp = hardware_fingerprint()
    assert fp["numba_threads"] == numba.config.NUMBA_NUM_THREADS
    assert fp["torch_threads"] == torch.get_num_threads()
    before = torch.get_num_threads()
    torch.set_num_threads(before + 1)  # (as a DataLoader worker sets 1)
    try:
        changed = hardware_fingerprint()
    finally:
        torch.set_num_threads(before)
    assert changed["torch_threads"] == before + 1
    assert differences(changed, fp) == []  # (its parent's file still loads)


def test_differences_name_each_field_and_skip_unknown_ones() -> None:
    here = {"cpu": "AMD EPYC", "torch": "2.13.0", "numpy": "2.0.0", "gpu": None}
    there = {"cpu": "Intel Xeon", "torch": "2.12.0", "numpy": "2.0.0", "gpu": "H100"}
    assert differences(here, there) == ["cpu model 'AMD EPYC' here, 'Intel Xeon' in file",
                                        "torch 2.13.0 here, 2.12.0 in file"]
    assert differences(here, dict(here)) == []


# --------------------------------------------------------------------------- same machine


def test_round_trip_on_the_same_machine_applies(tmp_path: Path) -> None:
    path, source = _saved(tmp_path)
    doc = json.loads(path.read_text())
    assert doc["format"] == HISTORY_FORMAT
    assert doc["fingerprint"] == json.loads(json.dumps(hardware_fingerprint()))
    loaded = _rt()
    assert loaded.load_history(path) is True
    assert _rows(loaded) == _rows(source)
    assert loaded.get_best_backend("dot", 1000) is Backend.SIMD


def test_history_path_at_start_applies_a_file_from_this_machine(tmp_path: Path) -> None:
    path, source = _saved(tmp_path)
    rt = _rt(history_path=str(path))
    try:
        assert _rows(rt) == _rows(source)
    finally:
        _stop(rt)


# --------------------------------------------------------------------------- other machines


def test_a_file_from_other_hardware_is_not_applied_with_one_warning(tmp_path: Path) -> None:
    path, _ = _saved(tmp_path)
    _rewrite(path, cpu="Imaginary CPU 9000", torch="0.0.1")
    rt = _rt()
    with pytest.warns(ar.HistoryWarning) as caught:
        assert rt.load_history(path) is False
    assert len(caught) == 1
    message = str(caught[0].message)
    assert str(path) in message
    assert "cpu model" in message and "'Imaginary CPU 9000' in file" in message
    assert "torch" in message and "0.0.1 in file" in message
    assert rt.history_snapshot() == []


def test_a_file_from_other_hardware_at_start_is_warned_about_and_left(tmp_path: Path) -> None:
    path, _ = _saved(tmp_path)
    _rewrite(path, numpy="0.0.1")
    before = path.read_bytes()
    with pytest.warns(ar.HistoryWarning, match="numpy") as caught:
        rt = _rt(history_path=str(path), history_save_interval_s=0)
    try:
        assert len(caught) == 1
        assert str(path) in str(caught[0].message)
        assert rt.history_snapshot() == []
        assert path.read_bytes() == before  # not applied, not moved: nothing wrong with it
        assert _corrupt_files(path) == []
    finally:
        _stop(rt)


def test_force_applies_a_file_from_other_hardware(tmp_path: Path) -> None:
    path, source = _saved(tmp_path)
    _rewrite(path, cpu="Imaginary CPU 9000")
    rt = _rt()
    assert rt.load_history(path, force=True) is True  # (and no warning: they are errors here)
    assert _rows(rt) == _rows(source)


def test_the_force_switch_in_the_environment_applies_it(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path, source = _saved(tmp_path)
    _rewrite(path, torch="0.0.1", gpu="Imaginary GPU")
    monkeypatch.setenv(P + "HISTORY", str(path))
    monkeypatch.setenv(P + "HISTORY_FORCE", "1")
    monkeypatch.setenv(P + "HISTORY_SAVE_INTERVAL_S", "0")
    rt = ar.AdaptiveRuntime(builtin_ops=False, devices=DeviceProbe(gpu=True))
    try:
        atexit.unregister(history_saver(rt).at_exit)
        assert rt.config.history_force is True
        assert _rows(rt) == _rows(source)
        # the switch also applies to explicit loads
        assert rt.load_history(path) is True
    finally:
        _stop(rt)


@pytest.mark.parametrize("raw", ["maybe", "2", "forced"])
def test_a_bad_force_switch_names_the_variable(raw: str) -> None:
    with pytest.raises(ar.ConfigError, match=P + "HISTORY_FORCE"):
        ar.RuntimeConfig.from_env({P + "HISTORY_FORCE": raw})


@pytest.mark.parametrize("raw", ["-1", "soon", "nan", "inf"])
def test_a_bad_save_interval_names_the_variable(raw: str) -> None:
    with pytest.raises(ar.ConfigError, match=P + "HISTORY_SAVE_INTERVAL_S"):
        ar.RuntimeConfig.from_env({P + "HISTORY_SAVE_INTERVAL_S": raw})


def test_history_config_fields_are_validated() -> None:
    with pytest.raises(ar.ConfigError, match="history_force"):
        ar.RuntimeConfig(history_force="yes")  # type: ignore[arg-type]
    with pytest.raises(ar.ConfigError, match="history_save_interval_s"):
        ar.RuntimeConfig(history_save_interval_s=-1.0)
    assert ar.RuntimeConfig().history_save_interval_s == 60.0
    assert ar.RuntimeConfig.from_env(
        {P + "HISTORY_SAVE_INTERVAL_S": "2.5"}).history_save_interval_s == 2.5


def _legacy(path: Path, source: ar.AdaptiveRuntime) -> None:
    rows = [history_module.record_to_json(r) for r in source.history_snapshot()]
    path.write_text(json.dumps({"format": LEGACY_HISTORY_FORMAT, "records": rows}))


def test_a_file_from_before_fingerprints_is_from_an_unknown_machine(tmp_path: Path) -> None:
    source = _learned()
    path = tmp_path / "old.json"
    _legacy(path, source)
    rt = _rt()
    with pytest.warns(ar.HistoryWarning, match="no hardware fingerprint") as caught:
        assert rt.load_history(path) is False
    assert len(caught) == 1 and str(path) in str(caught[0].message)
    assert rt.history_snapshot() == []
    assert rt.load_history(path, force=True) is True
    assert _rows(rt) == _rows(source)


# --------------------------------------------------------------------------- bad files


def _truncated(tmp_path: Path) -> bytes:
    path, _ = _saved(tmp_path, "whole.json")
    data = path.read_bytes()
    return data[: len(data) // 2]


BAD = {
    "truncated": None,  # (half of a real file: made in the test)
    "empty": b"",
    "garbage": b"\x00\xff\x13 not a history \x81",
    "not-json": b"{format: history}",
    "wrong-schema": b'{"format": "adaptive_runtime.history/99", "records": []}',
    "other-document": b'{"name": "something else"}',
    "not-an-object": b"[1, 2, 3]",
    "bad-fingerprint": b'{"format": "adaptive_runtime.history/2", "fingerprint": [1], '
                       b'"records": []}',
    "bad-record": b'{"format": "adaptive_runtime.history/2", "fingerprint": {}, '
                  b'"records": [{"operation": "x", "size_bucket": "three"}]}',
    "deeply-nested": b"[" * 100_000,
    "repeated-key": b'{"format": "adaptive_runtime.history/2", "format": "x", "records": []}',
    "huge-number": b'{"format": "adaptive_runtime.history/2", "fingerprint": {"cpu_count": '
                   + b"9" * 5000 + b'}, "records": []}',
    "not-utf8": b'{"format": "adaptive_runtime.history/2\xff"}',
}


def _bad_bytes(kind: str, tmp_path: Path) -> bytes:
    content = BAD[kind]
    return _truncated(tmp_path) if content is None else content


@pytest.mark.parametrize("kind", list(BAD))
def test_a_bad_file_at_start_warns_once_moves_it_aside_and_starts_cold(
        tmp_path: Path, kind: str) -> None:
    content = _bad_bytes(kind, tmp_path)
    path = tmp_path / "history.json"
    path.write_bytes(content)
    with pytest.warns(ar.HistoryWarning) as caught:
        rt = _rt(history_path=str(path), history_save_interval_s=0)
    try:
        assert len(caught) == 1
        message = str(caught[0].message)
        assert str(path) in message and "moved aside" in message
        assert rt.history_snapshot() == []
        assert not path.exists()
        (moved,) = _corrupt_files(path)
        assert moved.read_bytes() == content
        assert str(moved) in message
    finally:
        _stop(rt)


def test_a_file_over_the_size_limit_is_refused_as_corrupt(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = _saved(tmp_path)
    content = path.read_bytes()
    monkeypatch.setattr(history_module, "MAX_HISTORY_FILE_BYTES", len(content) - 1)
    with pytest.raises(ValueError, match="over"):
        read_history_file(path)
    with pytest.warns(ar.HistoryWarning, match="moved aside") as caught:
        rt = _rt(history_path=str(path), history_save_interval_s=0)
    try:
        assert len(caught) == 1
        assert rt.history_snapshot() == []
        (moved,) = _corrupt_files(path)
        assert moved.read_bytes() == content
    finally:
        _stop(rt)


@pytest.mark.parametrize("kind", ["truncated", "garbage", "wrong-schema"])
def test_an_explicit_load_of_a_bad_file_raises_and_leaves_it(tmp_path: Path, kind: str) -> None:
    content = _bad_bytes(kind, tmp_path)
    path = tmp_path / "history.json"
    path.write_bytes(content)
    rt = _rt()
    with pytest.raises(ValueError) as info:
        rt.load_history(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == content
    assert _corrupt_files(path) == []


def test_moving_aside_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    moved = []
    for i in range(3):
        path.write_bytes(b"bad %d" % i)
        moved.append(move_aside(path))
    assert len(set(moved)) == 3
    assert [Path(m).read_bytes() for m in moved] == [b"bad 0", b"bad 1", b"bad 2"]
    assert not path.exists()
    with pytest.raises(FileNotFoundError):
        move_aside(path)


def test_an_unreadable_history_path_warns_and_starts_cold(tmp_path: Path) -> None:
    path = tmp_path / "a-directory"
    path.mkdir()
    with pytest.warns(ar.HistoryWarning, match="could not be read") as caught:
        rt = _rt(history_path=str(path), history_save_interval_s=0)
    try:
        assert len(caught) == 1
        assert rt.history_snapshot() == []
        assert path.is_dir()
    finally:
        _stop(rt)


# --------------------------------------------------------------------------- atomic writes


@pytest.mark.parametrize("step", ["fsync", "replace"])
def test_a_failed_write_leaves_the_previous_file_intact(tmp_path: Path, step: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path, source = _saved(tmp_path)
    before = path.read_bytes()
    rt = _learned()
    rt.record_performance("softmax", 4096, "simd", 12.0)

    def fail(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(history_module.os, step, fail)
    with pytest.raises(OSError, match="No space left"):
        rt.save_history(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.json"]  # no temporary file
    loaded = _rt()
    assert loaded.load_history(path) is True
    assert _rows(loaded) == _rows(source)


def test_a_save_keeps_the_file_permissions(tmp_path: Path) -> None:
    path, _ = _saved(tmp_path)
    os.chmod(path, 0o640)
    _learned().save_history(path)
    assert path.stat().st_mode & 0o777 == 0o640


def test_saving_creates_the_directory_and_one_record_per_line(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "dir" / "h.json"
    rt = _learned()
    rt.save_history(path)
    lines = path.read_text().splitlines()
    assert len(lines) == 2 + len(rt.history_snapshot())
    assert read_history_file(path).fingerprint == json.loads(json.dumps(hardware_fingerprint()))


# --------------------------------------------------------------------------- periodic saves


def _wait_for(predicate, deadline_s: float = 30.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_history_is_saved_periodically_while_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    rt = _rt(history_path=str(path), history_save_interval_s=0.05)
    try:
        assert not path.exists()  # nothing learned, nothing saved
        rt.record_performance("dot", 1000, "simd", 10.0)

        def saved_samples() -> int:
            try:
                return sum(r.samples for r in read_history_file(path).records)
            except (OSError, ValueError):
                return -1

        assert _wait_for(lambda: saved_samples() == 1)
        rt.record_performance("dot", 1000, "simd", 11.0)
        rt.record_performance("dot", 1000, "scalar", 30.0)
        assert _wait_for(lambda: saved_samples() == 3)
    finally:
        _stop(rt)


def test_the_exit_save_writes_only_a_changed_history(tmp_path: Path) -> None:
    path, _ = _saved(tmp_path)
    rt = _rt(history_path=str(path), history_save_interval_s=0)
    try:
        os.utime(path, (0, 0))
        history_saver(rt).save_if_changed()  # what the exit handler does
        assert path.stat().st_mtime == 0  # loaded and unchanged: not rewritten
        rt.record_performance("dot", 1000, "simd", 10.0)
        history_saver(rt).save_if_changed()
        assert path.stat().st_mtime != 0
        assert sum(r.samples for r in read_history_file(path).records) == 19
    finally:
        _stop(rt)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_never_saves_to_the_parents_file(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    rt = _rt(history_path=str(path), history_save_interval_s=0)
    try:
        rt.record_performance("dot", 1000, "simd", 10.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # (fork with threads, 3.12+)
            # (JAX warns at fork when an earlier test started its threads: not this test's)
            warnings.simplefilter("ignore", RuntimeWarning)
            pid = os.fork()
        if pid == 0:  # the child: learn, then try both ways a save happens
            code = 1
            try:
                rt.record_performance("dot", 1000, "simd", 12.0)
                history_saver(rt).save_if_changed()
                history_saver(rt).at_exit()
                code = 0 if not path.exists() else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert not path.exists()
        history_saver(rt).save_if_changed()  # the parent still saves
        assert sum(r.samples for r in read_history_file(path).records) == 1
    finally:
        _stop(rt)


# --------------------------------------------------------------------------- stamps


def test_timings_are_stamped_in_order_whatever_the_clock() -> None:
    store = HistoryStore(10, wall_clock=lambda: 100.0)  # a clock that never moves
    key = store.key("op", 5)
    store.record(key, Backend.SIMD, 10.0, 0)
    store.record(key, Backend.SCALAR, 10.0, 0)
    assert key.arms[Backend.SIMD].last_update < key.arms[Backend.SCALAR].last_update
    # a merged time from a clock ahead of this one: later timings still come after it
    store.merge([history_module.HistoryRecord("op", 5, Backend.GPU, 1, 5.0, 0, 5000.0)])
    store.record(key, Backend.SIMD, 10.0, 0)
    assert key.arms[Backend.SIMD].last_update > 5000.0


def test_a_new_file_gets_the_mode_open_would_give_it(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        path = tmp_path / "new.json"
        _learned().save_history(path)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640
