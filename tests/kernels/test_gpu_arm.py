"""The GPU arm's torch code path, on a test double of the CUDA device (no GPU here).

``FakeCuda`` keeps "device" tensors on the CPU as :class:`DeviceTensor`, a tensor subclass
that torch's operations carry through to their results (and gradients), so every step of a
GPU call — memory check, copies to the device, the torch kernel, synchronisation, the way
back to the caller's type — runs for real; only the CUDA kernel launch is replaced by torch's
CPU kernel. The double tells the truth about the host: reading a device tensor there
(``.cpu()``, ``.numpy()``, ``.item()``, ``.tolist()``, ``__array__``) is an implicit
synchronisation on a real GPU, and each is counted (``DeviceTensor.host_reads``), or raises
while ``DeviceTensor.strict`` is set.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from internals import pending_device_timings

import adaptive_runtime as ar
from adaptive_runtime._dispatch.settle import MAX_PENDING_TIMINGS
from adaptive_runtime.kernels import _gpu
from adaptive_runtime.keys import reference_size, size_bucket
from adaptive_runtime.offline.replay import read_calls
from adaptive_runtime.operations import DeviceProbe

Backend = ar.Backend


class HostRead(AssertionError):
    """A device tensor was read on the host while the double was strict."""


# What reads a tensor on the host (on a real GPU: a copy back and a wait for the device).
_HOST_READS = frozenset({torch.Tensor.cpu, torch.Tensor.numpy, torch.Tensor.item,
                         torch.Tensor.tolist, torch.Tensor.__array__})


class DeviceTensor(torch.Tensor):
    """A tensor "on the device" of the double: a CPU tensor whose type torch's operations
    carry to their results, whose every read on the host is counted (or refused)."""

    host_reads = 0
    strict = False

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _HOST_READS or (func is torch.Tensor.to and _to_host(args, kwargs)):
            if DeviceTensor.strict:
                raise HostRead(f"{func.__name__}() of a device tensor: an implicit sync")
            DeviceTensor.host_reads += 1
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **kwargs)
            # (what comes back to the host is a host tensor, as from a real device)
            return out.as_subclass(torch.Tensor) if isinstance(out, torch.Tensor) else out
        return super().__torch_function__(func, types, args, kwargs)


def _to_host(args: Any, kwargs: Any) -> bool:
    """Whether a ``Tensor.to(...)`` call names the host (the CPU) as its device."""
    named = [*args[1:], kwargs.get("device")]
    return any(isinstance(d, str | torch.device) and torch.device(d).type == "cpu"
               for d in named)


def on_fake_device(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` with its parameters on the double's device (as ``.cuda()`` would)."""
    for sub in module.modules():
        for name, p in list(sub.named_parameters(recurse=False)):
            setattr(sub, name, torch.nn.Parameter(p.detach().as_subclass(DeviceTensor),
                                                  requires_grad=p.requires_grad))
    return module


class FakeCuda:
    """A CUDA device test double: tensors "on the device" are CPU tensors of the subclass
    :class:`DeviceTensor`."""

    kind = "torch"

    def __init__(self, free: int = 1 << 40) -> None:
        self.free = free
        self.copies = 0
        self.syncs = 0
        self.memory_queries = 0
        self.fail_with: BaseException | None = None

    def free_bytes(self) -> int:
        self.memory_queries += 1
        return self.free

    def to_device(self, x: Any, like: Any = None) -> Any:
        self.copies += 1
        # (a copy autograd records, as torch's to the device is)
        tensor = (x.clone() if isinstance(x, torch.Tensor)
                  else torch.from_numpy(np.ascontiguousarray(x).copy()))
        return tensor.as_subclass(DeviceTensor)

    def is_on_device(self, x: Any) -> bool:
        return isinstance(x, DeviceTensor)

    def synchronize(self) -> None:
        self.syncs += 1
        if self.fail_with is not None:
            raise self.fail_with


