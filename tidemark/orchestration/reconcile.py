"""Reconciliation: find the event dates whose current version is stale, and start the runs that heal them.

A failed DAG run is otherwise final: its notice was acknowledged, a neighbour's rerun is skipped
when its run id exists, and nothing else looks at the date again. Reconciliation compares the lake
with itself (markers, versions, obligations; no Spark, no data file read) and finds, per date:

    no_version       complete receipt partitions of the date, but no version yet
    pending_receipts complete receipt partitions of the date the current version does not include
                     (another date's receipts reach this date through that date's own run and the
                     obligation it records, so they are that date's to report)
    planned_by_older the current version records no reach (written before multi-day planning)
    obligation       a rerun owed to the date by another date's run (tidemark/orchestration/obligations.py)
    rules_changed    the session rules changed since the version (tidemark.session.rules_record; a
                     `tidemark rules migrate` reruns every date itself, this catches what it missed)

A pass looks at what can have changed since the previous pass (`staleness`, `Cursor`): the dates
stale then, those that received receipt partitions since (the receipt index's arrivals), those owed
a rerun. Its cost follows the traffic since the last pass, not the lake's age; it walks every date
when it cannot know what changed (first pass, rules changed, no stream head) and once a day.

A date is *due* once its oldest reason is older than the grace period (default 10 minutes): younger
ones are normally being handled by the notice's or the neighbour's own run. For each due date one
dedup run is started, with the run id `reconcile__<date>__<fingerprint>__<attempt>`
(tidemark/orchestration/runs.py): the fingerprint names the reasons, so reconciling again while
nothing changed finds the same run (queued, running: nothing to do); a run of that id that ended with the date still
stale for the same reasons gets the next attempt, up to `max_attempts`, then the date is reported as
given up (it needs a person: the run's logs say why).

Adapters: `tidemark reconcile [--trigger]` (Airflow REST client, the Cloud Function's) and the
tidemark_reconcile DAG (Airflow's own run lookup and TriggerDagRunOperator).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any

from tidemark.base import layout, names, times
from tidemark.base.logs import get_logger
from tidemark.base.progress import Display, tracked
from tidemark.base.times import iso_z
from tidemark.iceberg import table as iceberg
from tidemark.iceberg import table_versions
from tidemark.orchestration import obligations, runs
from tidemark.orchestration.airflow_api import AirflowClient
from tidemark.panes import planning, receipt_index, receipts
from tidemark.session import rules_record
from tidemark.session.sessions import SessionRules
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord

log = get_logger("reconcile")

DEFAULT_GRACE = timedelta(minutes=10)
DEFAULT_MAX_ATTEMPTS = 3
ACTIVE_STATES = ("queued", "running")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# rules_record.rules_in_force's answer: the rules, their source, the lake's record (if any)
InForce = tuple[SessionRules, str, "rules_record.Recorded | None"]
# The reconcile cursor's JSON object (Cursor.save writes it)
CursorRecord = dict[str, Any]


def rules_changed_since(lake: Lake, version: VersionRecord, in_force: InForce | None = None) -> str | None:
    """Why the lake's session rules differ from those `version` was computed with, or None.

    The rules are tidemark.session.rules_record's. `in_force`: rules_record.rules_in_force(lake),
    when the caller read it already.
    """
    rules, _, recorded = in_force or rules_record.rules_in_force(lake)
    if not rules_record.changed_since(version, rules):
        return None
    made_under = version.rules or {"gap": version.gap}
    return (
        f"session rules changed since the version: it was made under "
        f"{', '.join(f'{k} {v}' for k, v in made_under.items())}; the lake now records "
        f"{recorded.describe() if recorded else rules_record.describe_rules(rules)}"
    )


@dataclass
class Staleness:
    """One date's current version and why it is stale (its kinds and reasons, since when)."""

    event_date: date
    version: str | None
    kinds: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    pending_receipts: list[str] = field(default_factory=list)
    obligations: list[obligations.Obligation] = field(default_factory=list)
    since: datetime | None = None  # when the oldest reason appeared

    def add(self, kind: str, reason: str, since: datetime | None) -> None:
        """One more reason; `since` (None: always) moves the date's oldest reason back."""
        self.kinds.append(kind)
        self.reasons.append(reason)
        since = since or _EPOCH
        self.since = since if self.since is None else min(self.since, since)

    @property
    def fingerprint(self) -> str:
        """Names the reasons: the same stale state gives the same run id."""
        basis = {
            "version": self.version,
            "kinds": sorted(self.kinds),
            "receipts": sorted(self.pending_receipts),
            "obligations": sorted(f"{o['source_date']}/{o['source_version']}" for o in self.obligations),
        }
        return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:12]

    def due(self, now: datetime, grace: timedelta) -> bool:
        """Whether the oldest reason is older than the grace period."""
        return self.since is not None and self.since <= now - grace

    def to_json(self) -> dict[str, Any]:
        """The staleness as JSON (the CLI's output)."""
        out = asdict(self)
        out["event_date"] = layout.event_date_text(self.event_date)
        out["since"] = None if self.since is None else iso_z(self.since, "auto")
        out["fingerprint"] = self.fingerprint
        out["obligations"] = [f"{o['source_date']}/{o['source_version']}" for o in self.obligations]
        return out


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return times.parse_iso(text, default_utc=True)
    except ValueError:
        return None


