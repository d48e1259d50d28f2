"""The OpenTelemetry resource ``configure()`` installs: who is sending, by the specification.

- ``OTEL_RESOURCE_ATTRIBUTES``: ``key=value`` pairs separated by commas, values
  percent-encoded (``deployment.environment=prod,team=ml%2Cinfra``). A pair without ``=`` or
  with an empty key, or a value that is not valid percent-encoding, is a ``ConfigError``
  naming the variable (the SDK would log it and drop the whole variable).
- ``service.name``, highest first: the ``service_name`` argument (code that names its service
  means it); ``OTEL_SERVICE_NAME``; ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES`` (the
  specification: ``OTEL_SERVICE_NAME`` wins over it); the ``default_service_name`` argument (a
  script's name for itself, which the environment may override: the demo and the examples
  pass theirs so); ``adaptive_runtime``.
- ``service.instance.id``: from ``OTEL_RESOURCE_ATTRIBUTES`` where set, else a random UUID
  made once per process, so two runs of one service (or two ranks on one machine) keep
  their series apart in Prometheus and their traces apart in Jaeger.
- A distributed job's rank and world size (``_process.rank_attributes``).
"""

from __future__ import annotations

import urllib.parse
import uuid
from collections.abc import Mapping

from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource

from adaptive_runtime._process import rank_attributes
from adaptive_runtime.errors import ConfigError

__all__ = ["DEFAULT_SERVICE_NAME", "make_resource", "resource_attributes"]

DEFAULT_SERVICE_NAME = "adaptive_runtime"
_VARIABLE = "OTEL_RESOURCE_ATTRIBUTES"
# this process's service.instance.id where the environment names none (see the docstring)
_INSTANCE_ID = str(uuid.uuid4())


def resource_attributes(env: Mapping[str, str]) -> dict[str, str]:
    """``OTEL_RESOURCE_ATTRIBUTES`` parsed (empty where unset); ``ConfigError`` naming the
    variable and the first bad pair where it is malformed."""
    raw = env.get(_VARIABLE, "")
    attributes: dict[str, str] = {}
    for pair in raw.split(","):
        if not pair.strip():
            continue  # (a trailing comma, or nothing set)
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{_VARIABLE}: expected comma-separated key=value pairs, got "
                              f"{pair.strip()[:80]!r}")
        try:
            attributes[key] = urllib.parse.unquote(value.strip(), errors="strict")
        except UnicodeDecodeError:
            raise ConfigError(f"{_VARIABLE}: the value of {key!r} is not valid "
                              f"percent-encoded UTF-8") from None
    return attributes


def make_resource(service_name: str | None, default_service_name: str | None,
                  env: Mapping[str, str]) -> Resource:
    """The resource for ``configure()``'s providers (see the module docstring for the
    precedence). Raises ``ConfigError`` before anything is made where the environment is
    malformed."""
    from_env = resource_attributes(env)  # (checked: the SDK would log and drop a bad one)
    name = (service_name or env.get("OTEL_SERVICE_NAME", "").strip()
            or from_env.get(SERVICE_NAME) or default_service_name or DEFAULT_SERVICE_NAME)
    attributes: dict[str, str | int] = {SERVICE_NAME: name, **rank_attributes()}
    if SERVICE_INSTANCE_ID not in from_env:
        attributes[SERVICE_INSTANCE_ID] = _INSTANCE_ID
    # Resource.create reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME itself (as parsed
    # above, once checked) and adds the SDK's own telemetry.sdk.*; what is given here wins.
    return Resource.create(attributes)