class FakeTiming:
    """A pair of timing events of the double: ready after ``ready_after`` queries (never when
    ``None``), ``elapsed`` microseconds apart."""

    def __init__(self, ready_after: int | None, elapsed: float) -> None:
        self.queries_left = ready_after
        self.elapsed = elapsed
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True

    def ready(self) -> bool:
        if self.queries_left is None or not self.stopped:
            return False
        self.queries_left -= 1
        return self.queries_left < 0

    def elapsed_us(self) -> float:
        return self.elapsed


class FakeCudaWithEvents(FakeCuda):
    """The double with timing events, as a CUDA device has."""

    def __init__(self, ready_after: int | None = 0, elapsed: float = 123.0) -> None:
        super().__init__()
        self.ready_after, self.elapsed = ready_after, elapsed
        self.timings: list[FakeTiming] = []

    def timing(self) -> FakeTiming:
        made = FakeTiming(self.ready_after, self.elapsed)
        self.timings.append(made)
        return made


# The copy bandwidth the tests give the double (a real device's is measured once, by a copy).
FAKE_BANDWIDTH = 10e9  # bytes per second


def _installed(fake: FakeCuda) -> Iterator[Any]:
    """``fake`` as the GPU device for one test."""
    _gpu.set_device(fake, bandwidth_bytes_per_s=FAKE_BANDWIDTH)
    try:
        yield fake
    finally:
        _gpu.set_device(None)


@pytest.fixture
def fake_cuda() -> Iterator[FakeCuda]:
    yield from _installed(FakeCuda())


@pytest.fixture
def cuda_with_events() -> Iterator[FakeCudaWithEvents]:
    yield from _installed(FakeCudaWithEvents())


def gpu_runtime() -> ar.AdaptiveRuntime:
    """A runtime forced onto the GPU arm: for host inputs, which would otherwise rarely pick
    it on the double."""
    return ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend="gpu"),
                              devices=DeviceProbe(gpu=True))


def device_runtime(**settings: Any) -> ar.AdaptiveRuntime:
    """A runtime at default settings (but ``settings``) on a machine whose GPU is the double:
    what a training loop with tensors on the device gets."""
    return ar.AdaptiveRuntime(ar.RuntimeConfig(**settings), devices=DeviceProbe(gpu=True))


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_arm_copies_host_inputs_syncs_and_returns_the_callers_type_with_fake_cuda(
        fake_cuda, kind, dtype) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 257)).astype(dtype)
    args = (a, b) if kind == "numpy" else (torch.from_numpy(a), torch.from_numpy(b))
    rt = gpu_runtime()
    total = rt.run("add", *args)
    inner = rt.run("dot", *args)
    assert fake_cuda.copies == 4 and fake_cuda.syncs == 2
    if kind == "numpy":
        assert type(total) is np.ndarray and total.dtype == dtype
        assert isinstance(inner, np.floating) and inner.dtype == dtype
    else:
        assert isinstance(total, torch.Tensor) and not isinstance(total, DeviceTensor)
        assert total.dtype == args[0].dtype and inner.shape == ()
    np.testing.assert_allclose(np.asarray(total), a + b, rtol=1e-6)
    np.testing.assert_allclose(float(inner), np.dot(a.astype(np.float64), b), rtol=1e-4)
    assert {k.backend for k in rt.selection_counts()} == {Backend.GPU}


_RNG = np.random.default_rng(5)
_V, _W = _RNG.standard_normal((2, 301))
_M = _RNG.standard_normal((7, 33))
_F = torch.nn.functional
# operation -> (float64 inputs, reference computed by torch on the CPU)
GPU_CASES = {
    "scale": ((1.5, _V, _W), lambda a, x, y: a * x + y),
    "sum": ((_M,), lambda x: x.sum()),
    "relu": ((_M,), torch.relu),
    "gelu": ((_M,), _F.gelu),
    "softmax": ((_M,), lambda x: x.softmax(-1)),
    "layer_norm": ((_M,), lambda x: _F.layer_norm(x, x.shape[-1:], eps=1e-5)),
    "matmul": ((_M, _M.T.copy()), lambda a, b: a @ b),
    "conv1d": ((_V, _W[:5]), lambda x, w: _F.conv1d(x.view(1, 1, -1), w.view(1, 1, -1)).view(-1)),
}


