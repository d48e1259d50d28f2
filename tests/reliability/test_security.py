"""Security of the telemetry path: TLS, credentials that never leak, a stack on loopback.

- OTLP over TLS, both protocols: the test makes its own CA and a server certificate for
  127.0.0.1/localhost, starts the real OTLP receiver in TLS mode, and the runtime exports to it
  trusting that CA through ``OTEL_EXPORTER_OTLP_CERTIFICATE`` — with ``REQUESTS_CA_BUNDLE`` set
  to the system bundle, as many shells and conda set it (requests would let it win over the
  exporter's CA file). A CA that did not sign the server's certificate: the export fails, is
  counted, is said in one warning, and nothing raises into the loop.
- Auth headers from ``OTEL_EXPORTER_OTLP_HEADERS`` reach the receiver with every request; a
  collector that refuses them (``UNAUTHENTICATED`` / 401) costs the spans, counted, and one
  warning.
- The header's value never appears anywhere else: log records of every logger at DEBUG,
  stderr and stdout, the exported spans and metrics (every byte of the requests), the
  ``repr``/``str`` of what ``configure()`` builds, and the errors for a malformed header setting.
- The compose stack (``docker-compose.yml``, ``deploy/grafana/provisioning/**``) publishes
  ports on 127.0.0.1 only and its Grafana has no anonymous admin (read from the files as
  written: no tool needed). ``tests/integration/test_deploy.py`` checks the rest of the stack.

``configure()`` installs the process-wide OpenTelemetry providers, so every export runs in a
fresh interpreter (as ``tests/integration/test_configure.py`` does) that reports what it saw as
JSON; the receiver runs in this process.
"""

from __future__ import annotations

import configparser
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from otlp_receiver import OtlpReceiver, ReceivedRequest, ReceivedSpan, TlsFiles
from tls_certs import CertificateAuthority, make_ca

import adaptive_runtime as ar
from adaptive_runtime.errors import ConfigError
from adaptive_runtime_sdk.credentials import HEADER_VARIABLES

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
GRAFANA_PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"

SECRET = "s3cr3t-token-7f9c2e"  # distinctive: found nowhere unless it leaked
AUTHORIZATION = f"Bearer {SECRET}"
PROTOCOLS = ("grpc", "http/protobuf")
TIMEOUT_S = 60
LAST_SIZE = 777_777

# Runs in a fresh interpreter: every logger at DEBUG into a list, configure() from the
# environment, a loop, a flush; then the repr/str of what configure() built, and shutdown.
SCRIPT = textwrap.dedent('''
    import json, logging, os, sys, time
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            text = record.getMessage()
            if record.exc_info:
                text += "\\n" + logging.Formatter().formatException(record.exc_info)
            records.append({"level": record.levelno, "logger": record.name, "text": text})

    logging.getLogger().addHandler(Keep())
    logging.getLogger().setLevel(logging.DEBUG)
    logging.getLogger("a.deep.logger").debug("capture check")  # (proves the capture works)

    import adaptive_runtime as ar
    from adaptive_runtime.operations import DeviceProbe
    from adaptive_runtime_sdk import providers
    from opentelemetry.sdk.trace import SpanProcessor

    class CountEnded(SpanProcessor):
        ended = 0
        def on_end(self, span):
            CountEnded.ended += 1

    tel = ar.telemetry.configure()
    tel.tracer_provider.add_span_processor(CountEnded())
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(), builtin_ops=False,
                            devices=DeviceProbe(gpu=False))
    op = rt.register("scale", size=lambda n: n, kind="vector")
    op.add_implementation("simd", lambda n: 2 * n)
    op.add_implementation("scalar", lambda n: n + n)
    for i in range(300):
        assert rt.run("scale", 1000 + i % 5) == 2 * (1000 + i % 5)
    assert rt.run("scale", LAST_SIZE) == 2 * LAST_SIZE
    rt.flush_telemetry()
    tel.tracer_provider.force_flush(30_000)  # every span's export has answered after this
    if os.environ.get("EXPECT_LOST"):  # (should a flush ever return before the export ends)
        deadline = time.monotonic() + 20
        while tel.spans_lost < CountEnded.ended and time.monotonic() < deadline:
            time.sleep(0.05)
    exported_phase = len(records)

    objects = {"Telemetry": tel, "process providers": providers.installed,
               "config": ar.RuntimeConfig.from_env(), "runtime config": rt.config,
               "span exporter guard": providers.installed.span_exporter,
               "span exporter": providers.installed.span_exporter.target,
               "metric exporter guard": providers.installed.metric_exporter,
               "metric exporter": getattr(providers.installed.metric_exporter, "target", None),
               "tracer provider": tel.tracer_provider, "meter provider": tel.meter_provider}
    reprs = {f"{kind}({name})": show(value) for name, value in objects.items()
             for kind, show in (("repr", repr), ("str", str))}
    lost = tel.spans_lost
    ar.telemetry.shutdown()
    print("RESULT " + json.dumps({"done": True, "lost": lost, "ended": CountEnded.ended,
                                  "exported_phase": exported_phase, "records": records,
                                  "reprs": reprs}), flush=True)
''').replace("LAST_SIZE", str(LAST_SIZE))


