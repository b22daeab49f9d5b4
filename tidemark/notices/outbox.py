"""The notice outbox: notices recorded in the lake before they are published.

A notice is written to the lake BEFORE it is published, and marked sent only after Pub/Sub
acknowledged it, so a crash or an outage can delay a notice but never lose it.

    <lake>/_notices/outbox/<notice_id>.json   owed: {"notice", "attributes", "recorded_at"}
    <lake>/_notices/sent/<notice_id>.json     advertised: the same plus "message_id", "published_at"

Marking sent writes the sent file first and then deletes the outbox file; a crash in between leaves
both, and owed() treats an outbox entry with a sent twin as sent (and finishes the deletion). File
names are notice_ids (validated hex), so recording the same notice twice is a no-op: a replayed
batch finds its notice already there and never makes a new one.

An outbox may have several sinks, each with its own sent folder: the corrected notices go to Pub/Sub
(sent/) and, as asset events, to Airflow (asset_events/, tidemark/notices/asset_events.py). An entry
is owed to each sink until that sink's sent file exists; the outbox file goes once every sink has
it. Entries whose outbox file a one-sink outbox removed earlier count as known (never recorded
again) and are owed to nobody.

One Outbox class serves both topics: `Outbox(lake)` is the availability notices' (codec
tidemark.notices.availability_notice, folders _notices/outbox|sent), `Outbox(lake, corrected_notice,
"corrected")` the corrected notices' (_notices/corrected/outbox|sent). A codec is a module with
validate(body) and attributes(body); its bodies carry a notice_id. Every file goes through the
lake's records of each folder (Lake.notice_records): this module names records, never paths.
"""

from __future__ import annotations

import re
from typing import Any

from tidemark.base.logs import get_logger
from tidemark.base.times import now_iso_z
from tidemark.notices import availability_notice
from tidemark.notices.availability_notice import NoticeCodec
from tidemark.store.lake import Lake
from tidemark.store.locations import JsonRecords

log = get_logger("notices")

_NOTICE_ID = re.compile(r"^[0-9a-f]{32}$")


def check_notice_id(value: object) -> str:
    """The notice_id as text, or ValueError: 32 lowercase hex digits, safe as a file name."""
    text = str(value)
    if not _NOTICE_ID.match(text):
        raise ValueError(f"invalid notice_id {text[:80]!r}: expected 32 lowercase hex digits")
    return text


_CHANNEL = re.compile(r"^[a-z][a-z0-9_]{2,30}$")


def _describe(body: dict[str, Any]) -> dict[str, Any]:
    """The fields a log line names the notice by (whichever of them the notice has)."""
    return {k: body[k] for k in ("event_date", "receipt_ts", "version", "kind", "late") if k in body}


# sink -> the folder of what it acknowledged
SINKS = {"pubsub": "sent", "airflow": "asset_events"}
# sink -> the folder of its attempts, for a sink whose send is not idempotent (an Airflow asset event
# POSTed twice is two events): written before each send, so an entry without one was never sent and
# needs no look-up at the sink (AttemptLog).
ATTEMPTS = {"airflow": "asset_events_attempted"}


