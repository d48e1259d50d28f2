"""``adaptive_runtime_sdk.credentials``: header settings parsed as the SDK parses them, refused
without their values, and an HTTPS session that keeps the CA file it was given."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.util.re import parse_env_headers

from adaptive_runtime.errors import ConfigError
from adaptive_runtime_sdk import providers
from adaptive_runtime_sdk.credentials import (
    check_header_settings,
    otlp_http_session,
    parse_headers,
    shown_url,
)

SECRET = "s3cr3t-unit"
_NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
# printable ASCII a value may hold unencoded (no '"', ',', ';', '\\', '%'; '%' is tested
# encoded); inner spaces only (both parsers strip the ends)
_VALUE_CHARS = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '",;\\%')

names = st.text(_NAME_CHARS, min_size=1, max_size=12)
values = st.builds(lambda a, b: f"{a} {b}".strip() if b else a,
                   st.text(_VALUE_CHARS, min_size=1, max_size=12),
                   st.text(_VALUE_CHARS, max_size=6))


@given(st.dictionaries(names.map(str.lower), values, max_size=4))
def test_what_is_accepted_parses_exactly_as_the_sdk_parses_it(headers: dict[str, str]) -> None:
    raw = ",".join(f"{name}={value}" for name, value in headers.items())
    assert parse_headers(raw, "X") == dict(parse_env_headers(raw, liberal=True))


def test_names_are_lower_cased_values_url_decoded_empty_entries_skipped() -> None:
    parsed = parse_headers(" Authorization = Bearer%20abc ,, X-Tenant=a%2Cb,", "V")
    assert parsed == {"authorization": "Bearer abc", "x-tenant": "a,b"}


@pytest.mark.parametrize("raw", [
    f"authorization {SECRET}", f"authorization={SECRET};x", f'a="{SECRET}"',
    f"a={SECRET}%0A", f"a={SECRET}%00", f"ok=1,{SECRET}", f"a/b={SECRET}", f"={SECRET}",
])
def test_a_malformed_entry_is_a_config_error_without_its_value(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"^OTEL_EXPORTER_OTLP_HEADERS: entry \d of \d") as e:
        check_header_settings(None, {"OTEL_EXPORTER_OTLP_HEADERS": raw})
    assert SECRET not in str(e.value)


def test_the_headers_argument_must_be_printable_ascii_without_line_breaks() -> None:
    check_header_settings({"authorization": "Bearer abc", "x-a": ""}, {})
    for bad in ({"a": f"{SECRET}\r\nb: c"}, {"a": f"{SECRET}\t"}, {"a b": SECRET}):
        with pytest.raises(ConfigError, match="headers") as e:
            check_header_settings(bad, {})
        assert SECRET not in str(e.value)


def test_the_session_keeps_its_ca_file_over_requests_ca_bundle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/env/bundle.pem")
    with otlp_http_session() as session:
        session.verify = "/the/collector-ca.pem"  # what the SDK exporter sets
        settings = session.merge_environment_settings("https://c:4318", {}, None, None, None)
        assert settings["verify"] == "/the/collector-ca.pem"
        session.verify = True  # no CA file configured: the environment's bundle applies
        settings = session.merge_environment_settings("https://c:4318", {}, None, None, None)
        assert settings["verify"] == "/env/bundle.pem"


@pytest.mark.parametrize(("url", "shown"), [
    ("https://user:s3cret@collector:4318/v1/traces", "https://***@collector:4318/v1/traces"),
    ("http://token@127.0.0.1:4317", "http://***@127.0.0.1:4317"),
    ("http://collector:4318/v1/traces", "http://collector:4318/v1/traces"),
    ("/tmp/telemetry/traces.jsonl", "/tmp/telemetry/traces.jsonl"),
])
def test_a_user_name_or_password_in_an_endpoint_is_never_shown(url: str, shown: str) -> None:
    assert shown_url(url) == shown


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_the_destinations_telemetry_shows_carry_no_password(tmp_path, protocol: str) -> None:
    # (what the shutdown warning, Telemetry.traces_destination and the CLI print)
    url = "http://user:s3cret@127.0.0.1:4318"
    spans, traces_shown = providers.make_span_exporter("otlp", url, protocol, None,
                                                       str(tmp_path), {})
    metrics, metrics_shown = providers.make_metric_exporter("otlp", url, protocol, None,
                                                            str(tmp_path), {})
    try:
        for shown in (traces_shown, metrics_shown):
            assert shown.startswith("http://***@127.0.0.1:4318"), shown
            assert "s3cret" not in shown and "user" not in shown
    finally:
        spans.shutdown()
        metrics.shutdown()