# ---------------------------------------------------------------------------- fixtures


class Pki:
    """The test's CA, the receiver's certificate it signed, and a CA that signed nothing."""

    def __init__(self, folder: Path) -> None:
        self.ca: CertificateAuthority = make_ca(folder / "ca", "adaptive_runtime test CA")
        self.server = self.ca.issue_server()
        self.other_ca: CertificateAuthority = make_ca(folder / "other", "unrelated CA")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_receiver(pki: Pki) -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver(tls=TlsFiles(pki.server.certificate, pki.server.private_key))
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()


class Ran:
    """A finished script: exit code, output, and the RESULT it printed."""

    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.returncode, self.stdout, self.stderr = proc.returncode, proc.stdout, proc.stderr
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        self.result: dict[str, Any] = json.loads(lines[-1][7:]) if lines else {}

    def __repr__(self) -> str:
        return f"exit code {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"

    def ok(self) -> Ran:
        assert self.returncode == 0 and self.result.get("done") is True, self
        assert "Traceback" not in self.stderr, self
        return self

    def warnings(self, phase: str = "export") -> list[dict[str, Any]]:
        """Records at WARNING and above: up to the end of the export (``export``), or all."""
        records = self.result["records"]
        if phase == "export":
            records = records[:self.result["exported_phase"]]
        return [r for r in records if r["level"] >= logging.WARNING]