@pytest.mark.parametrize("name", sorted(GPU_CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_operation_has_a_gpu_arm_that_matches_torch_with_fake_cuda(
        fake_cuda, name, dtype) -> None:
    args, reference = GPU_CASES[name]
    typed = tuple(a.astype(dtype) if isinstance(a, np.ndarray) else a for a in args)
    got = gpu_runtime().run(name, *typed)
    expected = reference(*(torch.from_numpy(a.astype(np.float64)) if isinstance(a, np.ndarray)
                           else a for a in args)).numpy()
    assert np.asarray(got).dtype == dtype and np.shape(got) == expected.shape
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), expected, rtol=rtol,
                               atol=rtol * 10)
    assert fake_cuda.syncs == 1


def test_inputs_already_on_the_device_are_not_copied_and_the_result_stays_with_fake_cuda(
        fake_cuda) -> None:
    a = fake_cuda.to_device(np.arange(6.0))
    fake_cuda.copies = 0
    out = device_runtime().run("add", a, a)
    assert fake_cuda.copies == 0
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def test_untimed_calls_on_device_resident_inputs_never_synchronise_or_ask_for_memory_with_fake_cuda(
        fake_cuda, tmp_path) -> None:
    """A training loop's calls (relu and add of float32 tensors on the device, 256 to 65,536
    elements, the GPU arm alone) on a device without timing events: only timed calls wait for
    the device, the others launch and return; none asks for its free memory (inputs on the
    device run as plain torch runs them)."""
    inputs = [fake_cuda.to_device(torch.randn(n, dtype=torch.float32))
              for n in (256, 4096, 65536)]
    rt = device_runtime()
    fake_cuda.syncs = fake_cuda.memory_queries = 0
    calls = 18_000
    with rt.record_calls(tmp_path / "timed.jsonl"):  # (every timed call, one line each)
        for i in range(calls // 2):
            x = inputs[i % 3]
            rt.run("relu", x)
            rt.run("add", x, x)
    timed = len(read_calls(tmp_path / "timed.jsonl"))
    assert fake_cuda.memory_queries == 0
    # (a timed call waits before its timer starts and, where its result is on the device, on
    # that: the double's results are host tensors it did not mark, so once here)
    assert timed <= fake_cuda.syncs <= 2 * timed
    assert timed < calls // 20  # converged keys run on the fast path, untimed
    assert {k.backend for k in rt.selection_counts()} == {Backend.GPU}


def test_while_a_cuda_graph_is_captured_calls_run_untimed_on_the_gpu_with_fake_cuda(
        fake_cuda, monkeypatch) -> None:
    """During a capture (torch's flag, patched: the double has no CUDA graphs) nothing is
    timed, synchronised or learned, and the GPU arm runs; after it, the key learns again."""
    x = fake_cuda.to_device(torch.randn(4096))
    rt = device_runtime()
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    fake_cuda.syncs = 0
    for _ in range(40):
        torch.testing.assert_close(rt.run("relu", x), torch.relu(x))
    assert fake_cuda.syncs == 0
    assert not _rows(rt, "relu@device")  # nothing learned
    assert rt.stats().calls("relu@device") == rt.stats().calls("relu@device", Backend.GPU) == 40
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    for _ in range(10):
        rt.run("relu", x)
    assert fake_cuda.syncs > 0 and _rows(rt, "relu@device")  # timed and learned again


def test_captured_calls_of_committed_keys_read_nothing_on_the_host_with_fake_cuda_events(
        cuda_with_events, monkeypatch) -> None:
    """Calls made while a CUDA graph is captured run device code only, on the timed and the
    fast path alike: keys of a default runtime committed before the capture (every key of
    device inputs has only device implementations) read nothing on the host during it, wait
    for nothing, and hand back device tensors."""
    fake = cuda_with_events
    inputs = [fake.to_device(torch.randn(64, n)) for n in (64, 1024)]
    rt = device_runtime()
    calls = (("relu", 1), ("gelu", 1), ("softmax", 1), ("layer_norm", 1), ("add", 2))
    for _ in range(100):  # (explored and committed: the fast path from then on)
        for x in inputs:
            for name, arity in calls:
                rt.run(name, *[x] * arity)
    reads, fake.syncs = DeviceTensor.host_reads, 0
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    for _ in range(200):
        for x in inputs:
            for name, arity in calls:
                assert isinstance(rt.run(name, *[x] * arity), DeviceTensor)
    assert DeviceTensor.host_reads == reads
    assert fake.syncs == 0
    assert {k.backend for k in rt.selection_counts()} == {Backend.GPU}


def test_with_timing_events_no_adapted_call_on_device_inputs_waits_with_fake_cuda_events(
        cuda_with_events, tmp_path) -> None:
    """The same loop on a device with timing events: timed calls record events around the
    kernel and are learned from them; nothing synchronises at all."""
    fake = cuda_with_events
    fake.elapsed = 20.0  # (kernels of 20 us: under 100 us a key is not timed 1-in-4 at least)
    inputs = [fake.to_device(torch.randn(n, dtype=torch.float32)) for n in (256, 4096, 65536)]
    rt = device_runtime()
    fake.syncs = fake.memory_queries = 0
    with rt.record_calls(tmp_path / "learned.jsonl"):  # (every timing learned, one line each)
        for i in range(9000):
            x = inputs[i % 3]
            rt.run("relu", x)
            rt.run("add", x, x)
    learned = read_calls(tmp_path / "learned.jsonl")
    assert fake.syncs == 0
    assert fake.memory_queries == 0  # (inputs on the device: run as plain torch runs them)
    assert learned and {c.duration_us for c in learned} == {fake.elapsed}
    assert len(learned) <= len(fake.timings) < 18_000 // 20
    assert all(t.stopped for t in fake.timings)


def test_a_timing_on_the_device_is_learned_when_its_events_complete_with_fake_cuda_events(
        cuda_with_events) -> None:
    fake = cuda_with_events
    fake.ready_after, fake.elapsed = 3, 250.0  # (ready at the third query)
    n = reference_size(size_bucket(4096))  # (learned as it is: no scaling to the bucket)
    x = fake.to_device(torch.randn(n))
    rt = device_runtime()
    rt.run("relu", x)
    assert not _rows(rt, "relu@device")  # launched and not waited for: nothing learned yet
    for _ in range(5):  # later timed calls ask (never wait): ready at the third
        rt.run("relu", x)
    stats = {r.backend: r for r in rt.history_snapshot() if r.operation == "relu@device"}
    assert stats[Backend.GPU].samples >= 1
    assert stats[Backend.GPU].mean_us == pytest.approx(250.0)


def test_timing_events_that_never_complete_cannot_block_the_loop_with_fake_cuda_events(
        cuda_with_events) -> None:
    """A device that stopped answering: its timings are never waited for, and the ones kept
    waiting are bounded; the calls go on."""
    fake = cuda_with_events
    fake.ready_after = None  # (never ready)
    x = fake.to_device(torch.randn(4096))
    rt = device_runtime()
    for _ in range(2000):
        rt.run("relu", x)
    assert not _rows(rt, "relu@device")
    assert len(fake.timings) > MAX_PENDING_TIMINGS  # (every call timed: nothing converges)
    assert len(pending_device_timings(rt)) == MAX_PENDING_TIMINGS
    assert fake.syncs == 0
    rt.flush_telemetry()  # (asks, never waits: a wait here would never return)
    assert len(pending_device_timings(rt)) == MAX_PENDING_TIMINGS


def test_device_inputs_run_only_on_the_device_at_default_settings_with_fake_cuda_events(
        cuda_with_events) -> None:
    """Inputs on the device run only the implementations that run there, on a default
    runtime: no host arm is tried (it would copy them to the host, waiting for the device,
    and drop the autograd graph), and nothing is checked against the free memory (there is
    no other arm to send a call to): the call runs as plain torch's would, even where the
    double says the memory is short."""
    fake = cuda_with_events
    x = fake.to_device(torch.randn(4096))
    fake.free = 1_000  # bytes: under the 16 KB result
    rt = device_runtime()
    for _ in range(50):
        torch.testing.assert_close(rt.run("relu", x), torch.relu(x))
    assert {(k.operation, k.backend) for k in rt.selection_counts()} == {
        ("relu@device", Backend.GPU)}
    assert fake.timings and fake.memory_queries == 0 and fake.syncs == 0
    assert not rt.fallback_counts()


def _digits_mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.LayerNorm(256), nn.Linear(256, 256),
                         nn.ReLU(), nn.Linear(256, 10))


