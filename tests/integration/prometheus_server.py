"""A real Prometheus server for integration tests, scraping loopback targets every second.

Runs the ``prometheus`` binary (Debian package ``prometheus``, which also ships ``promtool``)
with a generated minimal configuration: one static scrape job, no alerting, no rules, no
remote read or write, no service discovery — nothing that reaches beyond loopback. Storage is
a fresh directory per server, the web listener a free loopback port.

Prometheus 2.x hands targets from service discovery to the scrape manager at most every 5 s,
so the first scrape comes about 5 s after start, whatever the scrape interval; later ones
follow the interval (1 s here).

    server = PrometheusServer(["127.0.0.1:9464"], workdir=tmp_path)
    server.start()                       # waits for /-/ready
    server.wait_for_value("sum(up)", 1)  # PromQL instant queries through /api/v1/query
    server.stop()                        # terminate, wait, kill as a last resort
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["PrometheusServer", "find_binary", "free_loopback_port"]

_LOOPBACK = "127.0.0.1"


def find_binary(name: str) -> str | None:
    """``name`` on PATH, else in /usr/bin (where the Debian package puts it), else None."""
    found = shutil.which(name)
    if found is None and os.access(f"/usr/bin/{name}", os.X_OK):
        found = f"/usr/bin/{name}"
    return found


def free_loopback_port() -> int:
    """A loopback TCP port free right now (the OS picks it; a tiny race remains)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_LOOPBACK, 0))
        return sock.getsockname()[1]


class PrometheusServer:
    """One Prometheus process scraping ``targets`` (``host:port``, path ``/metrics``)."""

    def __init__(self, targets: Sequence[str], *, workdir: str | os.PathLike[str],
                 scrape_interval_s: int = 1, job: str = "adaptive_runtime",
                 binary: str | None = None, features: Sequence[str] = ()) -> None:
        if not targets:
            raise ValueError("targets must name at least one host:port to scrape")
        if isinstance(scrape_interval_s, bool) or not isinstance(scrape_interval_s, int) \
                or scrape_interval_s < 1:
            raise ValueError(f"scrape_interval_s must be an int >= 1, got {scrape_interval_s!r}")
        self.targets = list(targets)
        self.features = list(features)  # --enable-feature= each (exemplar-storage, say)
        self.job = job
        self.scrape_interval_s = scrape_interval_s
        self.binary = binary or find_binary("prometheus")
        if self.binary is None:
            raise FileNotFoundError("prometheus binary not found (apt-get install prometheus)")
        self.workdir = Path(workdir)
        self.config_path = self.workdir / "prometheus.yml"
        self.storage_path = self.workdir / "data"
        self.log_path = self.workdir / "prometheus.log"
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    @property
    def url(self) -> str:
        return f"http://{_LOOPBACK}:{self.port}"

    def write_config(self) -> Path:
        """Write the scrape configuration and return its path (JSON is valid YAML)."""
        interval = f"{self.scrape_interval_s}s"
        config = {
            "global": {"scrape_interval": interval, "scrape_timeout": interval,
                       "evaluation_interval": interval},
            "scrape_configs": [{
                "job_name": self.job,
                "metrics_path": "/metrics",
                "scheme": "http",
                "static_configs": [{"targets": self.targets}],
            }],
        }
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(json.dumps(config, indent=2) + "\n")
        return self.config_path

    def check_config(self) -> subprocess.CompletedProcess[str]:
        """``promtool check config`` on the written configuration (not raising)."""
        promtool = find_binary("promtool")
        if promtool is None:
            raise FileNotFoundError("promtool not found (it comes with the prometheus package)")
        return subprocess.run([promtool, "check", "config", str(self.config_path)],
                              capture_output=True, text=True, timeout=30, check=False)

    def start(self, timeout_s: float = 30.0) -> PrometheusServer:
        """Start Prometheus and wait until it answers ``/-/ready``."""
        if self._process is not None:
            raise RuntimeError("this Prometheus server is already started")
        if not self.config_path.exists():
            self.write_config()
        self.port = free_loopback_port()
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop())
        self._process = subprocess.Popen(
            [self.binary,
             f"--config.file={self.config_path}",
             f"--storage.tsdb.path={self.storage_path}",
             f"--web.listen-address={_LOOPBACK}:{self.port}",
             "--storage.tsdb.retention.time=1h",
             "--log.level=warn",
             *(f"--enable-feature={feature}" for feature in self.features)],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            cwd=self.workdir)
        deadline = time.monotonic() + timeout_s
        while True:
            if self._process.poll() is not None:
                log = self.log_tail()
                self.stop()
                raise RuntimeError(f"prometheus exited with {self._process.returncode} while "
                                   f"starting; its log:\n{log}")
            # (503 until the TSDB is loaded: urlopen raises HTTPError, an OSError)
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(self.url + "/-/ready", timeout=2) as response:
                if response.status == 200:
                    return self
            if time.monotonic() > deadline:
                log = self.log_tail()
                self.stop()
                raise TimeoutError(f"prometheus was not ready after {timeout_s:g} s; its log:\n"
                                   f"{log}")
            time.sleep(0.1)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the process (SIGTERM, then SIGKILL if it does not exit); idempotent."""
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout_s)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> PrometheusServer:
        return self.start() if self._process is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    # ---------------------------------------------------------------- the HTTP API

    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data`` (AssertionError if not success)."""
        query = urllib.parse.urlencode(params)
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{url}: HTTP {exc.code}: {exc.read()[:500]!r}") from exc
        if body.get("status") != "success":
            raise AssertionError(f"{url}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant PromQL query: the result vector, each ``{"metric": {...}, "value":
        [ts, "v"]}``."""
        data = self.api("query", query=expr)
        if data["resultType"] != "vector":
            raise AssertionError(f"{expr!r} is a {data['resultType']}, not a vector")
        return data["result"]

    def value(self, expr: str) -> float | None:
        """The single value of ``expr`` (a scalar-like vector), or None if it has none."""
        result = self.query(expr)
        if not result:
            return None
        if len(result) != 1:
            raise AssertionError(f"{expr!r} returned {len(result)} series: {result}")
        return float(result[0]["value"][1])

    def wait_for(self, expr: str, predicate: Callable[[list[dict[str, Any]]], bool],
                 timeout_s: float = 20.0) -> list[dict[str, Any]]:
        """Poll ``expr`` until ``predicate(result)``; AssertionError with the last result and
        the scrape targets' health on timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(expr)
            if predicate(result):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout_s:g} s waiting on {expr!r}; last result: "
                    f"{result}; targets: {self.target_health()}")
            time.sleep(0.2)

    def wait_for_value(self, expr: str, expected: float, timeout_s: float = 20.0) -> float:
        """Poll until ``expr`` has the single value ``expected``; return it."""

        def matches(result: list[dict[str, Any]]) -> bool:
            return len(result) == 1 and math.isclose(float(result[0]["value"][1]), expected)

        return float(self.wait_for(expr, matches, timeout_s)[0]["value"][1])

    def target_health(self) -> list[dict[str, Any]]:
        """Each active target's ``scrapeUrl``, ``health`` and ``lastError``."""
        return [{k: t.get(k) for k in ("scrapeUrl", "health", "lastError", "lastScrape")}
                for t in self.api("targets")["activeTargets"]]