def export_over_tls(receiver: OtlpReceiver, protocol: str, ca_file: Path, cwd: Path, *,
                    expect_lost: bool = False) -> Ran:
    """Run SCRIPT exporting to ``receiver`` over ``protocol``, trusting ``ca_file``, with the
    auth header set; the receiver is cleared first. ``expect_lost``: every export will fail
    (the script waits until they are all counted)."""
    receiver.clear()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "ADAPTIVE_RUNTIME_", "GRPC_"))}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=(receiver.grpc_endpoint if protocol == "grpc"
                                     else receiver.http_endpoint),
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        OTEL_EXPORTER_OTLP_CERTIFICATE=str(ca_file),
        OTEL_EXPORTER_OTLP_HEADERS=f"authorization={AUTHORIZATION}",
        # What many shells and conda set: requests would let it override the CA file above.
        REQUESTS_CA_BUNDLE=_system_ca_bundle(),
        # Long enough for a failing export to log its first retry (the one line that says
        # why), short enough to keep the test quick; the span processor exports promptly.
        OTEL_EXPORTER_OTLP_TIMEOUT="3", OTEL_BSP_SCHEDULE_DELAY="50",
        PYTHONDONTWRITEBYTECODE="1", **({"EXPECT_LOST": "1"} if expect_lost else {}))
    proc = subprocess.run([sys.executable, "-W", "error", "-c", SCRIPT], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    return Ran(proc)


def _system_ca_bundle() -> str:
    import ssl

    paths = ssl.get_default_verify_paths()
    for candidate in (os.environ.get("REQUESTS_CA_BUNDLE"), paths.cafile,
                      "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return candidate
    import certifi  # (a dependency of requests)

    return certifi.where()


@dataclass(frozen=True)
class Received:
    """What the receiver got from one run (kept: the receiver serves the next run too)."""

    requests: list[ReceivedRequest]
    spans: list[ReceivedSpan]
    trace_requests: list[Any]
    metrics_requests: list[Any]


@pytest.fixture(scope="module", params=PROTOCOLS)
def tls_run(request: pytest.FixtureRequest, tls_receiver: OtlpReceiver, pki: Pki,
            tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Ran, Received]:
    """One export over TLS per protocol, trusting the right CA; shared by the tests that
    look at different sides of it."""
    protocol = request.param
    ran = export_over_tls(tls_receiver, protocol, pki.ca.certificate,
                          tmp_path_factory.mktemp("tls-run"))
    return protocol, ran, Received(tls_receiver.requests(), tls_receiver.spans(),
                                   tls_receiver.trace_requests(),
                                   tls_receiver.metrics_requests())


def _secret_in(text: str) -> bool:
    return SECRET in text


# ---------------------------------------------------------------------------- TLS and headers


def test_spans_arrive_over_tls_trusting_the_ca_made_by_the_test(
        tls_run: tuple[str, Ran, Received], reliability: Any) -> None:
    protocol, ran, received = tls_run
    ran.ok()
    spans = received.spans
    names = {s.name for s in spans}
    assert {"adaptive.select scale", "adaptive.execute scale"} <= names, received.requests
    assert any(s.attributes.get("adaptive.input_size") == LAST_SIZE for s in spans), \
        "the last call's spans did not arrive"
    requests = received.requests
    transport = "grpc" if protocol == "grpc" else "http"
    assert {r.signal for r in requests} == {"traces", "metrics"}, requests
    for r in requests:
        assert (r.transport, r.tls, r.accepted) == (transport, True, True), r
    assert ran.result["lost"] == 0, ran.result["lost"]
    assert len(spans) == ran.result["ended"], "spans ended and spans received differ"
    reliability.record(
        load=f"OTLP {protocol} over TLS, CA made by the test, REQUESTS_CA_BUNDLE set",
        protocol=protocol, spans_ended=ran.result["ended"], spans_received_over_tls=len(spans),
        requests_over_tls=len(requests), spans_lost=ran.result["lost"])


def test_auth_header_from_the_environment_arrives_with_every_request(
        tls_run: tuple[str, Ran, Received], reliability: Any) -> None:
    protocol, ran, received = tls_run
    ran.ok()
    requests = received.requests
    assert requests
    for r in requests:
        assert r.headers.get("authorization") == AUTHORIZATION, (r.signal, sorted(r.headers))
    reliability.record(load=f"OTEL_EXPORTER_OTLP_HEADERS=authorization=..., {protocol}",
                       protocol=protocol, requests=len(requests),
                       requests_with_the_header=len(requests))


def test_the_header_value_appears_in_no_log_output_span_metric_or_repr(
        tls_run: tuple[str, Ran, Received], reliability: Any) -> None:
    protocol, ran, received = tls_run
    ran.ok()
    records, reprs = ran.result["records"], ran.result["reprs"]
    places: dict[str, str] = {f"log record {i} ({r['logger']})": r["text"]
                              for i, r in enumerate(records)}
    places.update(reprs)
    places["stderr"] = ran.stderr
    places["stdout"] = ran.stdout
    for i, message in enumerate(received.trace_requests):
        places[f"trace export request {i}"] = _all_text(message)
    for i, message in enumerate(received.metrics_requests):
        places[f"metrics export request {i}"] = _all_text(message)
    # what it sees must be real: logs at DEBUG, the objects, the exported data
    assert any(r["text"] == "capture check" for r in records), "DEBUG records are not captured"
    assert "Telemetry(" in reprs["repr(Telemetry)"] and received.trace_requests
    leaks = sorted(place for place, text in places.items() if _secret_in(text))
    assert leaks == [], f"the header value leaked into: {leaks}"
    reliability.record(load=f"secret in OTEL_EXPORTER_OTLP_HEADERS, {protocol} export",
                       protocol=protocol, log_records_checked=len(records),
                       reprs_checked=len(reprs), export_requests_checked=(
                           len(received.trace_requests) + len(received.metrics_requests)),
                       places_checked=len(places), leaks_found=len(leaks))


def _all_text(message: Any) -> str:
    # every byte of the request as it was received, plus its text form (attribute values)
    return message.SerializeToString().decode("latin-1") + str(message)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_ca_that_did_not_sign_the_server_fails_the_export_counted_in_one_line(
        tls_receiver: OtlpReceiver, pki: Pki, tmp_path: Path, protocol: str,
        reliability: Any) -> None:
    ran = export_over_tls(tls_receiver, protocol, pki.other_ca.certificate, tmp_path,
                          expect_lost=True).ok()
    # nothing got through the handshake
    assert tls_receiver.requests() == [], tls_receiver.requests()
    # every span made was counted as lost by the time its export answered
    assert ran.result["ended"] > 0
    assert ran.result["lost"] == ran.result["ended"], ran.result
    # one warning says it, and says why
    warnings = ran.warnings()
    assert len(warnings) == 1, [w["text"] for w in warnings]
    assert "CERTIFICATE_VERIFY_FAILED" in warnings[0]["text"], warnings[0]
    # and grpc's core printed no line per failed handshake
    assert "Handshake failed" not in ran.stderr, ran.stderr
    texts = [r["text"] for r in ran.result["records"]] + [ran.stderr, ran.stdout]
    assert not any(_secret_in(t) for t in texts)
    reliability.record(load=f"OTLP {protocol} over TLS trusting a CA that did not sign it",
                       protocol=protocol, spans_ended=ran.result["ended"],
                       spans_counted_lost=ran.result["lost"], requests_received=0,
                       warning_lines=len(warnings), exceptions_in_caller=0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_rejected_credential_fails_the_export_in_one_line_without_the_value(
        tls_receiver: OtlpReceiver, pki: Pki, tmp_path: Path, protocol: str,
        reliability: Any) -> None:
    tls_receiver.fail_with = grpc.StatusCode.UNAUTHENTICATED  # (HTTP: 401)
    try:
        ran = export_over_tls(tls_receiver, protocol, pki.ca.certificate, tmp_path,
                              expect_lost=True).ok()
        requests = tls_receiver.requests()
    finally:
        tls_receiver.fail_with = None
    assert requests and all(r.status == "UNAUTHENTICATED" and r.tls for r in requests)
    assert ran.result["ended"] > 0 and ran.result["lost"] == ran.result["ended"], ran.result
    warnings = ran.warnings()
    assert len(warnings) == 1, [w["text"] for w in warnings]
    assert re.search(r"UNAUTHENTICATED|401", warnings[0]["text"]), warnings[0]
    texts = [r["text"] for r in ran.result["records"]] + [ran.stderr, ran.stdout]
    leaks = [t for t in texts if _secret_in(t)]
    assert leaks == [], leaks
    reliability.record(load=f"collector refuses the credential ({protocol}, UNAUTHENTICATED)",
                       protocol=protocol, requests_refused=len(requests),
                       spans_ended=ran.result["ended"], spans_counted_lost=ran.result["lost"],
                       warning_lines=len(warnings), places_checked=len(texts),
                       leaks_found=len(leaks))


# ---------------------------------------------------------------------------- bad settings

MALFORMED = {
    "no equals sign": f"authorization: Bearer {SECRET}",
    "a semicolon": f"authorization=Bearer {SECRET};x",
    "a quote": f'authorization="{SECRET}"',
    "an encoded line break": f"authorization=Bearer%0D%0AX-Injected:%20{SECRET}",
    "a bad second entry": f"x-tenant=a,{SECRET}",
    "a bad name": f"auth(orization)={SECRET}",
}


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)  # (the root logger: every logger propagates to it)
    yield caplog


@pytest.mark.parametrize("variable", HEADER_VARIABLES)
def test_a_malformed_header_variable_is_an_error_naming_it_without_the_value(
        variable: str, all_logs: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str],
        reliability: Any) -> None:
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    texts: list[str] = []
    for case, raw in MALFORMED.items():
        with pytest.raises(ConfigError) as caught:
            ar.telemetry.configure(environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "https://127.0.0.1:1",
                                            variable: raw})
        message = str(caught.value)
        assert message.startswith(variable + ":"), (case, message)
        assert "entry" in message and "name=value" in message, (case, message)
        texts += [message, repr(caught.value),
                  "".join(traceback.format_exception(caught.value))]
    assert trace.get_tracer_provider() is provider, "a bad setting installed a provider"
    out, err = capfd.readouterr()
    texts += [out, err] + [record.getMessage() for record in all_logs.records]
    leaks = [t for t in texts if _secret_in(t)]
    assert leaks == [], leaks
    reliability.record(load=f"malformed {variable} ({len(MALFORMED)} kinds)",
                       malformed_settings=len(MALFORMED), config_errors=len(MALFORMED),
                       places_checked=len(texts), leaks_found=len(leaks))


