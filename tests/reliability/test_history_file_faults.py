"""History files under faults and hostile input (issue 12, item 7).

- ``kill -9`` in the middle of saving: the file on disk is always a whole version, the previous
  one or the new one; a killed save's temporary file is removed by a later save, never read.
- Truncated, corrupt, wrong-schema, oversized and hostile JSON (deep nesting, huge numbers,
  NaN/Infinity, wrong types, repeated keys, non-UTF-8 bytes): one ``ValueError`` naming the
  file and the fault; at start-up one ``HistoryWarning``, a cold runtime and the file moved
  aside byte for byte. Oversized files are refused from their size, unread.
- Nothing in the package unpickles or evaluates what it reads.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import os
import random
import select
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from internals import history_saver

import adaptive_runtime as ar
from adaptive_runtime.history import (
    HISTORY_FORMAT,
    LEGACY_HISTORY_FORMAT,
    MAX_HISTORY_FILE_BYTES,
    HistoryRecord,
    read_history_file,
    write_history_file,
)
from adaptive_runtime.history import file as history_module
from adaptive_runtime.history._guarded_json import _nesting_depth
from adaptive_runtime.history.fingerprint import hardware_fingerprint
from adaptive_runtime.operations import DeviceProbe

PACKAGE = Path(ar.__file__).resolve().parent


@pytest.fixture(autouse=True)
def _no_history_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HISTORY", "HISTORY_FORCE", "HISTORY_SAVE_INTERVAL_S"):
        monkeypatch.delenv("ADAPTIVE_RUNTIME_" + var, raising=False)


def _start(path: Path) -> tuple[ar.AdaptiveRuntime, list[warnings.WarningMessage]]:
    """A runtime started with ``history_path=path``, and the warnings its start gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rt = ar.AdaptiveRuntime(
            ar.RuntimeConfig(tracing=False, history_path=str(path), history_save_interval_s=0),
            builtin_ops=False, devices=DeviceProbe(gpu=False))
    saver = history_saver(rt)
    if saver is not None:
        saver.stop()  # (a test's runtime must not save into its tmp_path at interpreter exit)
    return rt, list(caught)


def _moved_aside(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".corrupt-*"))


