"""The corrected notices' second sink: one Airflow asset event per committed version.

Every committed version has one entry in the corrected outbox (tidemark/notices/corrected_delivery.py),
whoever committed it: a DAG run, a `tidemark dedup` by hand, `tidemark rules migrate`, a run
reconcile started. Draining that entry to Airflow's `POST /api/v2/assets/events` (asset
tidemark.sessions_dedup, the date as partition_key) is what consumer DAGs on
PartitionedAssetTimetable see; a no-op dedup commits nothing, records nothing, emits nothing.

Exactly once: the outbox's bookkeeping (an entry is marked sent to the "airflow" sink only after
Airflow answered; what is not answered stays owed and the next drain retries, tenacity backoff in
drain.py), plus one check the POST needs because it is not idempotent. Before each POST the sender
logs an attempt (outbox.AttemptLog); an owed entry with an attempt may have been posted by a drain
killed between Airflow's answer and the sent file, so for those alone the sender lists the asset's
events since the entry was recorded and takes an event whose extra carries the entry's notice_id as
the acknowledgement. Entries never attempted are posted without that look-up, which matters because
Airflow 3.3.2 cannot list asset events while a run one of them created is still queued
(HTTP 500, apache/airflow#71360): with a consumer DAG held at max_active_runs, a look-up for every
drain would stall every emission until the queue drained.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tidemark.base.times import parse_iso
from tidemark.orchestration.airflow_api import AirflowClient, TransientAirflowError

if TYPE_CHECKING:  # the outbox hands its attempt log to this sender: a type only
    from tidemark.notices.outbox import AttemptLog

# The asset's name in Airflow (consumers schedule on Asset.ref(name=ASSET_NAME); dags/tidemark_dedup.py
# declares it, with names ASSET_URI_PREFIX as its URI). Looked up by name: Airflow normalises URIs.
ASSET_NAME = "tidemark.sessions_dedup"
# Margin for the lake writer's clock against Airflow's when looking for an earlier post.
CLOCK_MARGIN = timedelta(hours=1)


def event_extra(notice: dict[str, Any]) -> dict[str, Any]:
    """What a consumer reads from the event (the full notice stays on the corrected topic)."""
    change = notice.get("change") or {}
    return {
        "notice_id": notice["notice_id"],
        "event_date": notice["event_date"],
        "version": notice["version"],
        "previous_version": notice.get("previous_version"),
        "change": change.get("kind"),
        "rows": notice.get("rows"),
        "committed_at": notice.get("committed_at"),
        "changes": notice.get("changes"),  # where the version's changeset is (None: none staged)
    }


class AssetEventSender:
    """Airflow's asset events as a notice transport (tidemark.notices.sender.Sender).

    `send_many(entries)` -> {notice_id: (event id, timestamp) or the error}.
    """

    def __init__(self, client: AirflowClient, attempts: AttemptLog | None = None, name: str = ASSET_NAME) -> None:
        """A sender posting to the asset `name` through `client`.

        `attempts`: the outbox's attempt log for this sink; without one every entry may have
        been posted already, and every send first lists the asset's events.
        """
        self.client = client
        self.attempts = attempts
        self.name = name
        self.destination = f"airflow asset {name}"  # what the drain's log lines name
        self._asset_id: int | None = None

    def _asset(self) -> int:
        if self._asset_id is None:
            found = self.client.asset_id(self.name)
            if found is None:  # no DAG declaring it is parsed yet: retry later, stay owed
                raise TransientAirflowError(f"Airflow knows no asset {self.name} (is the dedup DAG parsed?)")
            self._asset_id = found
        return self._asset_id

    def send_many(self, entries: list[dict[str, Any]]) -> dict[str, object]:
        """Post one asset event per entry not posted yet; {notice_id: (event id, timestamp) or the error}."""
        results: dict[str, object] = {}
        try:
            asset_id = self._asset()
        except Exception as exc:  # noqa: BLE001 - every entry stays owed, retried by the drain
            return {e["notice"]["notice_id"]: exc for e in entries}
        unsure = [e for e in entries if self.attempts is None or self.attempts.may_have_been_sent(e)]
        posted: dict[str, dict[str, Any]] = {}
        if unsure:
            try:
                posted = self._posted(asset_id, unsure)
            except Exception as exc:  # noqa: BLE001 - the unsure entries stay owed; the rest go on
                results.update({e["notice"]["notice_id"]: exc for e in unsure})
        for entry in entries:
            notice = entry["notice"]
            notice_id = notice["notice_id"]
            if notice_id in results:
                continue
            try:
                event = posted.get(notice_id)
                if event is None:
                    if self.attempts is not None:
                        self.attempts.mark(notice_id)  # before the POST: a kill after it is then seen
                    event = self.client.create_asset_event(
                        asset_id, event_extra(notice), partition_key=notice["event_date"]
                    )
                results[notice_id] = (str(event["id"]), str(event["timestamp"]))
            except Exception as exc:  # noqa: BLE001
                results[notice_id] = exc
        return results

    def _posted(self, asset_id: int, entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The asset events already posted for `entries`, by notice_id.

        {notice_id: the asset event} among the asset's events since the oldest of `entries`
        was recorded.
        """
        oldest = min(parse_iso(e["recorded_at"]) for e in entries) - CLOCK_MARGIN
        posted: dict[str, dict[str, Any]] = {}
        for event in self.client.asset_events(asset_id, since=oldest.strftime("%Y-%m-%dT%H:%M:%SZ")):
            notice_id = (event.get("extra") or {}).get("notice_id")
            if notice_id:
                posted.setdefault(notice_id, event)
        return posted

    def reset(self) -> None:
        """Forget the asset's id: the next send looks it up again."""
        self._asset_id = None  # the asset may have been re-created (a DAG renamed, a new database)

    def close(self) -> None:
        """Release what the sender holds (the client is the caller's)."""
        self.reset()
