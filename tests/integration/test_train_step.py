"""``ar.train_step``: the step span is the parent of the runtime's spans made during the step,
as received by a real OTLP receiver; decorator and context manager; errors; rank attributes;
nothing made with tracing off."""

from __future__ import annotations

import time
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_tracing import EXPORT_ALL, export_into, make_runtime, two_arms

import adaptive_runtime as ar


@pytest.fixture
def provider(otlp_receiver: Any) -> Any:
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(
        OTLPSpanExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True)))
    yield provider
    provider.shutdown()


def _loop(rt: ar.AdaptiveRuntime, provider: TracerProvider, steps: int) -> None:
    for step in range(steps):
        with ar.train_step(step=step, epoch=1, batch_size=32, attributes={"lr": 0.1},
                           runtime=rt, tracer_provider=provider):
            rt.run("scale", 64)
            rt.run("scale", 4096)


def test_runtime_spans_land_under_their_train_step(otlp_receiver, provider) -> None:
    rt = make_runtime(EXPORT_ALL)
    two_arms(rt)
    export_into(rt, provider)
    _loop(rt, provider, 4)
    assert rt.flush_telemetry(10.0)
    spans = otlp_receiver.wait_for_spans(lambda s: len([x for x in s if x.name.startswith(
        "adaptive.execute")]) >= 8)
    steps = {s.span_id: s for s in spans if s.name == "train_step"}
    assert len(steps) == 4
    assert sorted(s.attributes["train.step"] for s in steps.values()) == [0, 1, 2, 3]
    for step in steps.values():
        assert step.attributes["train.epoch"] == 1
        assert step.attributes["train.batch_size"] == 32
        assert step.attributes["lr"] == 0.1
    runtime_spans = [s for s in spans if s.name.startswith("adaptive.")]
    assert len(runtime_spans) == 16  # a select and an execute per call, every call traced
    assert all(s.parent_span_id in steps for s in runtime_spans)
    # each step's spans: that step's two calls (select + execute each)
    per_step = {sid: sum(s.parent_span_id == sid for s in runtime_spans) for sid in steps}
    assert set(per_step.values()) == {4}


def test_as_a_decorator_each_call_is_a_numbered_step(otlp_receiver, provider) -> None:
    rt = make_runtime(EXPORT_ALL)
    two_arms(rt)
    export_into(rt, provider)

    @ar.train_step(epoch=0, runtime=rt, tracer_provider=provider)
    def step(n: int) -> Any:
        return rt.run("scale", n)

    assert [step(64)[1] for _ in range(3)] == [64, 64, 64]
    assert rt.flush_telemetry(10.0)
    spans = otlp_receiver.wait_for_spans(lambda s: sum(x.name == "train_step" for x in s) == 3)
    assert sorted(s.attributes["train.step"] for s in spans if s.name == "train_step") == [0,
                                                                                           1, 2]


def test_an_exception_marks_the_step_span_and_reaches_the_caller() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with pytest.raises(ZeroDivisionError), ar.train_step(step=7, tracer_provider=provider):
        _ = 1 / 0
    (span,) = exporter.get_finished_spans()
    assert span.name == "train_step" and span.status.status_code.name == "ERROR"
    assert span.events[0].name == "exception"


def test_steps_of_a_distributed_job_carry_the_rank(monkeypatch) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with ar.train_step(step=0, tracer_provider=provider):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.attributes["adaptive.rank"] == 3 and span.attributes["adaptive.world_size"] == 4


def test_with_tracing_off_no_span_is_made() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rt = make_runtime(ar.RuntimeConfig(tracing=False))
    with ar.train_step(step=0, runtime=rt, tracer_provider=provider) as step:
        step.set_attribute("loss", 1.0)  # (a no-op)
    assert exporter.get_finished_spans() == ()


def test_sync_every_n_steps_calls_sync_history_recorded_by_a_stand_in(monkeypatch) -> None:
    rt = make_runtime(ar.RuntimeConfig(tracing=False))
    synced: list[Any] = []
    monkeypatch.setattr(rt, "sync_history", lambda group=None: synced.append(group))
    for i in range(7):
        with ar.train_step(step=i, runtime=rt, sync_every=3, group="g"):
            pass
    assert synced == ["g", "g"]  # after steps 2 and 5


@pytest.mark.parametrize("bad", [{"step": -1}, {"step": 1.5}, {"sync_every": 0},
                                 {"name": ""}])
def test_bad_arguments_are_value_errors(bad) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        ar.train_step(**bad)