def _train_beside_plain(fake: FakeCuda, rt: ar.AdaptiveRuntime, steps: int) -> int:
    """Train the digits MLP, adapted on ``rt`` with weights and inputs on the double's device,
    ``steps`` SGD steps beside the plain model from the same seed; every 100 steps each
    parameter's gradient and the loss must be plain torch's within rounding. Returns how many
    outputs came back without an autograd graph."""
    from sklearn.datasets import load_digits

    import adaptive_runtime.torch as art

    images, labels = load_digits(return_X_y=True)
    inputs = torch.tensor(images / 16.0, dtype=torch.float32)
    targets = torch.tensor(labels)
    plain = _digits_mlp()
    model = art.adapt(on_fake_device(_digits_mlp()), runtime=rt)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, plain)]
    batches = torch.Generator().manual_seed(1)
    no_graph = 0
    for step in range(steps):
        pick = torch.randint(0, len(inputs), (64,), generator=batches)
        out = model(fake.to_device(inputs[pick]))
        assert isinstance(out, DeviceTensor), "the output left the device"
        no_graph += out.grad_fn is None
        loss = torch.nn.functional.cross_entropy(out, fake.to_device(targets[pick]))
        plain_loss = torch.nn.functional.cross_entropy(plain(inputs[pick]), targets[pick])
        for optimizer in optimizers:
            optimizer.zero_grad()
        loss.backward()
        plain_loss.backward()
        if step % 100 == 99:
            for adapted, reference in zip(model.parameters(), plain.parameters(), strict=True):
                torch.testing.assert_close(adapted.grad.as_subclass(torch.Tensor),
                                           reference.grad, rtol=1e-4, atol=1e-6)
            torch.testing.assert_close(loss.detach().as_subclass(torch.Tensor),
                                       plain_loss.detach(), rtol=1e-4, atol=1e-6)
        for optimizer in optimizers:
            optimizer.step()
    return no_graph