def test_a_header_argument_with_a_line_break_is_an_error_without_the_value(
        all_logs: pytest.LogCaptureFixture, reliability: Any) -> None:
    bad = {"line break": {"authorization": f"Bearer {SECRET}\r\nX-Injected: 1"},
           "control character": {"authorization": f"Bearer\x00{SECRET}"},
           "bad name": {"x y": f"Bearer {SECRET}"}}
    texts = []
    for case, headers in bad.items():
        with pytest.raises(ConfigError) as caught:
            ar.telemetry.configure(endpoint="https://127.0.0.1:1", headers=headers,
                                   environ={})
        assert "headers" in str(caught.value), (case, caught.value)
        texts += [str(caught.value), repr(caught.value)]
    texts += [record.getMessage() for record in all_logs.records]
    leaks = [t for t in texts if _secret_in(t)]
    assert leaks == [], leaks
    reliability.record(load="configure(headers=...) with CR/LF, NUL, a bad name",
                       bad_arguments=len(bad), config_errors=len(bad), leaks_found=len(leaks))


# ---------------------------------------------------------------------------- the compose stack

_LOOPBACK = {"127.0.0.1", "::1", "[::1]", "localhost"}
_VARIABLE = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def _substitute_defaults(value: Any) -> Any:
    """``${NAME:-default}`` as docker compose renders it with NAME unset."""
    if isinstance(value, str):
        return _VARIABLE.sub(lambda m: m.group(2) or "", value).replace("$$", "$")
    return value