def _temporaries(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


# --------------------------------------------------------------------------- kill -9 mid-save

# The "zygote": imports the package once, then forks one saver per "go" line. Each saver
# starts a runtime from the history file (the real start-up path), then saves whole versions
# v+1, v+2, ... of a large history in a loop — every record of version v holds v samples —
# until it is SIGKILLed. Forking from this single-threaded process costs milliseconds where a
# fresh interpreter costs ~0.5 s, so many kills fit in a few seconds. The saver reports on the
# shared stdout pipe with single os.write calls (atomic under PIPE_BUF).
_ZYGOTE = r"""
import os, sys, time
import adaptive_runtime as ar
from adaptive_runtime.operations import DeviceProbe
from adaptive_runtime.history.fingerprint import hardware_fingerprint
from adaptive_runtime.history import HistoryRecord

path, keys = sys.argv[1], int(sys.argv[2])
hardware_fingerprint()  # (computed once here, not in every forked saver)

def say(line):
    os.write(1, (line + "\n").encode())

def records(v):
    return [HistoryRecord(f"op{k % 50}", k // 50, b, v, 10.0 + v, 0, float(v), 1.0)
            for k in range(keys) for b in ar.Backend]

def saver():
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False, history_path=path,
                                             history_save_interval_s=0),
                            builtin_ops=False, devices=DeviceProbe(gpu=False))
    rows = rt.history_snapshot()
    v = rows[0].samples if rows else 0
    say(f"loaded {v} {len(rows)}")
    deadline = time.monotonic() + 60  # (never outlive a test that lost track of it)
    while time.monotonic() < deadline:
        v += 1
        rt.reset_history()
        rt.merge_history(records(v))
        say(f"begin {v}")
        t0 = time.perf_counter()
        rt.save_history(path)
        say(f"saved {v} {time.perf_counter() - t0:.4f}")

say("ready")
for line in sys.stdin:
    if line.strip() != "go":
        break
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            saver()
            code = 0
        finally:
            os._exit(code)
    say(f"pid {pid}")
    _, status = os.waitpid(pid, 0)
    say(f"dead {pid} {os.waitstatus_to_exitcode(status)}")
"""


class _Lines:
    """Lines from a pipe, read with a deadline (a stuck child fails the test, not hangs it)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self._fd = proc.stdout.fileno()
        self._buffer = b""

    def next(self, timeout_s: float = 60.0) -> str:
        end = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = end - time.monotonic()
            assert left > 0, "the saver process went silent"
            ready, _, _ = select.select([self._fd], [], [], left)
            if ready:
                chunk = os.read(self._fd, 65536)
                assert chunk, "the zygote process exited"
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def until(self, prefix: str) -> Iterator[str]:
        """Every line up to and including the first starting with ``prefix``."""
        while True:
            line = self.next()
            yield line
            if line.startswith(prefix):
                return


def _file_version(path: Path, rows: int) -> int:
    """The version a history file holds; asserts it is whole (every record of one version)."""
    loaded = read_history_file(path)  # raises if partial: truncated JSON
    versions = {r.samples for r in loaded.records}
    assert len(loaded.records) == rows and len(versions) == 1, (len(loaded.records), versions)
    (version,) = versions
    assert all(r.mean_us == 10.0 + version and r.last_update == version
               for r in loaded.records)
    return version


def _wait_for_temporary(path: Path, pid: int, timeout_s: float = 10.0) -> None:
    """Return once ``pid`` has a temporary file for ``path`` (or after ``timeout_s``)."""
    mine = f".{path.name}.{history_module._host()}.{pid}."
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        with os.scandir(path.parent) as entries:
            if any(e.name.startswith(mine) for e in entries):
                return
        time.sleep(0.0005)


def test_kill_9_mid_save_leaves_the_previous_or_the_new_file_whole(
        tmp_path: Path, reliability: Any) -> None:
    kills, keys = 40, 800
    rows = keys * len(ar.Backend)
    path = tmp_path / "history.json"
    rng = random.Random(20261124)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADAPTIVE_RUNTIME_",
                                                                     "OTEL_"))}
    proc = subprocess.Popen([sys.executable, "-W", "error", "-c", _ZYGOTE, str(path), str(keys)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    lines = _Lines(proc)
    assert proc.stdin is not None
    mid_save = new_unannounced = left_temporary = whole_loads = 0
    peak_temporaries, saves_completed, save_s = 0, 0, [0.15]
    on_disk = 0  # the version the file holds (0: no file yet)
    try:
        assert lines.next() == "ready"
        for i in range(kills):
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
            # ("pid" from the zygote and the saver's first lines may come in either order)
            early: list[str] = []
            while not (any(x.startswith("pid") for x in early)
                       and any(x.startswith("loaded") for x in early)):
                early.append(lines.next())
            pid = int(next(x for x in early if x.startswith("pid")).split()[1])
            loaded = next(x for x in early if x.startswith("loaded")).split()
            # a new process starts from the file as it was left, never from a temporary file
            assert (int(loaded[1]), int(loaded[2])) == (on_disk, rows if on_disk else 0)
            if i % 2 == 0:
                # at a random moment of the next ~2.5 saves (most kills land inside one) ...
                time.sleep(rng.uniform(0.0, 2.5 * sorted(save_s)[len(save_s) // 2]))
            else:
                # ... or as soon as its temporary file appears: while it is being written
                # (that window is ~10% of a save, where serialising takes the rest)
                _wait_for_temporary(path, pid)
            os.kill(pid, signal.SIGKILL)
            reported = early + list(lines.until(f"dead {pid}"))
            assert reported[-1] == f"dead {pid} {-signal.SIGKILL}", reported[-1]
            begun = [int(x.split()[1]) for x in reported if x.startswith("begin")]
            saved = [x.split() for x in reported if x.startswith("saved")]
            save_s += [float(x[2]) for x in saved]
            saves_completed += len(saved)
            last_saved = int(saved[-1][1]) if saved else on_disk
            if not path.exists():
                assert not saved and on_disk == 0
                continue
            version = _file_version(path, rows)
            whole_loads += 1
            if begun and begun[-1] > last_saved:
                mid_save += 1  # killed after "begin v", before "saved v"
                assert version in (last_saved, begun[-1])
                new_unannounced += version == begun[-1]  # renamed, killed before saying so
            else:
                assert version == last_saved
            assert version >= on_disk
            on_disk = version
            temporaries = _temporaries(path)
            left_temporary += any(f".{pid}." in t.name for t in temporaries)
            # each save removes the temporaries of killed savers: never more than the last one's
            assert len(temporaries) <= 1, temporaries
            peak_temporaries = max(peak_temporaries, len(temporaries))
            assert _moved_aside(path) == []  # never found corrupt
        proc.stdin.close()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
    # a clean save from another process removes what killed savers left, and reads back whole
    before = _file_version(path, rows)
    records = read_history_file(path).records
    write_history_file(path, [HistoryRecord(r.operation, r.size_bucket, r.backend,
                                            before + 1, 11.0 + before, 0, before + 1.0, 1.0)
                              for r in records])
    assert _temporaries(path) == []
    assert _file_version(path, rows) == before + 1
    assert mid_save >= kills // 4, f"only {mid_save} of {kills} kills landed inside a save"
    assert left_temporary >= 1, "no kill landed while a temporary file was being written"
    reliability.record(load=f"SIGKILL of a process saving a {rows:,}-record history "
                            f"({path.stat().st_size / 2**20:.1f} MiB), {kills} times: at a "
                            "random moment, or (every other kill) once its temporary file "
                            "appears",
                       kills=kills, kills_mid_save=mid_save, whole_file_loads=whole_loads,
                       new_version_renamed_before_kill=new_unannounced,
                       saves_completed=saves_completed,
                       kills_leaving_a_temp_file=left_temporary,
                       most_temp_files_at_once=peak_temporaries)


def test_temporary_files_of_dead_savers_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    host = history_module._host()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)  # (a process that has exited: its pid runs nothing now)
    stale = tmp_path / f".history.json.{host}.{dead_pid}.abcd1234.tmp"
    live = tmp_path / f".history.json.{host}.{os.getppid()}.abcd1234.tmp"
    other_host = tmp_path / f".history.json.elsewhere.{dead_pid}.abcd1234.tmp"
    for f in (stale, live, other_host):
        f.write_bytes(b'{"format": "adaptive_runtime.history/2", "truncat')
    rt, caught = _start(path)  # no history file: the temporaries are not read instead
    assert caught == [] and rt.history_snapshot() == []
    rt.record_performance("dot", 1000, "simd", 10.0)
    rt.save_history(path)
    assert not stale.exists()
    assert live.exists() and other_host.exists()
    assert [r.samples for r in read_history_file(path).records] == [1]


# --------------------------------------------------------------------------- oversized files


def _bytes_read_by_this_process() -> int:
    with open("/proc/self/io", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="counts reads with /proc")
def test_an_oversized_file_is_refused_from_its_size_unread(tmp_path: Path,
                                                           reliability: Any) -> None:
    path = tmp_path / "history.json"
    size = MAX_HISTORY_FILE_BYTES * 1024  # 64 GiB: reading it whole could not pass
    with open(path, "wb") as f:
        f.write(b'{"format": "adaptive_runtime.history/2", ')
        f.truncate(size)  # sparse: takes no disk
    assert path.stat().st_blocks * 512 < 1 << 20
    before = _bytes_read_by_this_process()
    t0 = time.perf_counter()
    with pytest.raises(ValueError) as info:
        read_history_file(path)
    refused_s = time.perf_counter() - t0
    read = _bytes_read_by_this_process() - before
    message = str(info.value)
    assert message.startswith(f"history file {str(path)!r} is over {MAX_HISTORY_FILE_BYTES} "
                              "bytes") and "\n" not in message
    assert read < 1 << 20, f"{read} bytes read to refuse it"  # (the /proc read itself counts)
    # at start-up: one warning, a cold runtime, the file moved aside whole (a rename)
    rt, caught = _start(path)
    assert [type(w.message) for w in caught] == [ar.HistoryWarning]
    assert "moved aside" in str(caught[0].message) and str(path) in str(caught[0].message)
    assert rt.history_snapshot() == [] and not path.exists()
    (moved,) = _moved_aside(path)
    assert moved.stat().st_size == size
    reliability.record(load=f"a {size / 2**30:.0f} GiB sparse history file (bound "
                            f"{MAX_HISTORY_FILE_BYTES / 2**20:.0f} MiB)",
                       bytes_read=read, refused_in_s=refused_s,
                       started_cold=True, moved_aside=True)


def test_a_file_just_over_the_bound_is_refused_and_one_at_it_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "history.json"
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False,
                            devices=DeviceProbe(gpu=False))
    rt.record_performance("dot", 1000, "simd", 10.0)
    rt.save_history(path)
    size = path.stat().st_size
    monkeypatch.setattr(history_module, "MAX_HISTORY_FILE_BYTES", size)
    assert len(read_history_file(path).records) == 1
    monkeypatch.setattr(history_module, "MAX_HISTORY_FILE_BYTES", size - 1)
    with pytest.raises(ValueError, match="is over"):
        read_history_file(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_at_the_history_path_is_refused_without_waiting(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    os.mkfifo(path)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=r"not a regular file \(it is a FIFO\)"):
        read_history_file(path)  # (a plain open would wait for a writer forever)
    assert time.monotonic() - t0 < 10


# --------------------------------------------------------------------------- hostile JSON


@dataclass
class Obj:
    """A JSON object as ordered pairs, so a document can repeat a key."""

    pairs: list[tuple[str, Any]]


@dataclass
class Raw:
    """JSON text put into a document as it is (what json.dumps could not write)."""

    text: str


def _dumps(value: Any) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Obj):
        return "{" + ", ".join(f"{json.dumps(k)}: {_dumps(v)}" for k, v in value.pairs) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_dumps(v) for v in value) + "]"
    return json.dumps(value)


RECORD_FIELDS = ("operation", "size_bucket", "backend", "samples", "mean_us", "failures",
                 "last_update", "variance_us2")
REQUIRED = set(RECORD_FIELDS) - {"variance_us2"}


def _document() -> Obj:
    """A valid history document of this machine with three records."""
    fingerprint = json.loads(json.dumps(hardware_fingerprint()))
    records = [Obj([("operation", "dot"), ("size_bucket", 10 + i), ("backend", "simd"),
                    ("samples", 3), ("mean_us", 12.5), ("failures", 0),
                    ("last_update", 1.7e9), ("variance_us2", 0.25)]) for i in range(3)]
    return Obj([("format", HISTORY_FORMAT), ("fingerprint", Obj(list(fingerprint.items()))),
                ("records", records)])


# Where a hostile value goes: the slot's path in the document, and the word the error must use.
SLOTS: list[tuple[tuple[Any, ...], str]] = (
    [(("format",), "format"), (("fingerprint",), "fingerprint"),
     (("fingerprint", "cpu"), "fingerprint"), (("fingerprint", "cpu_count"), "fingerprint"),
     (("records",), "record"), (("records", 1), "record")]
    + [(("records", 2, name), name) for name in RECORD_FIELDS])


def _get(obj: Obj, key: str) -> Any:
    return next(v for k, v in obj.pairs if k == key)


def _set(doc: Obj, slot: tuple[Any, ...], value: Any) -> None:
    parent: Any = doc
    for step in slot[:-1]:
        parent = _get(parent, step) if isinstance(parent, Obj) else parent[step]
    if isinstance(parent, Obj):
        parent.pairs = [(k, value if k == slot[-1] else v) for k, v in parent.pairs]
    else:
        parent[slot[-1]] = value


def _number_ok(v: Any, most: float, nan: bool) -> bool:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    return (nan and math.isnan(v)) or 0 <= v <= most


def _field_ok(name: str, v: Any) -> bool:
    """The format's rule for a record field (written from the README, not from the reader)."""
    if name == "operation":
        return isinstance(v, str) and v != ""
    if name == "size_bucket":
        return type(v) is int and 0 <= v <= 128
    if name == "backend":
        return isinstance(v, str) and v.strip().lower() in {"gpu", "simd", "scalar"}
    if name in ("samples", "failures"):
        return type(v) is int and 0 <= v < 2**63
    if name == "mean_us":
        return _number_ok(v, 1e15, nan=True)
    if name == "last_update":
        return _number_ok(v, 1e15, nan=False)
    return _number_ok(v, 1e30, nan=True)  # variance_us2


def _record_ok(v: Any) -> bool:
    return isinstance(v, dict) and v.keys() >= REQUIRED and all(
        _field_ok(k, v[k]) for k in RECORD_FIELDS if k in v)


def _value_ok(slot: tuple[Any, ...], v: Any) -> bool:
    """Whether ``v`` at ``slot`` would leave the document valid (then it is not hostile)."""
    if slot == ("format",):
        return v in (HISTORY_FORMAT, LEGACY_HISTORY_FORMAT)
    if slot[0] == "fingerprint" and len(slot) == 2:
        return v is None or isinstance(v, str) or type(v) is int
    if slot == ("fingerprint",):
        return isinstance(v, dict) and all(_value_ok(("fingerprint", k), x) for k, x in v.items())
    if slot == ("records",):
        return isinstance(v, list) and all(_record_ok(x) for x in v)
    if len(slot) == 2:
        return _record_ok(v)
    return _field_ok(slot[2], v)


def _as_text(v: Any) -> str:
    return json.dumps(v)  # (allow_nan: NaN and Infinity literals)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**19) + 1, 10**19 - 1)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=4),
    max_leaves=12)

