"""A real Prometheus server for the local stack and the tests: Debian's `prometheus` binary.

    server = PrometheusServer(home, targets={"tidemark-exporter": ["127.0.0.1:9464"]}).start()
    server.url                         # http://127.0.0.1:<port> (the UI: alerts, graphs)
    server.alerts()                    # [{labels, state, ...}] from /api/v1/alerts
    server.query("tidemark_event_date_stale")
    server.stop()

It scrapes the given targets (job name -> host:port list) every `scrape_interval` and evaluates
ops/prometheus/rules.yml every `evaluation_interval`; the TSDB lives under `home`. Bound to
127.0.0.1 on a port chosen by the caller (a free one by default), started in its own process group
and stopped by group like every other server here (tidemark/devstack/process.py). Healthy =
/-/ready answers 200. `apt-get install prometheus` provides it (scripts/setup.sh says so when it is
missing; tests that need it skip without it).
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import requests

from tidemark.devstack import process

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = os.path.join(REPO, "ops", "prometheus", "rules.yml")
START_TIMEOUT_S = 60.0


def binary() -> str | None:
    """The prometheus binary on the PATH, or None."""
    return shutil.which("prometheus")


class PrometheusServer:
    """A Prometheus server on 127.0.0.1 scraping `targets` and evaluating the SLO rules."""

    def __init__(
        self,
        home: str,
        port: int | None = None,
        targets: dict[str, list[str]] | None = None,
        rules: str = RULES,
        scrape_interval: str = "15s",
        evaluation_interval: str = "15s",
    ):
        """A server on `port` (a free one by default), its config and TSDB under `home`."""
        self.home = os.path.abspath(home)
        self.port = port or process.free_port()
        self.targets = dict(targets or {})
        self.rules = os.path.abspath(rules)
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path = os.path.join(self.home, "prometheus.yml")
        self.log_path = os.path.join(self.home, "prometheus.log")
        self.managed: process.Managed | None = None

    def config(self) -> dict[str, Any]:
        """prometheus.yml (JSON is YAML): one job per target group, the SLO rules."""
        return {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.evaluation_interval},
            "rule_files": [self.rules],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": list(hosts)}]}
                for job, hosts in sorted(self.targets.items())
            ],
        }

    def write_config(self) -> str:
        """Write prometheus.yml under `home`; returns its path."""
        os.makedirs(self.home, exist_ok=True)
        with open(self.config_path, "w") as handle:
            json.dump(self.config(), handle, indent=1)
        return self.config_path

    def argv(self) -> list[str]:
        """The server's command line (RuntimeError without a prometheus binary)."""
        found = binary()
        if found is None:
            raise RuntimeError("no prometheus binary: apt-get install prometheus")
        return [
            found,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={os.path.join(self.home, 'data')}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            # The Debian package's default console paths do not exist in every install.
            "--web.enable-lifecycle",
            "--log.format=json",
        ]

    def start(self, timeout: float = START_TIMEOUT_S) -> PrometheusServer:
        """Start the server and wait until it is ready (stopped again on failure)."""
        self.write_config()
        if process.port_open(self.port):
            raise RuntimeError(f"port {self.port} is already in use; not starting Prometheus there")
        self.managed = process.start("prometheus", self.argv(), self.log_path, cwd=self.home, url=self.url)
        try:
            process.wait_until(self.healthy, timeout, "Prometheus", self.managed, interval=0.25)
        except BaseException:
            self.stop()
            raise
        return self

    def healthy(self) -> bool:
        """Whether /-/ready answers 200."""
        return requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200

    def stop(self) -> None:
        """Stop the server's process group."""
        if self.managed is not None:
            process.stop(self.managed)
            self.managed = None

    # ---- the HTTP API ---------------------------------------------------------------------------

    def _get(self, path: str, **params: str) -> dict[str, Any]:
        response = requests.get(f"{self.url}{path}", params=params, timeout=10)
        response.raise_for_status()
        data: dict[str, Any] = response.json()["data"]  # the API's JSON envelope: {"status", "data"}
        return data

    def alerts(self) -> list[dict[str, Any]]:
        """Alerts pending or firing now (each with labels, annotations, state, value)."""
        alerts: list[dict[str, Any]] = self._get("/api/v1/alerts")["alerts"]
        return alerts

    def firing(self, alertname: str | None = None) -> list[dict[str, Any]]:
        """Alerts firing now, those named `alertname` when given."""
        return [
            a
            for a in self.alerts()
            if a["state"] == "firing" and (alertname is None or a["labels"].get("alertname") == alertname)
        ]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result: one {metric, value} per series."""
        result: list[dict[str, Any]] = self._get("/api/v1/query", query=expr)["result"]
        return result

    def targets_health(self) -> dict[str, str]:
        """Each job's health: that of its first active target ("up", "down", "unknown")."""
        return {t["labels"]["job"]: t["health"] for t in self._get("/api/v1/targets")["activeTargets"]}

    def __enter__(self) -> PrometheusServer:
        """Start the server."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the server."""
        self.stop()
