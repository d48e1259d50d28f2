"""What an OTLP connection carries that must stay secret or be trusted: headers and the CA.

- :func:`check_header_settings`: the export headers — ``configure(headers=...)`` and
  ``OTEL_EXPORTER_OTLP_HEADERS`` / ``OTEL_EXPORTER_OTLP_{TRACES,METRICS}_HEADERS`` — checked
  once, before anything is set up. A malformed setting is a :class:`ConfigError` naming the
  variable (or argument), the entry and what is accepted; it never shows a value (header
  values are credentials: ``authorization=Bearer ...``). Left to the SDK, a malformed entry
  would be logged *with its value* and then silently dropped (the export goes out without its
  credentials), and a value that decodes to a line break would reach the HTTP library, whose
  error quotes it.
- :func:`otlp_http_session`: the ``requests`` session of the OTLP/HTTP exporters. With a plain
  session, ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` (set by many shells, conda, corporate
  set-ups) silently replace the CA file the exporter was given (``OTEL_EXPORTER_OTLP_CERTIFICATE``),
  so a collector signed by a private CA is never trusted (psf/requests#3829).
- :func:`shown_url`: an endpoint as logs and ``Telemetry`` show it, a user name or password
  in it (``https://user:token@collector``) replaced by ``***``.
- :func:`quiet_grpc_handshake_logs`: grpc's C core prints one line to stderr for every failed
  TLS handshake (each retry of each export, for as long as a certificate is wrong); the
  exporter's own warning already says it once.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from adaptive_runtime.errors import ConfigError

__all__ = ["HEADER_VARIABLES", "REDACTED", "check_header_settings", "otlp_http_session",
           "parse_headers", "quiet_grpc_handshake_logs", "shown_url"]

REDACTED = "***"  # what an error message shows in place of a header value
#: The variables the OTLP exporters read headers from (the per-signal ones win for their signal).
HEADER_VARIABLES = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                    "OTEL_EXPORTER_OTLP_METRICS_HEADERS")

# The OTLP exporter specification's format (W3C baggage without properties): comma-separated
# name=value, values URL-encoded. Like the Python SDK, an unencoded space inside a value is
# accepted ("authorization=Bearer abc"). Names are narrower than the specification's tokens:
# gRPC metadata keys take only lower-case letters, digits and "-_." (names are lower-cased).
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
# printable ASCII but '"', ',', ';' and '\' (the SDK's liberal value format)
_VALUE = re.compile(r"[\x20\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*")
# what a value may be once decoded: printable ASCII (gRPC metadata's rule; no line breaks,
# which would split an HTTP header)
_DECODED_VALUE = re.compile(r"[\x20-\x7e]*")
_FORMAT = ("a comma-separated list of name=value pairs, values URL-encoded "
           "(e.g. authorization=Bearer%20TOKEN,x-tenant=a)")


def parse_headers(raw: str, source: str) -> dict[str, str]:
    """Headers from an ``OTEL_EXPORTER_OTLP_*HEADERS`` value (names lower-cased, values
    URL-decoded). :class:`ConfigError` naming ``source`` for a malformed entry, without its
    value."""
    entries = [entry.strip() for entry in re.split(r"[ \t]*,[ \t]*", raw)]
    entries = [entry for entry in entries if entry]
    headers: dict[str, str] = {}
    for number, entry in enumerate(entries, 1):
        where = f"{source}: entry {number} of {len(entries)}"
        name, equals, value = entry.partition("=")
        name = unquote(name).strip()
        if not equals or not _NAME.fullmatch(name):
            raise ConfigError(f"{where} is not name=value with a header name of letters, "
                              f"digits and '-_.' (the entry is not shown: header values are "
                              f"secrets); expected {_FORMAT}")
        value = value.strip()
        if not _VALUE.fullmatch(value) or not _DECODED_VALUE.fullmatch(unquote(value)):
            raise ConfigError(f"{where} ({name}={REDACTED}): the value has characters that "
                              f"must be URL-encoded, or decodes to a control character "
                              f"(the value is not shown); expected {_FORMAT}")
        headers[name.lower()] = unquote(value)
    return headers


def _check_header_argument(headers: Mapping[str, str]) -> None:
    if not isinstance(headers, Mapping):
        raise ConfigError(f"headers must be a mapping of header names to values, got a "
                          f"{type(headers).__name__}")
    for name, value in headers.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(f"headers: the name {name!r} is not a header name (letters, "
                              f"digits and '-_.')")
        if not isinstance(value, str) or not _DECODED_VALUE.fullmatch(value):
            raise ConfigError(f"headers[{name!r}]: the value must be a str of printable "
                              f"ASCII characters, no line breaks (the value is not shown)")


def check_header_settings(headers: Mapping[str, str] | None, env: Mapping[str, str]) -> None:
    """Check the ``headers`` argument of ``configure()`` and every header variable in ``env``;
    :class:`ConfigError` for the first malformed one (see the module docstring)."""
    if headers is not None:
        _check_header_argument(headers)
    for variable in HEADER_VARIABLES:
        raw = env.get(variable)
        if raw:
            parse_headers(raw, variable)


def otlp_http_session() -> Any:
    """A new ``requests.Session`` in which the CA file the OTLP/HTTP exporter was given wins
    over ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE``. Proxies and the rest of the
    environment's settings still apply; with no CA file configured, those variables work as
    usual."""
    return _session_class()()


@functools.cache
def _session_class() -> type:
    import requests  # (only when OTLP/HTTP is used: it costs ~0.1 s at import)

    class OtlpHttpSession(requests.Session):
        def merge_environment_settings(self, url: Any, proxies: Any, stream: Any,
                                       verify: Any, cert: Any) -> dict[str, Any]:
            settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
            # (the exporter sets the session's verify to its CA file; requests would let the
            # environment's bundle, merged in as a per-request setting, override it)
            if verify is None and isinstance(self.verify, str):
                settings["verify"] = self.verify
            return settings

    return OtlpHttpSession


def shown_url(url: str) -> str:
    """``url`` with its user name and password, if any, replaced by ``***`` (the exporter
    keeps the real one): what the shutdown warning, ``Telemetry.traces_destination`` and the
    CLI print."""
    try:
        parts = urlsplit(url)
    except ValueError:  # (not a URL the exporter could use either: shown without its userinfo)
        return url.rpartition("@")[2] if "@" in url else url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=f"{REDACTED}@{parts.netloc.rpartition('@')[2]}"))


def quiet_grpc_handshake_logs() -> None:
    """Let grpc's C core print errors only (``GRPC_VERBOSITY=ERROR``) unless the process says
    otherwise — called before grpc is first imported, the only time the core reads it."""
    if "grpc" not in sys.modules:
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
