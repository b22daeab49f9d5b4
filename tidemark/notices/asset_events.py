"""The corrected notices' second sink: one Airflow asset event per committed version.

Every committed version has one entry in the corrected outbox (tidemark/notices/corrected.py),
whoever committed it: a DAG run, a `tidemark dedup` by hand, `tidemark rules migrate`, a run
reconcile started. Draining that entry to Airflow's `POST /api/v2/assets/events` (asset
tidemark.sessions_dedup, the date as partition_key) is what consumer DAGs on
PartitionedAssetTimetable see; a no-op dedup commits nothing, records nothing, emits nothing.

Exactly once: the outbox's bookkeeping (an entry is marked sent to the "airflow" sink only after
Airflow answered; what is not answered stays owed and the next drain retries, tenacity backoff in
drain.py), plus one check the POST needs because it is not idempotent: before posting, the drain
lists the asset's events since the oldest owed entry was recorded and takes an event whose extra
carries the entry's notice_id as the acknowledgement (a drain killed between Airflow's answer and
the sent file would otherwise post it twice).
"""

from __future__ import annotations

from datetime import timedelta

from tidemark.times import parse_iso

# The asset's name in Airflow (consumers schedule on Asset.ref(name=ASSET_NAME); dags/tidemark_dedup.py
# declares it, with names ASSET_URI_PREFIX as its URI). Looked up by name: Airflow normalises URIs.
ASSET_NAME = "tidemark.sessions_dedup"
# Margin for the lake writer's clock against Airflow's when looking for an earlier post.
CLOCK_MARGIN = timedelta(hours=1)


def event_extra(notice: dict) -> dict:
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
    }


class AssetEventSender:
    """Airflow's asset events as a notice transport (tidemark.notices.sender.Sender): send_many(entries)
    -> {notice_id: (event id, timestamp) or the error}."""

    def __init__(self, client, name: str = ASSET_NAME):
        self.client = client
        self.name = name
        self.destination = f"airflow asset {name}"  # what the drain's log lines name
        self._asset_id: int | None = None

    def _asset(self) -> int:
        from tidemark.airflow_api import TransientAirflowError

        if self._asset_id is None:
            found = self.client.asset_id(self.name)
            if found is None:  # no DAG declaring it is parsed yet: retry later, stay owed
                raise TransientAirflowError(f"Airflow knows no asset {self.name} (is the dedup DAG parsed?)")
            self._asset_id = found
        return self._asset_id

    def send_many(self, entries: list[dict]) -> dict[str, object]:
        results: dict[str, object] = {}
        try:
            asset_id = self._asset()
            oldest = min(parse_iso(e["recorded_at"]) for e in entries) - CLOCK_MARGIN
            posted: dict[str, dict] = {}
            for event in self.client.asset_events(asset_id, since=oldest.strftime("%Y-%m-%dT%H:%M:%SZ")):
                notice_id = (event.get("extra") or {}).get("notice_id")
                if notice_id:
                    posted.setdefault(notice_id, event)
        except Exception as exc:  # noqa: BLE001 - every entry stays owed, retried by the drain
            return {e["notice"]["notice_id"]: exc for e in entries}
        for entry in entries:
            notice = entry["notice"]
            notice_id = notice["notice_id"]
            try:
                event = posted.get(notice_id)
                if event is None:
                    event = self.client.create_asset_event(
                        asset_id, event_extra(notice), partition_key=notice["event_date"]
                    )
                results[notice_id] = (str(event["id"]), str(event["timestamp"]))
            except Exception as exc:  # noqa: BLE001
                results[notice_id] = exc
        return results

    def reset(self) -> None:
        self._asset_id = None  # the asset may have been re-created (a DAG renamed, a new database)

    def close(self) -> None:
        self.reset()