def _receipt_time(key: str) -> datetime:
    return layout.parse_receipt_ts(key.split("/", 1)[1])


FULL_EVERY = timedelta(hours=24)


def staleness(
    lake: Lake,
    event_dates: list[date] | None = None,
    full: bool = False,
    now: datetime | None = None,
    display: Display | None = None,
) -> list[Staleness]:
    """Every event date of the lake (or of `event_dates`) with why its current version is stale.

    Dates that are up to date are left out.

    Without `event_dates` a pass looks only at what can have changed since the previous pass
    (`Cursor`): the dates that were stale then, the dates that received partitions since (the receipt
    index's arrivals), the dates owed a rerun. Every other date was up to date then and nothing that
    can make it stale has happened to it since. A pass walks every date instead (`full`, or by
    itself) when there is no previous pass, the receipt index is not complete or has no head, the
    session rules changed, or the last walk is older than FULL_EVERY (a safety net for what no
    tidemark component does: versions or markers edited by hand). The pass over the dates reports its
    progress (logs, and `display`: the CLI's terminal bar).
    """
    owed_by_date: dict[date, list[obligations.Obligation]] = {}
    for owed in obligations.pending(lake):
        owed_by_date.setdefault(layout.as_event_date(owed["event_date"]), []).append(owed)
    tbl = iceberg.load(lake)  # once: every date's current version from the same table state
    in_force = rules_record.rules_in_force(lake)
    cursor = None
    if event_dates is not None:
        dates = list(event_dates)
    else:
        cursor = Cursor.start(lake, in_force[0], now or datetime.now(timezone.utc), full)
        if cursor.full:
            dates = sorted(
                set(receipts.list_event_dates(lake))
                | {layout.as_event_date(d) for d in table_versions.dates_with_version(lake, tbl)}
                | set(owed_by_date)
            )
        else:
            dates = sorted(cursor.changed_dates() | set(owed_by_date))
    out = []
    for event_date in tracked(dates, "examining dates", log=log, display=display, lake=lake):
        current = None if tbl is None else table_versions.current_version(lake, event_date, tbl)
        item = _date_staleness(lake, event_date, current, owed_by_date.get(event_date, []), in_force)
        if item.kinds:
            out.append(item)
    if cursor is not None:
        cursor.save([item.event_date for item in out], len(dates))
    return out


def _why_walk(lake: Lake, head: str | None, previous: CursorRecord | None, described: str, now: datetime) -> str | None:
    """Why this pass must walk every date instead of looking at what changed since `previous`."""
    if not previous:
        return "no previous pass"
    if not receipt_index.is_complete(lake):
        return "the receipt index is not complete"
    if head is None or not previous.get("head"):
        return "no stream batch recorded yet"
    if previous.get("rules") != described:
        return "the session rules changed"
    if head < previous["head"]:
        return "the head went back"
    pruned_before = receipt_index.arrivals_pruned_before(lake)
    if pruned_before and pruned_before > layout.parse_receipt_ts(previous["head"]).date():
        return "arrivals since the last pass were pruned"
    walked = _time(previous.get("walked_at"))
    if walked is None or now - walked >= FULL_EVERY:
        return "the last walk is old"
    return None


def _read_cursor(lake: Lake) -> CursorRecord | None:
    return lake.reconcile_cursor().read_json()


def last_pass_head(lake: Lake) -> str | None:
    """The head the last pass started from, or None.

    The next pass reads the arrivals after it (tidemark.ops.gc keeps those).
    """
    return (_read_cursor(lake) or {}).get("head")