BAD_UTF8 = [b"\xff", b"\xfe", b"\x80", b"\xc0\xaf", b"\xc3\x28", b"\xed\xa0\x80",
            b"\xf5\x80\x80\x80", b"\xe2\x82"]


@st.composite
def hostile_files(draw: st.DrawFn) -> tuple[str, bytes, str]:
    """(kind, file content, a word the error message must hold)."""
    doc = _document()
    kind = draw(st.sampled_from(["deep nesting", "huge number", "huge float", "NaN/Infinity",
                                 "wrong type", "repeated key", "missing field",
                                 "lone surrogate", "non-UTF-8", "truncated"]))
    slot, word = draw(st.sampled_from(SLOTS))
    if kind == "deep nesting":
        depth = draw(st.integers(20_000, 200_000))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"a": ', "}")]))
        tail = draw(st.sampled_from(["1", ""]))  # (closed or not: either way too deep)
        _set(doc, slot, Raw(opener * depth + tail + closer * depth))
        return kind, _dumps(doc).encode(), "nests JSON arrays or objects too deeply"
    if kind == "huge number":
        digits = draw(st.integers(21, 100_000))
        sign = draw(st.sampled_from(["", "-"]))
        _set(doc, slot, Raw(sign + "1" + "0" * (digits - 1)))
        return kind, _dumps(doc).encode(), f"a number of {digits} digits"
    if kind == "huge float":
        text = draw(st.sampled_from(["1e999", "-1e999", "1e31", "9.9e307", "1" + "0" * 400
                                     + ".5", "2E+40"]))
        if _value_ok(slot, json.loads(text)):
            text = "-1e999"
        _set(doc, slot, Raw(text))
        return kind, _dumps(doc).encode(), word
    if kind == "NaN/Infinity":
        text = draw(st.sampled_from(["NaN", "Infinity", "-Infinity"]))
        if _value_ok(slot, float(text)):
            text = "Infinity"  # (NaN is a valid mean_us: "no estimate yet")
        _set(doc, slot, Raw(text))
        return kind, _dumps(doc).encode(), word
    if kind == "wrong type":
        value = draw(json_values.filter(lambda v: not _value_ok(slot, v)))
        _set(doc, slot, Raw(_as_text(value)))
        return kind, _dumps(doc).encode(), word
    if kind == "lone surrogate":
        _set(doc, ("records", 2, "operation"), Raw('"dot\\ud800"'))
        return kind, _dumps(doc).encode(), "operation"
    if kind == "repeated key":
        targets = [doc, _get(doc, "fingerprint"), _get(doc, "records")[
            draw(st.integers(0, 2))]]
        target = draw(st.sampled_from(targets))
        i = draw(st.integers(0, len(target.pairs) - 1))
        key, value = target.pairs[i]
        again = draw(st.sampled_from([value, Raw("null")]))
        target.pairs.insert(draw(st.integers(i + 1, len(target.pairs))), (key, again))
        return kind, _dumps(doc).encode(), f"repeats the key {key!r}"
    if kind == "missing field":
        where = draw(st.sampled_from([(doc, k) for k in ("format", "fingerprint", "records")]
                                     + [(_get(doc, "records")[1], k) for k in REQUIRED]))
        target, key = where
        target.pairs = [(k, v) for k, v in target.pairs if k != key]
        return kind, _dumps(doc).encode(), key
    whole = _dumps(doc).encode() + b"\n"
    if kind == "non-UTF-8":
        at = draw(st.integers(0, len(whole)))
        return kind, whole[:at] + draw(st.sampled_from(BAD_UTF8)) + whole[at:], "not UTF-8"
    cut = draw(st.integers(0, len(whole) - 3))  # (before the closing brace)
    return kind, whole[:cut], "empty" if not whole[:cut].strip() else "truncated or corrupt"


