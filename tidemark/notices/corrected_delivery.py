"""Corrected notices: recorded, sent to Pub/Sub and emitted to Airflow.

Recorded in the lake's outbox when a version is published, sent to the corrected topic with retries,
drained after an outage.

    record_after_commit(lake, version)    right after a dedup run's commit (tidemark.deduplication.dedup), in the
                                          process that committed (spark-submit driver, Spark Connect
                                          client, `tidemark dedup`, a rules migration)
    record_current(lake, event_date)      the safety net the DAG runs after the dedup: a crash
                                          between the commit and the hook loses nothing
    send_owed(lake, topic, timeout)    send every owed corrected notice (any date), retrying
    emit_owed(lake, client, timeout)   the same entries as Airflow asset events (asset
                                       tidemark.sessions_dedup, partition_key = the date):
                                       tidemark/notices/asset_events.py

    <lake>/_notices/corrected/outbox/<notice_id>.json        owed (to Pub/Sub, to Airflow, or both)
    <lake>/_notices/corrected/sent/<notice_id>.json          acknowledged by Pub/Sub (message_id, published_at)
    <lake>/_notices/corrected/asset_events/<notice_id>.json  acknowledged by Airflow (event id, timestamp)

The notice_id is a hash of (dataset, event_date, version): recording a version again (a retried
commit, the safety net, a rerun that finds the version already current) finds it known and writes
nothing, so each published version has exactly one entry and one notice.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import date
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table

from tidemark.base import names
from tidemark.base.durations import parse_duration
from tidemark.base.logs import get_logger
from tidemark.iceberg import changes, table_versions
from tidemark.iceberg import table as iceberg
from tidemark.notices import corrected_notice
from tidemark.notices.asset_events import AssetEventSender
from tidemark.notices.drain import drain
from tidemark.notices.outbox import Outbox
from tidemark.notices.sender import Sender, sender_for
from tidemark.orchestration.airflow_api import AirflowClient, AirflowRejected, NotConfigured
from tidemark.store.lake import Lake
from tidemark.store.version_record import Commit, VersionRecord

log = get_logger("notices")

CHANNEL = "corrected"
# A session's id is a hash of (user, start); events are only ever added, so with the same start a
# changed session has another end or another count (the event lists are not read: cheaper).
_DIFF_COLUMNS = ("session_id", "session_end", "event_count")


def outbox(lake: Lake) -> Outbox:
    """The corrected notices' outbox, owed to Pub/Sub and to Airflow."""
    return Outbox(lake, corrected_notice, CHANNEL, sinks=("pubsub", "airflow"))


def configured_topic() -> str | None:
    """Where the DAG sends corrected notices, or None.

    $TIDEMARK_CORRECTED_TOPIC_PATH (projects/P/topics/<names CORRECTED_TOPIC>), or None: then
    notices are recorded and stay owed.
    """
    return os.environ.get("TIDEMARK_CORRECTED_TOPIC_PATH") or None


def default_topic(project: str | None = None) -> str:
    """The corrected topic's path in `project` (default: the configured project)."""
    return names.topic_path(project or names.get("PROJECT"), names.get("CORRECTED_TOPIC"))


def _sessions_at(tbl: Table, event_date: date, snapshot_id: int) -> pa.Table:
    """The date's sessions (_DIFF_COLUMNS) at a snapshot, as an Arrow table of _diff_schema(tbl).

    pyiceberg gives a snapshot without data files the table schema's Arrow types (large_string)
    and one with files the files' own (Spark writes string): one schema for every version, so
    that two versions always join, whatever either held.
    """
    found = tbl.scan(
        row_filter=iceberg.date_filter(event_date), selected_fields=_DIFF_COLUMNS, snapshot_id=snapshot_id
    ).to_arrow()
    return found.select(list(_DIFF_COLUMNS)).cast(_diff_schema(tbl))


def _diff_schema(tbl: Table) -> pa.Schema:
    """_DIFF_COLUMNS with the table schema's Arrow types, without field metadata."""
    arrow = tbl.schema().as_arrow()
    return pa.schema([pa.field(name, arrow.field(name).type) for name in _DIFF_COLUMNS])