def _calls_by_arm(rt: ar.AdaptiveRuntime) -> dict[tuple[str, Backend], int]:
    calls: dict[tuple[str, Backend], int] = {}
    for key, n in rt.selection_counts().items():
        calls[key.operation, key.backend] = calls.get((key.operation, key.backend), 0) + n
    return calls


def test_the_digits_mlp_on_the_device_keeps_graphs_and_plain_gradients_with_fake_cuda_events(
        cuda_with_events) -> None:
    """Issue 39's target on the double: the digits MLP, adapted, weights and inputs on the
    device, default runtime, 500 SGD steps beside the plain model from the same seed. Every
    output has its graph, every parameter's gradient is plain torch's (within rounding), the
    losses agree, nothing reads a device tensor on the host (counted: a strict double's
    refusal would be an arm failure the runtime falls back from, unseen) and nothing waits
    for the device. Before, CPU arms explored on device inputs and then committed copied them
    to the host and returned outputs without a graph."""
    fake = cuda_with_events
    rt = device_runtime()
    fake.syncs = 0
    reads = DeviceTensor.host_reads
    assert _train_beside_plain(fake, rt, 500) == 0
    assert DeviceTensor.host_reads == reads, "a device tensor was read on the host"
    assert not rt.fallback_counts()
    assert fake.syncs == 0 and fake.memory_queries == 0
    assert {k.backend for k in rt.selection_counts()} == {Backend.GPU}
    assert all(k.operation.endswith("@device") for k in rt.selection_counts())


# A GPU slower than the host for the MLP's small calls (an old or shared one): 5 ms a kernel.
SLOW_GPU_US = 5000.0


