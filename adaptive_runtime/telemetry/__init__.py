"""Telemetry for adaptive_runtime: spans, metrics and their exporters.

So far: the embedded default exporters that write OTLP/JSON lines files
(:mod:`adaptive_runtime.telemetry.otlp_json`). Span and metric export from the runtime and
``configure()`` come next (see DESIGN.md, "Telemetry contract").
"""