def test_the_runtimes_step_span_is_made_off_the_loop_with_the_ids_its_calls_saw(
        otlp_receiver, provider) -> None:
    """Through the runtime's span recorder (no tracer_provider given): the loop draws the
    step span's ids and makes them current; the span itself is made on the recorder's
    worker, with those ids, so the step's calls are its children."""
    rt = make_runtime(EXPORT_ALL)
    two_arms(rt)
    ar.telemetry.instrument(rt, tracer_provider=provider)
    for step in range(3):
        with ar.train_step(step=step, epoch=2, runtime=rt) as span:
            rt.run("scale", 64)
            span.set_attribute("loss", 0.5)
    with pytest.raises(KeyError), ar.train_step(step=3, runtime=rt):
        rt.run("scale", 64)
        raise KeyError("boom")
    assert rt.flush_telemetry(10.0)
    spans = otlp_receiver.wait_for_spans(lambda s: sum(x.name == "train_step" for x in s) == 4)
    steps = {s.span_id: s for s in spans if s.name == "train_step"}
    assert sorted(s.attributes["train.step"] for s in steps.values()) == [0, 1, 2, 3]
    assert all(s.attributes["train.epoch"] == 2 for s in steps.values()
               if s.attributes["train.step"] < 3)
    assert [s.attributes.get("loss") for s in steps.values()].count(0.5) == 3
    failed = next(s for s in steps.values() if s.attributes["train.step"] == 3)
    assert failed.status_code == "ERROR" and failed.events[0].name == "exception"
    runtime_spans = [s for s in spans if s.name.startswith("adaptive.")]
    assert len(runtime_spans) == 8
    assert all(s.parent_span_id in steps and s.trace_id == steps[s.parent_span_id].trace_id
               for s in runtime_spans)
    for step in steps.values():
        assert step.start_time_unix_nano <= step.end_time_unix_nano


def test_short_steps_are_sampled_and_every_traced_call_keeps_its_step(otlp_receiver,
                                                                       provider) -> None:
    """Default budgets: short steps come faster than the steps' share of the span budget
    (a tenth of spans_per_sec: 20 step spans a second), so most are held back (counted) and
    each exported one says how many steps it stands for; a step whose calls' spans went out
    always has its own."""
    rt = make_runtime(ar.RuntimeConfig(sampling_threshold_us=1e9))
    two_arms(rt)
    ar.telemetry.instrument(rt, tracer_provider=provider)
    steps = 500
    for step in range(steps):
        with ar.train_step(step=step, runtime=rt):
            rt.run("scale", 64)
            time.sleep(0.002)  # (500 steps of ~2 ms: a burst of 20 spans, then 20 a second)
    assert rt.flush_telemetry(10.0)
    counts = rt.trace_counts()["steps"]
    assert counts["exported"] + counts["suppressed"] == steps
    assert counts["suppressed"] > 0
    spans = otlp_receiver.wait_for_spans(
        lambda s: sum(x.name == "train_step" for x in s) == counts["exported"])
    step_spans = {s.span_id: s for s in spans if s.name == "train_step"}
    assert len(step_spans) == counts["exported"] < steps
    runtime_spans = [s for s in spans if s.name.startswith("adaptive.")]
    assert runtime_spans and all(s.parent_span_id in step_spans for s in runtime_spans)
    weights = [s.attributes.get("adaptive.sampling.weight", 1.0) for s in step_spans.values()]
    assert sum(weights) <= steps and any(w > 1 for w in weights)


def test_a_step_whose_span_user_code_reads_is_exported_with_its_children(otlp_receiver,
                                                                         provider) -> None:
    """With no span budget (``spans_per_sec=0``: only the first step and steps something
    needs are exported), a step under which the user made a span of their own
    still gets its span, with the ids that span named as its parent; the steps between are
    held back, and no two exported steps share an id (a step's stand-in span is reused only
    while nothing has seen it)."""
    rt = make_runtime(ar.RuntimeConfig(spans_per_sec=0.0, sampling_threshold_us=1e9))
    two_arms(rt)
    ar.telemetry.instrument(rt, tracer_provider=provider)
    tracer = provider.get_tracer("user-code")
    for step in range(40):
        with ar.train_step(step=step, runtime=rt):
            rt.run("scale", 64)
            if step % 10 == 5:
                with tracer.start_as_current_span("user.forward"):
                    pass
    assert rt.flush_telemetry(10.0)
    counts = rt.trace_counts()["steps"]
    spans = otlp_receiver.wait_for_spans(
        lambda s: sum(x.name == "train_step" for x in s) == counts["exported"]
        and sum(x.name == "user.forward" for x in s) == 4)
    step_spans = {s.span_id: s for s in spans if s.name == "train_step"}
    assert len(step_spans) == counts["exported"]  # (ids unique: one span per exported step)
    user = [s for s in spans if s.name == "user.forward"]
    parents = sorted(step_spans[s.parent_span_id].attributes["train.step"] for s in user)
    assert parents == [5, 15, 25, 35]
    assert counts["suppressed"] > 0