@dataclass
class Cursor:
    """Where the last pass stopped (<lake>/_reconcile/cursor.json).

    The receipt index's head it read before looking, the dates it found stale, the rules it judged
    by, and when it last walked every date. Each pass writes a whole new cursor: two passes at once
    leave one of two valid states.
    """

    lake: Lake
    head: str | None  # the head read at this pass's start: every partition up to it is complete
    previous: CursorRecord | None  # the last pass's cursor
    rules: str
    full: bool
    walked_at: str
    # The dates whose partition received at the head was complete when this pass listed the
    # arrivals, before it looked at any date (None: not known). A replay of the batch at the head (a
    # crash after the head, before Spark's commit) can still write partitions under the head's
    # receipt_ts; the next pass looks at the dates of those arrivals not in this list.
    at_head: list[date] | None = None

    @classmethod
    def start(cls, lake: Lake, rules: SessionRules, now: datetime, full: bool) -> Cursor:
        """This pass's cursor: the head read first, and whether the pass walks every date."""
        # The head first: partitions received up to it are complete and their arrivals written, so
        # the next pass, starting from it, misses none that completes later.
        head = receipt_index.head(lake)
        previous = _read_cursor(lake)
        described = rules_record.describe_rules(rules)
        why_full = "asked" if full else _why_walk(lake, head, previous, described, now)
        if why_full:
            log.info("reconcile walks every date", lake=lake, why=why_full)
        walked_at = iso_z(now, "auto") if why_full or previous is None else str(previous["walked_at"])
        cursor = cls(lake, head, previous, described, bool(why_full), walked_at)
        if cursor.full and head is not None:
            cursor.at_head = cursor._complete_at_head(receipt_index.arrivals(lake, head, head))
        return cursor

    def _complete_at_head(self, entries: set[tuple[str, date]]) -> list[date]:
        """The dates among `entries` (arrivals) whose partition received at this pass's head is complete."""
        at_head = [(event_date, self.head) for receipt_ts, event_date in entries if receipt_ts == self.head]
        return sorted(event_date for event_date, _ in receipts.complete_keys(self.lake, at_head))

    def changed_dates(self) -> set[date]:
        """The dates stale at the last pass and those that received partitions since.

        Those of a batch still in flight included (some of its partitions may be complete: a walk
        would see them; the next pass, starting from this pass's head, looks at them again), and
        those that received a partition under the last pass's head that it did not see complete (a
        replay of the batch at the head).
        """
        assert self.previous is not None  # only a pass that does not walk asks, and it has a cursor
        since = self.previous["head"]
        entries = receipt_index.arrivals(self.lake, since)
        listed = self.previous.get("at_head")  # absent: a cursor written before it was kept
        seen = None if listed is None else {layout.as_event_date(d) for d in listed}
        arrived = {
            event_date
            for receipt_ts, event_date in entries
            if receipt_ts > since or seen is None or event_date not in seen
        }
        self.at_head = self._complete_at_head(entries)
        log.info(
            "reconcile looks at what changed",
            lake=self.lake,
            since=self.previous["head"],
            through=self.head,
            received=len(arrived),
            stale_before=len(self.previous["stale"]),
        )
        return {layout.as_event_date(d) for d in self.previous["stale"]} | arrived

    def save(self, stale: list[date], examined: int) -> None:
        """Write this pass's cursor, when the next pass can start from it."""
        if self.head is None or not receipt_index.is_complete(self.lake):
            return  # nothing to start the next pass from: it walks every date again
        at_head = None if self.at_head is None else [layout.event_date_text(d) for d in self.at_head]
        self.lake.reconcile_cursor().write_json_atomic(
            {
                "head": self.head,
                "at_head": at_head,
                "stale": [layout.event_date_text(d) for d in sorted(stale)],
                "rules": self.rules,
                "walked_at": self.walked_at,
                "examined": examined,
                "at": times.now_iso_z(),
            },
        )


def _date_staleness(
    lake: Lake,
    event_date: date,
    current: VersionRecord | None,
    owed: list[obligations.Obligation],
    in_force: InForce,
) -> Staleness:
    item = Staleness(event_date, current.version if current else None)
    included = set(current.receipts) if current else set()
    _, pending_stamps = receipts.complete_and_pending(lake, event_date, included)
    pending = [planning.receipt_key(event_date, ts) for ts in pending_stamps]
    if current is None:
        if pending:
            item.pending_receipts = pending
            item.add(
                "no_version", f"{len(pending)} complete receipt partition(s), no version yet", _receipt_time(pending[0])
            )
    else:
        if pending:
            item.pending_receipts = pending
            item.add(
                "pending_receipts",
                f"{len(pending)} receipt partition(s) not included, oldest {pending[0].split('/', 1)[1]}",
                _receipt_time(pending[0]),
            )
        if not planning.recorded_reach(current)[0]:
            item.add(
                "planned_by_older",
                "the current version records no reach (planned by an older "
                "tidemark): its multi-day sessions may be incomplete",
                _EPOCH,
            )
    if current is not None:
        changed = rules_changed_since(lake, current, in_force)
        if changed:
            item.add("rules_changed", changed, _EPOCH)
    if owed:
        item.obligations = owed
        item.add(
            "obligation",
            "rerun owed by " + ", ".join(f"{o['source_date']} (version {o['source_version']})" for o in owed),
            min(_time(o.get("created_at")) or _EPOCH for o in owed),
        )
    return item