def session_changes(old: pa.Table, new: pa.Table) -> dict[str, int]:
    """Counts of sessions added, removed, changed, unchanged between two versions of a date.

    `old` and `new` are Arrow tables of _DIFF_COLUMNS (session_id unique in each). Compared with Arrow's
    vectorised join and kernels: a date holds up to millions of sessions, and a Python dict per row took
    ~10 s per million, inside the dedup's run (recorded right after its commit).
    """
    old = old.select(list(_DIFF_COLUMNS))
    new = new.select(list(_DIFF_COLUMNS))
    if old.schema != new.schema:  # Arrow joins only equal key types (string vs large_string)
        old = old.cast(new.schema)
    both = new.join(old, keys="session_id", join_type="inner", left_suffix="_new", right_suffix="_old")
    same = pc.and_kleene(
        pc.equal(both["session_end_new"], both["session_end_old"]),
        pc.equal(both["event_count_new"], both["event_count_old"]),
    )
    unchanged = int(pc.sum(pc.fill_null(same, pa.scalar(False)).cast("int64")).as_py() or 0)
    common = both.num_rows
    return {
        "sessions_added": new.num_rows - common,
        "sessions_removed": old.num_rows - common,
        "sessions_changed": common - unchanged,
        "sessions_unchanged": unchanged,
    }


def _snapshot_of(tbl: Table, event_date: date, key: str, value: str) -> int | None:
    found = [s.snapshot_id for s, props in table_versions.snapshot_versions(tbl, event_date) if props.get(key) == value]
    return found[-1] if found else None


def build_for(lake: Lake, tbl: Table, version: VersionRecord) -> dict[str, Any]:
    """The corrected notice of a published version (table_versions.current_version's record)."""
    event_date = version.event_date
    committed = _committed(version)
    snapshot_id = _snapshot_of(tbl, event_date, "tidemark.run-id", version.run_id)
    if snapshot_id is None:  # its snapshot was expired by gc; still current, so the current one holds it
        current = tbl.current_snapshot()
        if current is None:
            raise ValueError(f"version {committed.version} of {event_date}: the table has no snapshot")
        snapshot_id = current.snapshot_id
    previous = committed.previous_version
    where = changes.ensure(lake, version)  # appended by now, unless the run staged no changeset
    counts: dict[str, int] | None
    if where is not None:
        counts, rows = counts_of(where.counts, version.sessions), version.sessions
    else:
        counts, rows = _counts_from_versions(tbl, event_date, snapshot_id, previous)
    return corrected_notice.build(
        names.get("DATASET"),
        event_date,
        committed.version,
        previous,
        corrected_notice.change_of(previous, counts),
        rows=rows,
        table={
            "identifier": iceberg.identifier(),
            "location": iceberg.table_location(lake),
            "snapshot_id": int(snapshot_id),
        },
        path=iceberg.file_uri(lake.run_dir(event_date, version.run_id)),
        affected_dates=[day for day in version.affected_dates if day != event_date],
        committed_at=committed.committed_at,
        changes=None
        if where is None
        else {
            "identifier": changes.identifier(),
            "location": changes.location(lake),
            "snapshot_id": where.snapshot_id,
            "parent_snapshot_id": where.parent_snapshot_id,
            **where.counts.to_json(),
        },
    )


def counts_of(found: changes.Counts, sessions: int) -> dict[str, int]:
    """The notice's counts from a version's changeset and its number of sessions."""
    return {
        "sessions_added": found.inserted,
        "sessions_removed": found.deleted,
        "sessions_changed": found.updated,
        "sessions_unchanged": sessions - found.inserted - found.updated,
    }


def _counts_from_versions(
    tbl: Table, event_date: date, snapshot_id: int, previous: str | None
) -> tuple[dict[str, int] | None, int]:
    """(counts, rows) of a version that staged no changeset.

    An older tidemark's run: its sessions are compared with the previous version's, both read
    whole.
    """
    new = _sessions_at(tbl, event_date, snapshot_id)
    if previous is None:
        return session_changes(new.schema.empty_table(), new), new.num_rows
    previous_snapshot = _snapshot_of(tbl, event_date, "tidemark.version", previous)
    if previous_snapshot is None:
        return None, new.num_rows
    return session_changes(_sessions_at(tbl, event_date, previous_snapshot), new), new.num_rows


