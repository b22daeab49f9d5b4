"""The lake's gauges for Prometheus: `tidemark exporter --lake L --port P` serves them on /metrics.

    exporter = LakeExporter(lake, objectives, refresh=60).start(port)   # observer thread + HTTP
    exporter.stop()

What the gauges say comes from tidemark.ops.health.LakeObserver: one cached reading of the lake,
recomputed at most every `refresh` seconds (never per scrape: a reconcile.staleness pass may walk
every date, and a lake may hold millions of receipt partitions). The SLO objectives are exported too
(tidemark_slo_objective_seconds{tidemark_slo=...}), so that the alert rules in
ops/prometheus/rules.yml compare with the thresholds this exporter was given instead of repeating
them: one place to change an objective.
"""

from __future__ import annotations

from collections.abc import Callable

from tidemark.base import layout
from tidemark.ops import metrics
from tidemark.ops.health import LakeObserver, Objectives
from tidemark.ops.metrics import Observations
from tidemark.orchestration.reconcile import RunState
from tidemark.store.lake import Lake


class LakeExporter:
    """The lake's gauges and the SLO objectives, served for Prometheus from one cached reading."""

    def __init__(
        self,
        lake: Lake,
        objectives: Objectives | None = None,
        refresh: float = 60.0,
        run_state: RunState | None = None,
        max_attempts: int | None = None,
    ):
        """Export `lake`'s gauges, read at most every `refresh` seconds (LakeObserver's arguments)."""
        self.lake = lake
        self.objectives = objectives or Objectives()
        self.observer = LakeObserver(lake, refresh, run_state, max_attempts)

    def register(self) -> None:
        """The observable gauges; each callback reads the observer's cached reading only."""
        read = self.observer.reading

        def staleness() -> Observations:
            reading = read()
            return (
                []
                if reading is None
                else [(d.age_s, {"tidemark.event_date": layout.event_date_text(d.event_date)}) for d in reading.stale]
            )

        def stale_dates() -> Observations:
            reading = read()
            return [] if reading is None else [(len(reading.stale), {})]

        def given_up() -> Observations:
            reading = read()
            return [] if reading is None or reading.given_up is None else [(len(reading.given_up), {})]

        def owed(index: int) -> Callable[[], Observations]:
            def values() -> Observations:
                reading = read()
                return (
                    []
                    if reading is None
                    else [
                        (v[index], {"tidemark.notice.channel": channel}) for channel, v in sorted(reading.owed.items())
                    ]
                )

            return values

        def observed() -> Observations:
            reading = read()
            return [] if reading is None else [(reading.at, {})]

        metrics.observe("tidemark.event_date.staleness", staleness)
        metrics.observe("tidemark.event_date.stale", stale_dates)
        metrics.observe("tidemark.reconcile.given_up", given_up)
        metrics.observe("tidemark.notice.owed", owed(0))
        metrics.observe("tidemark.notice.owed.age", owed(1))
        metrics.observe("tidemark.lake.observed", observed)
        metrics.observe(
            "tidemark.slo.objective", lambda: [(v, {"tidemark.slo": k}) for k, v in self.objectives.seconds().items()]
        )

    def start(self, port: int, host: str = "127.0.0.1") -> LakeExporter:
        """Register the gauges, start the observer's thread and serve /metrics on host:port."""
        metrics.configure(prometheus=True, service="tidemark-exporter")
        self.register()
        self.observer.start()
        metrics.serve_prometheus(port, host)
        return self

    def stop(self) -> None:
        """Stop the observer and the metrics server."""
        self.observer.stop()
        metrics.shutdown()