@dataclass
class Decision:
    """What a pass does for one stale date, and the run it starts or waits for."""

    event_date: date
    action: str  # "trigger", "in_flight", "waiting" (grace), "given_up"
    run_id: str | None
    fingerprint: str
    reasons: list[str]
    conf: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The decision as JSON (the CLI's output)."""
        return {**asdict(self), "event_date": layout.event_date_text(self.event_date)}


RunState = Callable[[str], "str | None"]  # run id -> Airflow state, or None when no such run


def decide(
    stale: list[Staleness],
    run_state: RunState | None,
    now: datetime | None = None,
    grace: timedelta = DEFAULT_GRACE,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    display: Display | None = None,
) -> list[Decision]:
    """What to do for each stale date.

    Without `run_state` (no Airflow to ask) every due date gets attempt 1's run id (creating an
    existing run is a no-op for Airflow anyway). The pass reports its progress (each stale date may
    take a few requests to Airflow).
    """
    now = now or datetime.now(timezone.utc)
    out = []
    for item in tracked(
        stale, "looking up the stale dates' runs", log=log, display=display, name=lambda s: s.event_date
    ):
        fingerprint = item.fingerprint
        if not item.due(now, grace):
            out.append(Decision(item.event_date, "waiting", None, fingerprint, item.reasons))
            continue
        action, run_id = "given_up", None
        for attempt in range(1, max_attempts + 1):
            candidate = runs.reconcile_run_id(item.event_date, fingerprint, attempt)
            state = run_state(candidate) if run_state else None
            if state is None:
                action, run_id = "trigger", candidate
                break
            if state in ACTIVE_STATES:
                action, run_id = "in_flight", candidate
                break
            # ended (success or failed) and the date is still stale for the same reasons: again
        conf = (
            {
                "event_date": layout.event_date_text(item.event_date),
                "reconcile": ",".join(sorted(set(item.kinds))),
                "fingerprint": fingerprint,
            }
            if action == "trigger"
            else None
        )
        out.append(Decision(item.event_date, action, run_id, fingerprint, item.reasons, conf))
        if action == "given_up":
            log.error(
                "reconcile gave up on a date: every attempt ended and it is still stale",
                event_date=item.event_date,
                fingerprint=fingerprint,
                attempts=max_attempts,
                reasons=item.reasons,
            )
    return out


def reconcile(
    lake: Lake,
    client: AirflowClient | None = None,
    dag_id: str | None = None,
    trigger: bool = False,
    now: datetime | None = None,
    grace: timedelta = DEFAULT_GRACE,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    full: bool = False,
    display: Display | None = None,
) -> tuple[list[Staleness], list[Decision]]:
    """Find stale dates and, with `trigger`, start their runs through the Airflow REST client.

    The client is tidemark.orchestration.airflow_api.AirflowClient. Both passes report their
    progress (logs, and `display`: the CLI's terminal bar).

    Raises:
        ValueError: `trigger` without a client.
    """
    dag_id = dag_id or names.get("DAG_ID")
    if trigger and client is None:
        raise ValueError("triggering runs needs an Airflow client")
    stale = staleness(lake, full=full, now=now, display=display)
    run_state = None
    if client is not None:

        def run_state(run_id: str) -> str | None:
            run = client.get_dag_run(dag_id, run_id)
            return None if run is None else run.get("state")

    decisions = decide(stale, run_state, now=now, grace=grace, max_attempts=max_attempts, display=display)
    starting = [d for d in decisions if d.action == "trigger"] if trigger else []
    for decision in tracked(starting, "starting runs", log=log, display=display, name=lambda d: d.event_date):
        assert client is not None  # triggering without a client was refused above
        # a "trigger" decision names its run and conf
        assert decision.run_id is not None
        assert decision.conf is not None
        result = client.trigger_dag_run(
            dag_id, decision.run_id, decision.conf, note="tidemark reconcile: " + "; ".join(decision.reasons)
        )
        log.info(
            "reconcile started a run" if result.created else "reconcile run already exists",
            event_date=decision.event_date,
            run_id=decision.run_id,
            reasons=decision.reasons,
        )
    for decision in decisions:
        if decision.action != "trigger":
            log.info(
                "reconcile: stale date not triggered",
                event_date=decision.event_date,
                action=decision.action,
                run_id=decision.run_id,
                reasons=decision.reasons,
            )
    return stale, decisions