def _committed(version: VersionRecord) -> Commit:
    if version.commit is None:
        raise ValueError(f"run {version.run_id} of {version.event_date} is not committed: no corrected notice")
    return version.commit


def record(lake: Lake, version: VersionRecord, tbl: Table | None = None) -> dict[str, Any] | None:
    """Record the notice of a published version unless known; returns the body recorded, or None."""
    box = outbox(lake)
    notice_id = corrected_notice.notice_id(names.get("DATASET"), version.event_date, _committed(version).version)
    if box.is_known(notice_id):
        log.info(
            "corrected notice already recorded",
            event_date=version.event_date,
            version=version.version,
            notice_id=notice_id,
        )
        return None
    body = build_for(lake, tbl if tbl is not None else iceberg.load_existing(lake), version)
    return body if box.record(body) else None


def record_current(lake: Lake, event_date: date) -> dict[str, Any] | None:
    """Record the notice of the date's current version (if any, and unless known)."""
    tbl = iceberg.load(lake)
    current = None if tbl is None else table_versions.current_version(lake, event_date, tbl)
    if current is None:
        return None
    return record(lake, current, tbl)


def record_after_commit(lake: Lake, version: VersionRecord) -> None:
    """Record the notice of a version the dedup just committed; never fails the run.

    A notice that cannot be recorded now is recorded by the DAG's safety net (record_current) or
    the next run of the date.
    """
    try:
        record(lake, version)
    except Exception:  # noqa: BLE001 - the version is committed; the notice is recorded later
        log.exception(
            "corrected notice not recorded after the commit (the DAG's notify task records it)",
            event_date=version.event_date,
            version=version.version,
        )


def send_owed(
    lake: Lake, topic_path: str, timeout: float = 120.0, sender: Sender | None = None, backoff_max: float = 15.0
) -> int:
    """Send every owed corrected notice to `topic_path`; returns how many are still owed.

    Retries while Pub/Sub is unreachable, for at most `timeout` seconds; `sender` replaces the
    Pub/Sub sender (tests), and is then left open.
    """
    own = sender is None
    sender = sender or sender_for(topic_path, codec=corrected_notice)
    try:
        return drain(outbox(lake), sender, timeout=timeout, backoff_max=backoff_max)
    finally:
        if own:
            sender.close()


def emit_owed(lake: Lake, client: AirflowClient, timeout: float = 120.0, backoff_max: float = 15.0) -> int:
    """Emit every corrected notice owed to Airflow as an asset event; returns how many stay owed.

    Posts through `client` (tidemark.orchestration.airflow_api.AirflowClient), retrying while
    Airflow is unreachable, for at most `timeout` seconds. A refusal (AirflowRejected: a 4xx
    that retrying cannot fix, a bug of ours) is raised at once; the refused entry stays owed.
    """
    box = outbox(lake)
    return drain(
        box,
        AssetEventSender(client, box.attempts("airflow")),
        timeout=timeout,
        backoff_max=backoff_max,
        sink="airflow",
        permanent=(AirflowRejected,),
    )


# How long the dedup DAG's publish task keeps trying an unreachable Airflow API before it
# leaves the events owed to the next drain (an api-server restart takes ~15 s).
EMIT_TIMEOUT_S = 30.0
EMIT_TIMEOUT_ENV = "TIDEMARK_ASSET_EVENTS_TIMEOUT"


def emit_timeout(environ: Mapping[str, str]) -> float:
    """Seconds the publish task keeps trying an unreachable Airflow API.

    TIDEMARK_ASSET_EVENTS_TIMEOUT (a duration: 30s, 2m) when set, else EMIT_TIMEOUT_S; a value that
    is not a duration is a ValueError naming the variable.
    """
    text = environ.get(EMIT_TIMEOUT_ENV, "").strip()
    if not text:
        return EMIT_TIMEOUT_S
    try:
        return parse_duration(text).total_seconds()
    except ValueError as exc:
        raise ValueError(f"{EMIT_TIMEOUT_ENV}: {exc}") from None


