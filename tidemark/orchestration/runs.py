"""The dag_run_id rule: which deduplication run a notice (or an affected neighbour) becomes.

Used by the Cloud Function and by the DAG, so that Pub/Sub's at-least-once redelivery and a DAG
that re-triggers a neighbouring date both land on the same run id, which Airflow refuses to create
twice (HTTP 409, or TriggerDagRunOperator's skip_when_already_exists).

Why (dataset, event_date, receipt_ts) and not notice_id: one receipt partition is one piece of
new data for one date; a run started after the notice was published reads that partition (and
everything complete before it), so one run per receipt partition is enough and readable by people.
Every part is validated (layout, the notice schema's dataset pattern; an event date is a `date`,
parsed where a notice's text comes in) before it is joined, so the id only ever holds characters Airflow's default allowed_run_id_pattern accepts
(^[A-Za-z0-9_.~:+-]+$) and never anything path- or SQL-like.

This module imports only the standard library and tidemark.base.layout: it ships in the function bundle.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date
from typing import Any

from tidemark.base import layout

NOTICE_PREFIX = "notice"
AFFECTED_PREFIX = "affected"
RECONCILE_PREFIX = "reconcile"
_FINGERPRINT = re.compile(r"^[0-9a-f]{8,64}$")
_DATASET = re.compile(r"^[a-z][a-z0-9_]{2,62}$")  # the notice schema's dataset pattern
# Airflow's default [scheduler] allowed_run_id_pattern; every id built here must match it.
ALLOWED_RUN_ID = re.compile(r"^[A-Za-z0-9_.~:+-]+$")
MAX_RUN_ID_LENGTH = 250  # Airflow's dag_run.run_id column is VARCHAR(250)


class InvalidRunKey(ValueError):
    """A value that cannot be part of a run id; the message says which and why."""


def check_dataset(value: object) -> str:
    """The dataset's name as a run id spells it.

    Raises:
        InvalidRunKey: not a dataset name.
    """
    text = str(value)
    if not _DATASET.match(text):
        raise InvalidRunKey(f"invalid dataset {text[:80]!r}: expected [a-z][a-z0-9_]{{2,62}}")
    return text


def _checked(run_id: str) -> str:
    # Defence in depth: the parts are validated already; this keeps a future change honest.
    if not ALLOWED_RUN_ID.match(run_id) or len(run_id) > MAX_RUN_ID_LENGTH:
        raise InvalidRunKey(f"run id {run_id[:80]!r} is not allowed by Airflow")
    return run_id


def notice_run_id(dataset: object, event_date: date, receipt_ts: object) -> str:
    """The run of one availability notice: notice__sessions__2026-03-07__20260307T201500123Z."""
    try:
        parts = (check_dataset(dataset), layout.event_date_text(event_date), layout.check_receipt_ts(receipt_ts))
    except layout.InvalidPartitionValue as exc:
        raise InvalidRunKey(str(exc)) from None
    return _checked("__".join((NOTICE_PREFIX, *parts)))


def _notice_date(notice: Mapping[str, Any]) -> date:
    """A notice's event date, parsed from its text (InvalidRunKey when it is not one)."""
    try:
        return layout.as_event_date(notice["event_date"])
    except layout.InvalidPartitionValue as exc:
        raise InvalidRunKey(str(exc)) from None


def run_id_for_notice(notice: Mapping[str, Any]) -> str:
    """The run id of a validated notice (tidemark.notices.availability_notice.validate).

    receipt_ts is its newest receipt partition, so a coalesced notice maps to the run of its newest
    partition.
    """
    return notice_run_id(notice["dataset"], _notice_date(notice), notice["receipt_ts"])


def affected_run_id(event_date: date, source_date: date, version: object) -> str:
    """The run a deduplication of `source_date` (published as `version`) asks for a neighbouring date.

    affected__2026-03-08__from__2026-03-07__20260308T000100000Z for `event_date` 2026-03-08.
    Re-running or clearing the source run (same version) finds the run already there and does not
    add one.
    """
    try:
        parts = (
            layout.event_date_text(event_date),
            layout.event_date_text(source_date),
            layout.check_receipt_ts(version),
        )
    except layout.InvalidPartitionValue as exc:
        raise InvalidRunKey(str(exc)) from None
    return _checked(f"{AFFECTED_PREFIX}__{parts[0]}__from__{parts[1]}__{parts[2]}")


def reconcile_run_id(event_date: date, fingerprint: object, attempt: int) -> str:
    """The run tidemark reconcile starts for a stale date: reconcile__2026-03-07__<fingerprint>__1.

    The fingerprint names why the date is stale (tidemark.orchestration.reconcile), so reconciling
    again while nothing changed lands on the same run; `attempt` moves on only when that run ended
    and the date is still stale for the same reasons.
    """
    day = layout.event_date_text(event_date)
    text = str(fingerprint)
    if not _FINGERPRINT.match(text):
        raise InvalidRunKey(f"invalid fingerprint {text[:80]!r}: expected 8-64 hex digits")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or not 1 <= attempt <= 999:
        raise InvalidRunKey(f"invalid attempt {attempt!r}: expected 1..999")
    return _checked(f"{RECONCILE_PREFIX}__{day}__{text}__{attempt}")


def run_conf(notice: Mapping[str, Any]) -> dict[str, Any]:
    """The DAG run conf for a notice.

    The date to deduplicate (a DAG Param) and, for people reading the run, which notice asked for
    it.
    """
    return {
        "event_date": layout.event_date_text(_notice_date(notice)),
        "notice_id": notice["notice_id"],
        "receipt_ts": notice["receipt_ts"],
        "dataset": check_dataset(notice["dataset"]),
    }


def date_of_run_id(run_id: str) -> date | None:
    """The event date a run id built here names (notice, affected, reconcile runs), else None.

    None for any other id (a run triggered by hand from the UI or the CLI: its date is in its conf,
    not its id).
    """
    parts = run_id.split("__")
    if parts[0] == NOTICE_PREFIX and len(parts) == 4:
        text = parts[2]
    elif parts[0] in (AFFECTED_PREFIX, RECONCILE_PREFIX) and len(parts) >= 3:
        text = parts[1]
    else:
        return None
    try:
        return layout.parse_event_date(text)
    except layout.InvalidPartitionValue:
        return None