class Outbox:
    """The owed, sent and attempted records of one notice channel (see the module's docstring)."""

    def __init__(
        self,
        lake: Lake,
        codec: NoticeCodec = availability_notice,
        channel: str | None = None,
        sinks: tuple[str, ...] = ("pubsub",),
    ) -> None:
        """The outbox of `channel` (None: the availability notices') for the destinations `sinks`."""
        self.lake = lake
        self.codec = codec
        if channel is not None and not _CHANNEL.match(channel):
            raise ValueError(f"invalid notice channel {channel!r}")
        unknown = [s for s in sinks if s not in SINKS]
        if unknown or not sinks or (channel is None and tuple(sinks) != ("pubsub",)):
            raise ValueError(f"invalid notice sinks {sinks!r}")
        self.channel = channel
        self.sinks = tuple(sinks)

    def records(self, which: str) -> JsonRecords:
        """The records of one of the outbox's folders: "outbox", a sink's sent folder or an attempt log's."""
        if self.channel is not None and which != "outbox" and which not in (*SINKS.values(), *ATTEMPTS.values()):
            raise ValueError(f"unknown notices folder {which!r}")
        return self.lake.notice_records(which, self.channel)

    def folder(self, which: str) -> str:
        """The URI of one of the outbox's folders (for messages)."""
        return self.records(which).uri

    def path(self, which: str, notice_id: str) -> str:
        """The URI of a notice's record in one of the outbox's folders."""
        return self.records(which).path(check_notice_id(notice_id))

    def _sink(self, sink: str) -> str:
        if sink not in self.sinks:
            raise ValueError(f"unknown sink {sink!r} (this outbox: {', '.join(self.sinks)})")
        return SINKS[sink]

    def is_sent(self, notice_id: str, sink: str = "pubsub") -> bool:
        """Whether `sink` acknowledged the notice."""
        return self.records(self._sink(sink)).exists(check_notice_id(notice_id))

    def is_known(self, notice_id: str) -> bool:
        """Recorded already: owed, or sent to any sink."""
        return self.records("outbox").exists(check_notice_id(notice_id)) or any(
            self.is_sent(notice_id, sink) for sink in self.sinks
        )

    def record(self, body: dict[str, Any]) -> bool:
        """Durably record a notice as owed; False (and nothing written) when it was known already."""
        body = self.codec.validate(body)
        notice_id = check_notice_id(body["notice_id"])
        if self.is_known(notice_id):
            log.info("notice already recorded", notice_id=notice_id, channel=self.channel, **_describe(body))
            return False
        # Two processes recording one notice at once both write the same file name (the notice_id):
        # still one entry, whichever write lands last.
        self.records("outbox").write(
            notice_id, {"notice": body, "attributes": self.codec.attributes(body), "recorded_at": now_iso_z()}
        )
        log.info("notice recorded", notice_id=notice_id, channel=self.channel, **_describe(body))
        return True

    def read_owed(self, notice_id: str) -> dict[str, Any] | None:
        """The owed entry of a notice, or None when it is not owed (any more)."""
        return self.records("outbox").read(check_notice_id(notice_id))

    def mark_sent(self, entry: dict[str, Any], message_id: str, published_at: str, sink: str = "pubsub") -> None:
        """The sink's sent file first; then the outbox file, once no sink is owed it any more."""
        notice_id = check_notice_id(entry["notice"]["notice_id"])
        self.records(self._sink(sink)).write(
            notice_id, {**entry, "message_id": message_id, "published_at": published_at}
        )
        if sink in ATTEMPTS:  # answered: the attempt is settled (a crash here leaves a harmless stray)
            self.records(ATTEMPTS[sink]).delete(notice_id)
        if all(s == sink or self.is_sent(notice_id, s) for s in self.sinks):
            self.records("outbox").delete(notice_id)

    def _entries(self, which: str) -> list[tuple[str, dict[str, Any]]]:
        records = self.records(which)
        out = []
        for notice_id in records.names():
            if not _NOTICE_ID.match(notice_id):
                continue  # strays
            entry = records.read(notice_id)
            if entry is not None:
                out.append((notice_id, entry))
        return out

    def owed(self, sink: str = "pubsub") -> list[dict[str, Any]]:
        """Outbox entries not yet sent to `sink`, oldest recorded first."""
        self._sink(sink)
        out = []
        for notice_id, entry in self._entries("outbox"):
            sent_to = {s for s in self.sinks if self.is_sent(notice_id, s)}
            if sent_to == set(self.sinks):  # a mark_sent interrupted between its two steps
                self.records("outbox").delete(notice_id)
                continue
            if sink not in sent_to:
                out.append(entry)
        return sorted(out, key=lambda e: (e.get("recorded_at", ""), e["notice"]["notice_id"]))

    def attempts(self, sink: str) -> AttemptLog:
        """The attempt log of a sink whose send is not idempotent (ATTEMPTS)."""
        self._sink(sink)
        if sink not in ATTEMPTS:
            raise ValueError(f"sink {sink!r} keeps no attempt log")
        return AttemptLog(self, ATTEMPTS[sink])

    def sent(self, sink: str = "pubsub") -> list[dict[str, Any]]:
        """The entries `sink` acknowledged, oldest published first."""
        return sorted(
            (entry for _, entry in self._entries(self._sink(sink))),
            key=lambda e: (e.get("published_at", ""), e["notice"]["notice_id"]),
        )


class AttemptLog:
    """Which outbox entries a sink may already have received.

    A sender writes `mark(notice_id)` BEFORE each send and the outbox removes it once the sink
    answered (mark_sent). So an owed entry with no attempt was never sent and can be sent without
    asking the sink first; only an entry with an attempt (a send killed or unanswered) needs the
    sink's own record checked. That look-up can fail for long stretches (Airflow 3.3.2 answers HTTP
    500 to listing asset events while a run one of them created is queued, apache/airflow#71360),
    and then only those few entries wait.

    Entries recorded before the log began (on a lake whose earlier drains logged no attempts) have
    an unknown history: `may_have_been_sent` answers True for them. The log's start is a record
    written once.
    """

    SINCE = "_since"  # the record of when the log began: <folder>/_since.json

    def __init__(self, outbox: Outbox, folder: str) -> None:
        """The attempt log kept in the outbox's folder `folder`."""
        self.outbox = outbox
        self.folder = folder
        self.records = outbox.records(folder)
        self._began: str | None = None

    def began(self) -> str:
        """When this lake began logging attempts (ISO, UTC); the first call starts the log."""
        if self._began is None:
            record = self.records.read(self.SINCE)
            if record is None:  # the first drain: of concurrent first calls one start is kept
                self.records.create(self.SINCE, {"began_at": now_iso_z()})
                record = self.records.read(self.SINCE) or {}
            self._began = str(record["began_at"])
        return self._began

    def mark(self, notice_id: str) -> None:
        """Record that the notice is about to be sent to the sink."""
        self.records.write(check_notice_id(notice_id), {"attempted_at": now_iso_z()})

    def may_have_been_sent(self, entry: dict[str, Any]) -> bool:
        """Whether the sink may hold the entry already: an attempt was logged, or the entry predates the log."""
        notice_id = check_notice_id(entry["notice"]["notice_id"])
        if self.records.exists(notice_id):
            return True
        # Recorded before the log began: an earlier drain may have sent it without logging.
        return str(entry.get("recorded_at", "")) <= self.began()