def test_host_arms_on_device_compete_and_keep_plain_gradients_when_asked_with_fake_cuda_events(
        cuda_with_events) -> None:
    """``host_arms_on_device=True`` on a device slower than the host: the CPU arms are tried
    on device inputs and win, each call a round trip through the host (its copies counted
    as host reads) whose result is back on the device with its graph; the gradients are still
    plain torch's, and no call fails over to another arm."""
    fake = cuda_with_events
    fake.elapsed = SLOW_GPU_US
    rt = device_runtime(host_arms_on_device=True)
    reads = DeviceTensor.host_reads
    assert _train_beside_plain(fake, rt, 300) == 0
    assert not rt.fallback_counts()
    calls = _calls_by_arm(rt)
    on_host = sum(n for (name, arm), n in calls.items()
                  if name.endswith("@device") and arm is not Backend.GPU)
    assert on_host > 0.9 * sum(n for (name, _), n in calls.items() if name.endswith("@device"))
    assert DeviceTensor.host_reads - reads >= on_host  # (every round trip read its inputs)
    buckets = {r.size_bucket for r in rt.history_snapshot() if r.operation == "linear@device"}
    assert buckets
    for bucket in buckets:
        size = reference_size(bucket)
        assert rt.get_best_backend("linear@device", size) is not Backend.GPU
        decision = rt.decide("linear@device", size)
        # (the key's next timed call may be a re-check of the GPU arm: they go on, rarely)
        assert decision.backend is not Backend.GPU or decision.reason is ar.Reason.RECHECK
        assert decision.floors_us[Backend.SIMD] > 0  # (its copies, priced before it ran)


def test_a_host_arm_whose_copies_would_lose_is_never_tried_on_device_inputs_with_fake_cuda_events(
        cuda_with_events) -> None:
    """Asked for, a CPU arm on device inputs is still priced before it runs: over a 1 MB/s
    link the copies of a 256 KB tensor alone take half a second, against 20 us measured on
    the device, so no round trip is ever made."""
    fake = cuda_with_events
    fake.elapsed = 20.0
    _gpu.set_device(fake, bandwidth_bytes_per_s=1e6)
    rt = device_runtime(host_arms_on_device=True)
    x = fake.to_device(torch.randn(64, 1024))
    reads = DeviceTensor.host_reads
    for _ in range(100):
        torch.testing.assert_close(rt.run("relu", x), torch.relu(x))
    assert DeviceTensor.host_reads == reads
    assert _calls_by_arm(rt) == {("relu@device", Backend.GPU): 100}
    floors = rt.decide("relu@device", x.numel()).floors_us
    assert floors[Backend.SIMD] == pytest.approx(2 * x.numel() * 4 / 1e6 * 1e6)


def test_captured_calls_of_keys_committed_to_a_host_arm_run_on_the_gpu_with_fake_cuda_events(
        cuda_with_events, monkeypatch) -> None:
    """Keys committed to CPU arms (asked for, on a slow device) run device code only while
    a CUDA graph is captured, on the fast path and the timed path alike: nothing is read on
    the host, nothing waits, the results stay on the device. After the capture, the
    committed CPU arms run again."""
    fake = cuda_with_events
    fake.elapsed = SLOW_GPU_US
    rt = device_runtime(host_arms_on_device=True)
    inputs = [fake.to_device(torch.randn(64, n)) for n in (64, 1024)]
    calls = (("relu", 1), ("gelu", 1), ("softmax", 1), ("add", 2))
    for _ in range(100):
        for x in inputs:
            for name, arity in calls:
                rt.run(name, *[x] * arity)
    for name, _ in calls:
        for x in inputs:
            assert rt.get_best_backend(f"{name}@device", x.numel()) is not Backend.GPU
            decision = rt.decide(f"{name}@device", x.numel())
            # (the key's next timed call may be a re-check of the GPU arm: they go on, rarely)
            assert decision.backend is not Backend.GPU or decision.reason is ar.Reason.RECHECK
    reads, fake.syncs = DeviceTensor.host_reads, 0
    before = _calls_by_arm(rt)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    for _ in range(200):
        for x in inputs:
            for name, arity in calls:
                out = rt.run(name, *[x] * arity)
                assert isinstance(out, DeviceTensor)
    assert DeviceTensor.host_reads == reads and fake.syncs == 0
    assert not rt.fallback_counts()
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    for x in inputs:
        rt.run("relu", x)
    assert DeviceTensor.host_reads > reads
    after = _calls_by_arm(rt)
    assert sum(after.values()) - sum(before.values()) == 200 * 2 * 4 + 2