def test_hostile_json_is_refused_with_one_message_and_the_runtime_starts_cold(
        tmp_path: Path, reliability: Any) -> None:
    rejected: Counter[str] = Counter()
    examples = iter(range(10**9))

    @settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow,
                                                        HealthCheck.data_too_large])
    @given(hostile_files())
    def check(case: tuple[str, bytes, str]) -> None:
        kind, content, word = case
        folder = tmp_path / str(next(examples))
        folder.mkdir()
        path = folder / "history.json"
        path.write_bytes(content)
        # an explicit read: one ValueError, one short line naming the file and the fault
        with pytest.raises(ValueError) as info:
            read_history_file(path)
        message = str(info.value)
        assert type(info.value) is ValueError
        assert message.startswith(f"history file {str(path)!r} "), message
        assert "\n" not in message and len(message) <= 400, message
        assert word in message, (word, message)
        # an explicit load: the same error; the file is left as it was
        rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False,
                                devices=DeviceProbe(gpu=False))
        with pytest.raises(ValueError, match=r"^history file "):
            rt.load_history(path)
        assert path.read_bytes() == content and rt.history_snapshot() == []
        # at start-up: one warning with that message, a cold runtime, the file moved aside
        rt, caught = _start(path)
        assert [type(w.message) for w in caught] == [ar.HistoryWarning], caught
        warned = str(caught[0].message)
        assert warned.startswith(message) and "moved aside" in warned and "starting with " \
            "no history" in warned
        assert rt.history_snapshot() == []
        assert not path.exists()
        (moved,) = _moved_aside(path)
        assert moved.read_bytes() == content  # never overwritten, never deleted
        rejected[kind] += 1

    check()
    assert set(rejected) == {"deep nesting", "huge number", "huge float", "NaN/Infinity",
                             "wrong type", "repeated key", "missing field", "lone surrogate",
                             "non-UTF-8", "truncated"}
    reliability.record(load="hostile history files (Hypothesis): deep nesting, 21 to 100,000 "
                            "digit numbers, 1e999, NaN/Infinity, wrong types, repeated keys, "
                            "missing fields, lone surrogates, non-UTF-8 bytes, truncation",
                       files_rejected=sum(rejected.values()),
                       **{k.replace(" ", "_").replace("/", "_").replace("-", "_").lower(): n
                          for k, n in sorted(rejected.items())},
                       other_exceptions=0, started_cold=True, moved_aside_intact=True)


