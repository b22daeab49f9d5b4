"""The SLOs, what the lake says about them, and `tidemark health`'s verdict.

    objectives = Objectives()                         # defaults below, or from the CLI's options
    observer = LakeObserver(lake, refresh=60)         # cached reading of the lake (bounded cadence)
    reading = observer.reading()                      # staleness per date, notices owed, given up
    breaches(reading, objectives)                     # [] when every SLO holds

The SLOs (docs/metrics.md says the same, with the alert that watches each one):

    correction   late data corrected within `correction` (default 20 min): no event date's oldest
                 stale reason (a complete receipt partition its version lacks, an owed rerun, ...)
                 is older. A receipt partition is written at most the allowed lateness after its
                 events' time, so this also bounds a date's staleness by allowed lateness + the
                 objective. Default: the freshness bench's p95 from landing to corrected partition
                 was 235-363 s under load (BENCHMARKS.md, section 2); reconciliation's grace is
                 10 min and a cold dedup takes up to about 8: 20 min leaves that margin.
    notice_owed  no notice (availability or corrected) owed longer than `notice_owed` (10 min; the
                 bench's landed -> notice published p95 was 124 s under load).
    given_up     no event date that reconciliation gave up on (needs the Airflow run states).
    stream_lag   a batch committed within `stream_lag` (5 min) of its trigger: alerted by
                 Prometheus from the stream's own histogram (ops/prometheus/rules.yml); `tidemark
                 health` reads the lake only and cannot see it.

Why a cached, bounded reading: a lake holds up to millions of receipt partitions, and a
reconcile.staleness pass can walk every date (a first pass, and whenever it cannot know what
changed). A scrape must never do that: the observer makes a pass at most once per `refresh`
seconds, in a background thread when started as one, and a scrape reads the last result.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any

from tidemark.base import layout
from tidemark.base.logs import get_logger
from tidemark.base.times import parse_iso
from tidemark.notices import corrected_delivery
from tidemark.notices.outbox import Outbox
from tidemark.orchestration import reconcile
from tidemark.orchestration.reconcile import RunState
from tidemark.store.lake import Lake

log = get_logger("health")


@dataclass(frozen=True)
class Objectives:
    """The SLOs' objectives (the module's docstring says what each one bounds)."""

    correction: timedelta = timedelta(minutes=20)
    notice_owed: timedelta = timedelta(minutes=10)
    stream_lag: timedelta = timedelta(minutes=5)
    given_up: int = 0  # dates reconciliation gave up on, at most

    def seconds(self) -> dict[str, float]:
        """The duration objectives in seconds by SLO name (what the exporter exports)."""
        return {
            "correction": self.correction.total_seconds(),
            "notice_owed": self.notice_owed.total_seconds(),
            "stream_lag": self.stream_lag.total_seconds(),
        }


@dataclass
class StaleDate:
    """One stale event date: the age of its oldest stale reason, and what the reasons are."""

    event_date: date
    age_s: float
    kinds: list[str]
    reasons: list[str]


@dataclass
class Reading:
    """One reading of the lake: what the SLOs are judged on."""

    at: float  # Unix time of the reading
    stale: list[StaleDate] = field(default_factory=list)
    owed: dict[str, tuple[int, float]] = field(default_factory=dict)  # channel -> (count, oldest age s)
    given_up: list[date] | None = None  # None: no Airflow to ask
    seconds: float = 0.0  # what reading the lake took

    def to_json(self) -> dict[str, Any]:
        """The reading as a JSON object (`tidemark health --json`; dates as YYYY-MM-DD)."""
        out = asdict(self)
        for item in out["stale"]:
            item["event_date"] = layout.event_date_text(item["event_date"])
        if self.given_up is not None:
            out["given_up"] = [layout.event_date_text(d) for d in self.given_up]
        return out


def read_lake(
    lake: Lake, run_state: RunState | None = None, now: datetime | None = None, max_attempts: int | None = None
) -> Reading:
    """One reading of the lake.

    Holds reconcile.staleness (per date, the oldest reason's time), the notices owed per channel
    and, with `run_state` (reconcile's run id -> Airflow state), the dates reconciliation gave up on.
    """
    began = time.monotonic()
    now = now or datetime.now(timezone.utc)
    stale = reconcile.staleness(lake)
    dates = [
        StaleDate(
            s.event_date, max(0.0, (now - s.since).total_seconds()) if s.since else 0.0, list(s.kinds), list(s.reasons)
        )
        for s in stale
    ]
    owed: dict[str, tuple[int, float]] = {}
    for channel, outbox in (("availability", Outbox(lake)), ("corrected", corrected_delivery.outbox(lake))):
        entries = outbox.owed()  # oldest first; bounded by what is owed, not by the lake's size
        oldest = 0.0
        if entries and entries[0].get("recorded_at"):
            oldest = max(0.0, (now - parse_iso(entries[0]["recorded_at"], default_utc=True)).total_seconds())
        owed[channel] = (len(entries), oldest)
    given_up = None
    if run_state is not None:
        try:
            decisions = reconcile.decide(
                stale, run_state, now=now, max_attempts=max_attempts or reconcile.DEFAULT_MAX_ATTEMPTS
            )
            given_up = sorted(d.event_date for d in decisions if d.action == "given_up")
        except Exception as exc:  # noqa: BLE001 - Airflow down: unknown, not zero (the gauge is absent)
            log.warning("cannot ask Airflow for reconcile's runs", error=f"{type(exc).__name__}: {exc}")
    return Reading(now.timestamp(), dates, owed, given_up, round(time.monotonic() - began, 3))


class LakeObserver:
    """The last reading of a lake, recomputed at most every `refresh` seconds."""

    def __init__(
        self, lake: Lake, refresh: float = 60.0, run_state: RunState | None = None, max_attempts: int | None = None
    ):
        """Observe `lake`; `run_state` and `max_attempts` as read_lake takes them."""
        self.lake = lake
        self.max_attempts = max_attempts
        self.refresh = refresh
        self.run_state = run_state
        self._reading: Reading | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh_now(self) -> Reading:
        """Read the lake now and keep the reading; a failed reading is logged and raised."""
        try:
            reading = read_lake(self.lake, self.run_state, max_attempts=self.max_attempts)
        except Exception as exc:  # noqa: BLE001 - an unreadable lake keeps the last reading; logged
            log.error("lake reading failed", lake=self.lake, error=f"{type(exc).__name__}: {exc}")
            raise
        with self._lock:
            self._reading = reading
        log.info(
            "lake read",
            lake=self.lake,
            stale_dates=len(reading.stale),
            seconds=reading.seconds,
            owed={k: v[0] for k, v in reading.owed.items()},
            given_up=None if reading.given_up is None else len(reading.given_up),
        )
        return reading

    def reading(self) -> Reading | None:
        """The last reading; None before the first one finished."""
        with self._lock:
            return self._reading

    def start(self) -> LakeObserver:
        """Read the lake every `refresh` seconds in a background thread until stop()."""

        def loop() -> None:
            while not self._stop.is_set():
                # A failed reading is logged in refresh_now; the next round tries again.
                with contextlib.suppress(Exception):
                    self.refresh_now()
                self._stop.wait(self.refresh)

        self._thread = threading.Thread(target=loop, name="tidemark-lake-observer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the background thread (waits up to 30 s for a reading under way)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)


@dataclass
class Breach:
    """One SLO broken, and what breaks it."""

    slo: str
    detail: str


def breaches(reading: Reading, objectives: Objectives) -> list[Breach]:
    """The SLOs the reading breaks, each with what breaks it (the worst dates first)."""
    out = []
    limit = objectives.correction.total_seconds()
    late = sorted((d for d in reading.stale if d.age_s > limit), key=lambda d: -d.age_s)
    if late:
        out.append(
            Breach(
                "correction",
                f"{len(late)} event date(s) stale longer than "
                f"{_minutes(limit)}: "
                + "; ".join(f"{d.event_date} for {_minutes(d.age_s)} ({', '.join(d.kinds)})" for d in late[:10]),
            )
        )
    limit = objectives.notice_owed.total_seconds()
    for channel, (count, age) in sorted(reading.owed.items()):
        if count and age > limit:
            out.append(
                Breach(
                    "notice_owed",
                    f"{count} {channel} notice(s) owed, the oldest for {_minutes(age)} (objective {_minutes(limit)})",
                )
            )
    if reading.given_up is not None and len(reading.given_up) > objectives.given_up:
        out.append(
            Breach(
                "given_up",
                f"reconciliation gave up on {len(reading.given_up)} event date(s): "
                + ", ".join(layout.event_date_text(d) for d in reading.given_up[:20]),
            )
        )
    return out


def _minutes(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