def test_a_dtype_a_host_arm_lacks_falls_over_to_another_arm_with_fake_cuda_events(
        cuda_with_events) -> None:
    """bfloat16 tensors on the device, host arms asked for: numba has no bfloat16, so its
    round trips (SCALAR, and SIMD's variant ``numba``) refuse and the call runs on another
    arm — the caller gets the right result every time; ATen's round trip runs them."""
    fake = cuda_with_events
    fake.elapsed = SLOW_GPU_US
    rt = device_runtime(host_arms_on_device=True)
    x = fake.to_device(torch.randn(4096).to(torch.bfloat16))
    for _ in range(40):
        torch.testing.assert_close(rt.run("relu", x), torch.relu(x))
    assert rt.fallback_counts()
    aten_on_host = [n for k, n in rt.selection_counts().items()
                    if k.backend is Backend.SIMD and not k.variant]
    assert sum(aten_on_host) > 0

def test_a_call_that_would_not_fit_is_not_sent_and_falls_back_with_fake_cuda(fake_cuda) -> None:
    fake_cuda.free = 1_000  # bytes: far less than two 8 KB inputs and the result
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(disabled_backends="scalar"),
                            devices=DeviceProbe(gpu=True))
    a = np.ones(1024)
    for _ in range(10):  # exploration tries the GPU arm among the first calls
        np.testing.assert_array_equal(rt.run("add", a, a), 2 * a)
    assert fake_cuda.copies == 0  # nothing was copied to the device
    assert rt.fallback_counts().get(("add", Backend.GPU, Backend.SIMD), 0) >= 1
    with pytest.raises(ar.AllBackendsFailedError, match="not sent to the GPU"):
        gpu_runtime().run("add", a, a)


def test_cuda_out_of_memory_becomes_a_fallback_with_fake_cuda(fake_cuda) -> None:
    # (copies cost nothing here, so the GPU arm's floor never rules it out: it is tried)
    _gpu.set_device(fake_cuda, bandwidth_bytes_per_s=1e15)
    fake_cuda.fail_with = torch.cuda.OutOfMemoryError("CUDA out of memory (test double)")
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(disabled_backends="scalar"),
                            devices=DeviceProbe(gpu=True))
    rng = np.random.default_rng(2)
    for _ in range(10):
        a, b = rng.standard_normal((2, 300, 300))
        np.testing.assert_array_equal(rt.run("add", a, b), a + b)
    falls = rt.fallback_counts()
    assert falls.get(("add", Backend.GPU, Backend.SIMD), 0) >= 1, falls


def test_transfer_estimate_follows_the_measured_bandwidth_with_fake_cuda(fake_cuda) -> None:
    _gpu.set_device(fake_cuda)  # no bandwidth given: measured by a copy to the device
    one = _gpu.transfer_estimate_us(1 << 20)
    assert fake_cuda.copies == 2  # the probe (and its warm-up)
    assert one > 0
    assert _gpu.transfer_estimate_us(1 << 24) == pytest.approx(16 * one)


def _rows(rt: ar.AdaptiveRuntime, operation: str) -> dict[Backend, int]:
    return {r.backend: r.samples for r in rt.history_snapshot()
            if r.operation == operation and r.samples}


def test_calls_with_inputs_on_the_device_are_learned_apart_with_fake_cuda(fake_cuda) -> None:
    """A GPU arm costs a host call two copies and a device call none: the two are learned
    as separate keys ("add" and "add@device"), so neither's estimates are the other's."""
    rt = device_runtime()
    host = np.random.default_rng(4).standard_normal(4096)
    on_device = fake_cuda.to_device(host)
    for _ in range(12):
        np.testing.assert_allclose(rt.run("add", host, host), 2 * host)
        np.testing.assert_allclose(np.asarray(rt.run("add", on_device, on_device)), 2 * host)
    calls: dict[str, int] = {}
    for k, n in rt.selection_counts().items():
        calls[k.operation] = calls.get(k.operation, 0) + n
    assert calls == {"add": 12, "add@device": 12}
    assert Backend.GPU in _rows(rt, "add@device")  # tried where it pays no copies
    assert rt.decide("add@device", 4096).floors_us[Backend.GPU] == 0.0  # nothing to copy