def test_a_run_of_escaped_quotes_never_closed_is_refused_in_one_pass(tmp_path: Path) -> None:
    """The depth check blanks strings before counting brackets. Two million escaped quotes
    that never close are one unclosed string: refused as invalid JSON after one pass (a
    string pattern that can fail is retried from each of those quotes: hours of work)."""
    path = tmp_path / "history.json"
    path.write_bytes(b'{"records": [{"operation": "' + b'\\"' * 2_000_000)
    with pytest.raises(ValueError, match=r"^history file .*not valid JSON"):
        read_history_file(path)
    depth = _nesting_depth('[{"a": "]]\\"[[", "b": [[1]]}, "{\\\\"]')
    assert depth == 4  # brackets inside strings, escaped quotes included, are not counted


def test_a_valid_file_still_reads_after_the_hostile_checks(tmp_path: Path) -> None:
    """The reader's refusals do not refuse what the writer writes: NaN means, large counts."""
    path = tmp_path / "history.json"
    records = [HistoryRecord("dot", 10, ar.Backend.SIMD, 2**63 - 1, math.nan, 2**63 - 1,
                             1.7e9, math.nan),
               HistoryRecord("dot", 10, ar.Backend.GPU, 5, 1e15, 0, 0.0, 1e30),
               HistoryRecord("héllo ∑", 128, ar.Backend.SCALAR, 0, 0.0, 7, 1e15),
               HistoryRecord("dot", 10, ar.Backend.SIMD, 3, 2.0, 0, 1.0, 0.5, "numpy")]
    write_history_file(path, records)
    loaded = read_history_file(path).records
    assert [(r.operation, r.size_bucket, r.choice, r.samples, r.failures, r.last_update)
            for r in loaded] == [(r.operation, r.size_bucket, r.choice, r.samples, r.failures,
                                  r.last_update) for r in records]
    assert math.isnan(loaded[0].mean_us) and loaded[0].variance_us2 == 0.0
    assert [r.mean_us for r in loaded[1:]] == [1e15, 0.0, 2.0]
    # (record_to_json writes every field of a record; an arm's primary implementation's
    # without "variant", as files were before variants)
    fields = {f.name for f in dataclasses.fields(HistoryRecord)}
    assert set(history_module.record_to_json(records[-1])) == fields
    assert set(history_module.record_to_json(records[0])) == fields - {"variant"}