def _owed_versions(box: Outbox, sink: str, limit: int = 20) -> list[str]:
    """The entries owed to `sink` as 'event_date=version', oldest first (for the logs)."""
    return [f"{e['notice']['event_date']}={e['notice']['version']}" for e in box.owed(sink)[:limit]]


def emit(
    lake: Lake,
    event_date: date,
    client: AirflowClient | Callable[[], AirflowClient],
    timeout: float = EMIT_TIMEOUT_S,
) -> dict[str, Any]:
    """What the dedup DAG's publish task does first (then it lists the neighbour reruns owed).

    Record the date's current version's notice (the safety net), then emit every asset event
    owed (any date, any committer).

    `client` is an AirflowClient or a callable that makes one (tidemark.orchestration.airflow_api.for_tasks).
    The outbox entry is the source of truth, so the run does not fail because the asset-events API
    is not configured (NotConfigured: no connection, as under `airflow dags test`) or stays
    unreachable for `timeout` seconds: the entries stay owed, a structured warning names their
    dates and versions, and the next drain (any later dedup run, the reconcile DAG's drain_outbox,
    `tidemark notices --topic corrected --emit-asset-events`) posts each of them once. A refusal
    (AirflowRejected) or a wrong connection (ConfigError) is raised: retrying cannot fix those.
    """
    tbl = iceberg.load(lake)
    current = None if tbl is None else table_versions.current_version(lake, event_date, tbl)
    recorded = None if current is None else record(lake, current, tbl)
    version = current.version if current else None
    box = outbox(lake)
    if callable(client):
        try:
            client = client()
        except NotConfigured as exc:
            owed = _owed_versions(box, "airflow")
            log.warning(
                "asset events stay owed: no Airflow API configured",
                event_date=event_date,
                version=version,
                owed=len(owed),
                owed_versions=owed,
                error=str(exc),
            )
            return {
                "recorded": recorded is not None,
                "version": version,
                "owed": len(owed),
                "delivered": False,
                "reason": "not configured",
            }
    left = emit_owed(lake, client, timeout=timeout)
    if left:
        log.warning(
            "asset events stay owed: Airflow API unreachable; the next drain posts them",
            event_date=event_date,
            version=version,
            owed=left,
            owed_versions=_owed_versions(box, "airflow"),
            airflow=repr(client),
            waited_s=timeout,
        )
        return {
            "recorded": recorded is not None,
            "version": version,
            "owed": left,
            "delivered": False,
            "reason": "unreachable",
        }
    return {"recorded": recorded is not None, "version": version, "owed": 0, "delivered": True}


class NoticesOwed(RuntimeError):
    """Corrected notices could not be sent in time (Pub/Sub unreachable); they stay owed."""


def notify(lake: Lake, event_date: date, timeout: float = 120.0) -> dict[str, Any]:
    """What the dedup DAG's notify_corrected task does after the dedup.

    Record the date's current version's notice (the safety net), then, with a topic configured,
    send everything owed. Raises NoticesOwed when some stay owed after `timeout` (Airflow
    retries the task; any later run drains them too).
    """
    recorded = record_current(lake, event_date)
    topic_path = configured_topic()
    if topic_path is None:
        owed = len(outbox(lake).owed())
        log.warning(
            "no corrected topic configured (TIDEMARK_CORRECTED_TOPIC_PATH): notices stay owed",
            event_date=event_date,
            owed=owed,
        )
        return {"recorded": recorded is not None, "owed": owed, "topic": None}
    left = send_owed(lake, topic_path, timeout=timeout)
    if left:
        raise NoticesOwed(
            f"{left} corrected notice(s) still owed after {timeout:.0f}s: Pub/Sub unreachable "
            f"({topic_path}); they stay in {outbox(lake).folder('outbox')}"
        )
    return {"recorded": recorded is not None, "owed": 0, "topic": topic_path}