def test_gpu_arm_whose_copies_would_lose_is_not_tried_on_host_inputs_with_fake_cuda(
        fake_cuda) -> None:
    """The transfer floor at the measured bandwidth: at 100 MB/s, adding two 1M-element host
    arrays means 24 MB of copies, 240 ms, while SIMD takes about a millisecond: the GPU arm
    is never run for them. On device inputs (no copies) it is tried."""
    _gpu.set_device(fake_cuda, bandwidth_bytes_per_s=1e8)
    rt = device_runtime()
    a = np.random.default_rng(6).standard_normal(1 << 20)
    for _ in range(20):
        rt.run("add", a, a)
    assert fake_cuda.copies == 0 and Backend.GPU not in _rows(rt, "add")
    decision = rt.decide("add", a.size)
    assert decision.floors_us[Backend.GPU] == pytest.approx(3 * a.nbytes / 1e8 * 1e6)
    assert decision.floors_us[Backend.GPU] > 1.5 * min(decision.estimates_us.values())
    device_a = fake_cuda.to_device(a)
    for _ in range(10):
        rt.run("add", device_a, device_a)
    assert Backend.GPU in _rows(rt, "add@device")


def test_a_fast_link_leaves_the_gpu_arm_in_the_running_with_fake_cuda(fake_cuda) -> None:
    _gpu.set_device(fake_cuda, bandwidth_bytes_per_s=1e15)  # copies cost nothing
    rt = device_runtime()
    a = np.random.default_rng(7).standard_normal(1 << 20)
    for _ in range(20):
        rt.run("add", a, a)
    assert Backend.GPU in _rows(rt, "add")


@pytest.mark.gpu
def test_on_a_real_cuda_device_results_match_and_device_tensors_stay_there() -> None:
    _gpu.set_device(None)
    rt = gpu_runtime()
    a = np.random.default_rng(3).standard_normal(10_000)
    np.testing.assert_allclose(rt.run("add", a, a), 2 * a)
    cuda_a = torch.from_numpy(a).cuda()
    out = rt.run("add", cuda_a, cuda_a)
    assert out.device.type == "cuda"
    np.testing.assert_allclose(out.cpu().numpy(), 2 * a)
    assert float(rt.run("dot", cuda_a, cuda_a)) == pytest.approx(float(np.dot(a, a)))
    assert _gpu.transfer_estimate_us(1 << 20) > 0


@pytest.mark.gpu
def test_on_a_real_cuda_device_no_adapted_call_synchronises(monkeypatch, tmp_path) -> None:
    _gpu.set_device(None)
    rt = ar.AdaptiveRuntime()  # (default settings: device inputs run on the GPU)
    xs = [torch.rand(n, device="cuda") for n in (256, 4096, 65536)]
    for i in range(300):  # (the keys converge: their calls go untimed)
        rt.run("relu", xs[i % 3])
    syncs = []
    real = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: (syncs.append(1),
                                                                     real(*a, **k)))
    with rt.record_calls(tmp_path / "timed.jsonl"):
        for i in range(3000):
            rt.run("relu", xs[i % 3])
    learned = read_calls(tmp_path / "timed.jsonl")
    assert not syncs  # (timed calls too: CUDA events, learned once complete)
    assert 0 < len(learned) < 300


@pytest.mark.gpu
def test_on_a_real_cuda_device_an_adapted_call_is_captured_in_a_cuda_graph() -> None:
    _gpu.set_device(None)
    rt = ar.AdaptiveRuntime()  # (default settings: device inputs run on the GPU)
    x = torch.rand(65536, device="cuda")
    side = torch.cuda.Stream()  # (warm-up on a side stream, as torch's docs do before capture)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(50):
            rt.run("relu", x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = rt.run("relu", x)
        total = rt.run("add", out, out)
    x.copy_(torch.randn(65536, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(total, 2 * torch.relu(x))