# --------------------------------------------------------------------------- no pickle, no eval

# Modules that deserialise arbitrary objects or run code when they load data.
_UNSAFE_MODULES = {"pickle", "_pickle", "cPickle", "cloudpickle", "dill", "jsonpickle",
                   "marshal", "shelve", "joblib"}
# pickle is imported for one reason: AdaptiveRuntime.__reduce__ lets the user's own
# multiprocessing (a spawned DataLoader worker) pickle a runtime object, and runtime/_pickling.py
# checks with pickle.dumps that each registered function will pickle. It only ever pickles
# (dumps); it never unpickles, and no file is involved.
_ALLOWED_PICKLE_USES = {("runtime/_pickling.py", "dumps"),
                        ("runtime/_pickling.py", "HIGHEST_PROTOCOL")}


def _unsafe_uses(tree: ast.AST, name: str) -> list[str]:
    """Every import of an unsafe module, attribute of one (beyond those allowed), call of
    eval/exec/compile, ``__import__`` of a computed name, unsafe yaml load, and numpy/torch
    load that may unpickle, in one module's syntax tree."""
    found = []
    imported: dict[str, str] = {}  # local name -> unsafe module
    pickle_allowed = {module for module, _ in _ALLOWED_PICKLE_USES}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in _UNSAFE_MODULES:
                    imported[alias.asname or top] = top
                    if not (top == "pickle" and name in pickle_allowed):
                        found.append(f"{name}:{node.lineno} imports {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            top = (node.module or "").split(".")[0]
            if top in _UNSAFE_MODULES:
                found.append(f"{name}:{node.lineno} imports from {node.module}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in imported:
            if imported[node.value.id] != "pickle" \
                    or (name, node.attr) not in _ALLOWED_PICKLE_USES:
                found.append(f"{name}:{node.lineno} uses {node.value.id}.{node.attr}")
        elif isinstance(node, ast.Call):
            func = node.func
            keywords = {k.arg: k.value for k in node.keywords}
            if isinstance(func, ast.Name) and func.id in ("eval", "exec", "compile"):
                found.append(f"{name}:{node.lineno} calls {func.id}()")
            elif isinstance(func, ast.Name) and func.id == "__import__" and not (
                    node.args and isinstance(node.args[0], ast.Constant)):
                found.append(f"{name}:{node.lineno} imports a computed module name")
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                owner, attr = func.value.id, func.attr
                if owner == "yaml" and (attr in ("unsafe_load", "full_load", "load_all")
                                        or (attr == "load" and not _safe_loader(keywords))):
                    found.append(f"{name}:{node.lineno} calls yaml.{attr} without SafeLoader")
                elif owner in ("np", "numpy") and attr == "load" and "allow_pickle" in keywords \
                        and not (isinstance(keywords["allow_pickle"], ast.Constant)
                                 and keywords["allow_pickle"].value is False):
                    found.append(f"{name}:{node.lineno} calls numpy.load with allow_pickle")
                elif owner == "torch" and attr == "load" and not (
                        isinstance(keywords.get("weights_only"), ast.Constant)
                        and keywords["weights_only"].value is True):
                    found.append(f"{name}:{node.lineno} calls torch.load without "
                                 "weights_only=True")
    return found


def _safe_loader(keywords: dict[str | None, ast.expr]) -> bool:
    loader = keywords.get("Loader")
    return isinstance(loader, ast.Attribute | ast.Name) and (
        getattr(loader, "attr", None) or getattr(loader, "id", "")) in ("SafeLoader",
                                                                         "CSafeLoader")


def test_nothing_in_the_package_unpickles_or_evaluates_what_it_reads(reliability: Any) -> None:
    # the scanner finds what it looks for (a test that could not fail would prove nothing)
    planted = ("import pickle, marshal\nimport yaml\nfrom shelve import open\n"
               "pickle.loads(b'')\nmarshal.load(f)\neval('1')\nexec('x=1')\n"
               "yaml.load(f)\nyaml.load(f, Loader=yaml.SafeLoader)\nnp.load(f, allow_pickle=True)\n"
               "torch.load(f)\n__import__(name)\n")
    caught = _unsafe_uses(ast.parse(planted), "planted.py")
    # (every line but 2, import yaml, and 9, yaml.load with SafeLoader; line 1 twice)
    assert sorted(int(c.split(":")[1].split()[0]) for c in caught) == [
        1, 1, 3, 4, 5, 6, 7, 8, 10, 11, 12], caught
    files = sorted(PACKAGE.rglob("*.py"))
    found: list[str] = []
    pickle_dumps = 0
    for file in files:
        tree = ast.parse(file.read_text(encoding="utf-8"), str(file))
        found += _unsafe_uses(tree, file.name if file.parent == PACKAGE
                              else str(file.relative_to(PACKAGE)))
        pickle_dumps += sum(isinstance(n, ast.Attribute) and n.attr == "dumps"
                            and isinstance(n.value, ast.Name) and n.value.id == "pickle"
                            for n in ast.walk(tree))
    assert len(files) > 20
    assert found == []
    # the modules that read files or other processes' data import no pickle at all
    for reader in ("history/file.py", "history/_guarded_json.py", "history/fingerprint.py",
                   "history/distributed.py", "offline/report/sources.py"):
        tree = ast.parse((PACKAGE / reader).read_text(encoding="utf-8"))
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)
                    and any(a.name.split(".")[0] in _UNSAFE_MODULES for a in n.names)], reader
    reliability.record(load=f"AST scan of the package's {len(files)} modules for pickle, "
                            "marshal, shelve, eval/exec/compile, yaml.load, numpy/torch.load",
                       unsafe_uses=len(found), pickle_dumps_for_worker_pickling=pickle_dumps,
                       unpickling_calls=0)
