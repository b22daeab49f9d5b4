"""The notice outbox: a notice is written to the lake BEFORE it is published, and marked sent only
after Pub/Sub acknowledged it, so a crash or an outage can delay a notice but never lose it.

    <lake>/_notices/outbox/<notice_id>.json   owed: {"notice", "attributes", "recorded_at"}
    <lake>/_notices/sent/<notice_id>.json     advertised: the same plus "message_id", "published_at"

Marking sent writes the sent file first and then deletes the outbox file; a crash in between leaves
both, and owed() treats an outbox entry with a sent twin as sent (and finishes the deletion). File
names are notice_ids (validated hex), so recording the same notice twice is a no-op: a replayed
batch finds its notice already there and never makes a new one.

One Outbox class serves both topics: `Outbox(lake)` is the availability notices' (codec
tidemark.availability_notice, folders _notices/outbox|sent), `Outbox(lake, corrected_notice, "corrected")` the
corrected notices' (_notices/corrected/outbox|sent). A codec is a module with validate(body) and
attributes(body); its bodies carry a notice_id.
"""

from __future__ import annotations

import re

from tidemark import availability_notice, layout, storage
from tidemark.lake import Lake
from tidemark.logs import get_logger
from tidemark.times import now_iso_z

log = get_logger("notices")

_NOTICE_ID = re.compile(r"^[0-9a-f]{32}$")


def check_notice_id(value: object) -> str:
    text = str(value)
    if not _NOTICE_ID.match(text):
        raise ValueError(f"invalid notice_id {text[:80]!r}: expected 32 lowercase hex digits")
    return text


_CHANNEL = re.compile(r"^[a-z][a-z0-9_]{2,30}$")


def _describe(body: dict) -> dict:
    """The fields a log line names the notice by (whichever of them the notice has)."""
    return {k: body[k] for k in ("event_date", "receipt_ts", "version", "kind", "late") if k in body}


class Outbox:
    def __init__(self, lake: Lake, codec=availability_notice, channel: str | None = None):
        self.lake = lake
        self.codec = codec
        if channel is not None and not _CHANNEL.match(channel):
            raise ValueError(f"invalid notice channel {channel!r}")
        self.channel = channel

    def folder(self, which: str) -> str:
        return self.lake.notices_dir(which, self.channel)

    def path(self, which: str, notice_id: str) -> str:
        return layout.join(self.folder(which), f"{check_notice_id(notice_id)}.json")

    def is_sent(self, notice_id: str) -> bool:
        return storage.exists(self.path("sent", notice_id))

    def is_known(self, notice_id: str) -> bool:
        """Recorded already: owed or sent."""
        return storage.exists(self.path("outbox", notice_id)) or self.is_sent(notice_id)

    def record(self, body: dict) -> bool:
        """Durably record a notice as owed; False (and nothing written) when it was known already."""
        body = self.codec.validate(body)
        notice_id = body["notice_id"]
        if self.is_known(notice_id):
            log.info("notice already recorded", notice_id=notice_id, channel=self.channel, **_describe(body))
            return False
        # Two processes recording one notice at once both write the same file name (the notice_id):
        # still one entry, whichever write lands last.
        storage.write_json_atomic(
            self.path("outbox", notice_id),
            {"notice": body, "attributes": self.codec.attributes(body), "recorded_at": now_iso_z()},
        )
        log.info("notice recorded", notice_id=notice_id, channel=self.channel, **_describe(body))
        return True

    def read_owed(self, notice_id: str) -> dict | None:
        return storage.read_json(self.path("outbox", notice_id))

    def mark_sent(self, entry: dict, message_id: str, published_at: str) -> None:
        notice_id = entry["notice"]["notice_id"]
        storage.write_json_atomic(
            self.path("sent", notice_id), {**entry, "message_id": message_id, "published_at": published_at}
        )
        storage.delete_file(self.path("outbox", notice_id))

    def _entries(self, which: str) -> list[tuple[str, dict]]:
        out = []
        for name in storage.list_dir(self.folder(which)):
            notice_id = name[:-5] if name.endswith(".json") else ""
            if not _NOTICE_ID.match(notice_id):
                continue  # temp files of an atomic write, strays
            entry = storage.read_json(self.path(which, notice_id))
            if entry is not None:
                out.append((notice_id, entry))
        return out

    def owed(self) -> list[dict]:
        """Outbox entries not yet sent, oldest recorded first."""
        out = []
        for notice_id, entry in self._entries("outbox"):
            if self.is_sent(notice_id):  # a mark_sent interrupted between its two steps
                storage.delete_file(self.path("outbox", notice_id))
                continue
            out.append(entry)
        return sorted(out, key=lambda e: (e.get("recorded_at", ""), e["notice"]["notice_id"]))

    def sent(self) -> list[dict]:
        return sorted(
            (entry for _, entry in self._entries("sent")),
            key=lambda e: (e.get("published_at", ""), e["notice"]["notice_id"]),
        )