def _environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): str(_substitute_defaults(v)).strip() for k, v in env.items()}


def _port_problems(name: str, spec: Any) -> list[str]:
    if isinstance(spec, Mapping):  # long syntax
        ip = str(spec.get("host_ip") or "")
        shown = json.dumps(spec)
    else:
        text = str(_substitute_defaults(spec))
        shown = repr(text)
        match = re.fullmatch(r"(?:(?P<ip>\[[0-9a-fA-F:]+\]|[0-9.]+|localhost):)?"
                             r"(?:(?P<host>[\d-]*):)?(?P<container>[\d-]+)(?:/\w+)?", text)
        if match is None:
            return [f"{name}: unreadable port spec {shown}"]
        ip = match["ip"] or ""
    if ip not in _LOOPBACK:
        return [f"{name}: port {shown} is published on {ip or 'every interface'}, "
                f"not 127.0.0.1"]
    return []


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes", "on")


def _grafana_env_problems(name: str, env: Mapping[str, str]) -> list[str]:
    problems = []
    role = env.get("GF_AUTH_ANONYMOUS_ORG_ROLE", "Viewer")
    if _truthy(env.get("GF_AUTH_ANONYMOUS_ENABLED", "false")) and role != "Viewer":
        problems.append(f"{name}: anonymous users get the {role} role")
    if _truthy(env.get("GF_AUTH_PROXY_ENABLED", "false")):
        problems.append(f"{name}: auth proxy on: anyone reaching the port picks their user")
    if _truthy(env.get("GF_USERS_ALLOW_SIGN_UP", "false")):
        problems.append(f"{name}: anyone can sign up")
    if env.get("GF_USERS_AUTO_ASSIGN_ORG_ROLE", "Viewer") == "Admin":
        problems.append(f"{name}: new users become admins")
    if not env.get("GF_SECURITY_ADMIN_PASSWORD"):
        problems.append(f"{name}: no admin password set (the default is documented)")
    return problems


def _provisioning_problems(path: str, document: Any) -> list[str]:
    """A provisioning file that turns anonymous access on (at any depth)."""
    problems = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                here = f"{where}.{key}"
                if "anonymous" in str(key).lower() and (
                        _truthy(value) or (isinstance(value, Mapping)
                                           and _truthy(value.get("enabled")))):
                    problems.append(f"{path}: {here} turns anonymous access on")
                walk(value, here)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    walk(document, "")
    return problems


def exposure_problems(compose: Mapping[str, Any],
                      provisioning: Mapping[str, Any]) -> list[str]:
    """Ways the compose stack is reachable beyond this machine, or Grafana without a login:
    ``compose`` as written, ``provisioning`` {file: parsed content}."""
    problems = []
    for name, service in (compose.get("services") or {}).items():
        if str(service.get("network_mode", "")).startswith("host"):
            problems.append(f"{name}: network_mode host puts every port on every interface")
        for spec in service.get("ports") or []:
            problems += _port_problems(name, spec)
        if "grafana" in str(service.get("image", "")):
            problems += _grafana_env_problems(name, _environment(service))
    for path, document in provisioning.items():
        problems += _provisioning_problems(path, document)
    return problems


def _provisioning_files() -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for path in sorted(GRAFANA_PROVISIONING.rglob("*")):
        if not path.is_file():
            continue
        name = str(path.relative_to(ROOT))
        if path.suffix in (".yaml", ".yml"):
            parsed[name] = yaml.safe_load(path.read_text())
        elif path.suffix == ".ini":  # (a grafana.ini dropped in: its sections as a mapping)
            ini = configparser.ConfigParser()
            ini.read_string(path.read_text())
            parsed[name] = {section: dict(ini[section]) for section in ini.sections()}
        else:
            parsed[name] = {"unreadable": path.suffix}
    return parsed


def test_the_compose_stack_listens_on_loopback_only_and_grafana_has_no_anonymous_admin(
        reliability: Any) -> None:
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    provisioning = _provisioning_files()
    services = compose["services"]
    assert "grafana" in services and provisioning, "nothing to check"
    assert all(set(doc) != {"unreadable"} for doc in provisioning.values()), provisioning
    assert exposure_problems(compose, provisioning) == []
    ports = sum(len(s.get("ports") or []) for s in services.values())
    reliability.record(load="docker-compose.yml and deploy/grafana/provisioning, as written",
                       services_checked=len(services), published_ports_on_loopback=ports,
                       provisioning_files_checked=len(provisioning), exposures_found=0)


def test_the_exposure_check_finds_each_kind_of_exposure() -> None:
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    provisioning = _provisioning_files()

    def found(change: Any, provisioning_extra: Mapping[str, Any] | None = None) -> list[str]:
        broken = json.loads(json.dumps(compose))
        change(broken["services"])
        return exposure_problems(broken, {**provisioning, **(provisioning_extra or {})})

    def grafana_env(**values: str) -> Any:
        return lambda services: services["grafana"]["environment"].update(values)

    assert found(lambda s: s["grafana"]["ports"].append("3001:3000"))
    assert found(lambda s: s["grafana"]["ports"].append("0.0.0.0:3001:3000"))
    assert found(lambda s: s["grafana"]["ports"].append("3000"))
    assert found(lambda s: s["jaeger"]["ports"].append({"target": 16686, "published": 16687}))
    assert not found(lambda s: s["jaeger"]["ports"].append(
        {"target": 16686, "published": 16687, "host_ip": "127.0.0.1"}))
    assert found(lambda s: s["prometheus"].update(network_mode="host"))
    assert found(grafana_env(GF_AUTH_ANONYMOUS_ENABLED="true", GF_AUTH_ANONYMOUS_ORG_ROLE="Admin"))
    assert not found(grafana_env(GF_AUTH_ANONYMOUS_ENABLED="true",
                                 GF_AUTH_ANONYMOUS_ORG_ROLE="Viewer"))
    assert found(grafana_env(GF_AUTH_PROXY_ENABLED="true"))
    assert found(grafana_env(GF_USERS_ALLOW_SIGN_UP="true"))
    assert found(grafana_env(GF_SECURITY_ADMIN_PASSWORD="${GRAFANA_ADMIN_PASSWORD}"))
    assert found(lambda s: None, {"grafana.ini": {"auth.anonymous": {"enabled": "true"}}})
    assert found(lambda s: None, {"x.yaml": {"apiVersion": 1, "anonymous": True}})
