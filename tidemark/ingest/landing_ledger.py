"""The landing ledger: which landed files the stream read, when, and what it made of each.

Every micro-batch that read lines records one entry, `<lake>/_landing/day=D/receipt_ts=R.json`
(D: the day of R; tidemark.store.lake; a lake from before the day folders keeps `_landing/receipt_ts=R.json`,
still read), written before the batch's panes and rewritten identically if the batch is
replayed: for each file Spark gave it, the file's path relative to the landing folder, its size and
modification time as the batch pinned it (tidemark.ingest.input_pins), its line count, its verdict
(tidemark.ingest.landing: input, hidden or in progress; `unreadable` with a `reason` for a file a
replay could not read as its first attempt did) and the sha256 of the bytes read; and the input
rules the batch judged its lines by (`input_rules`), which a replay uses whatever it was given. So
  - no landed file is skipped without a record: hidden and in-progress files the source listed are
    recorded with their verdict, and `audit` reports every file in the landing that no entry covers;
  - the receipt time and input rules of every line are known after the fact: the batch reference
    judges the clock guard with them (tidemark.demo.batch_reference), exactly as the stream did;
  - what a batch read is known by content: its files' digests;
  - a file replaced under a name already read is found: Spark's source reads each name once, so the
    new content would be lost without a trace. `audit` compares the landing with the ledger, and
    `quarantine_replaced` puts every line of a replaced file's new content in the quarantine (raw
    bytes, reason `REPLACED`) and records its size and time, so it is reported once. Landed files
    are immutable: to add events, land a new file (docs/input-contract.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any, NotRequired, TypedDict, cast

import pyarrow as pa
import pyarrow.parquet as pq

from tidemark.base import layout
from tidemark.base.logs import get_logger
from tidemark.base.times import from_micros, to_micros
from tidemark.ingest import landing, landing_archive
from tidemark.ingest.contract import InputRules
from tidemark.store.lake import QUARANTINE_MARKER, Lake
from tidemark.store.locations import File

log = get_logger("landing")

REPLACED_VERDICT = "replaced"
# A file a replayed batch could not read as its first attempt did (its pin gone or changed:
# tidemark.ingest.input_pins), or one gone before its batch could pin it; the record's `reason` says which.
UNREADABLE_VERDICT = "unreadable"
REPLACED = "landed file replaced after it was read: its new content is not read (land new events as a new file)"


class Entry(TypedDict):
    """One batch's ledger entry, as record_batch writes it."""

    receipt_ts: str
    batch_id: int | None
    source: str
    files: list[landing.FileEntry]
    input_rules: NotRequired[dict[str, Any]]  # rules_record's


@dataclass(frozen=True)
class FileRecord:
    """What the ledger says about one landed file."""

    path: str
    size: int | None
    mtime_ms: int | None
    lines: int
    verdict: str
    receipt_ts: str
    input_rules: InputRules | None = None  # what the batch judged the file's lines by (None: not recorded)

    def matches(self, found: landing.LandedFile) -> bool:
        """The landed file is the one recorded (unknown size or time: taken as the same)."""
        return (self.size is None or self.size == found.size) and (
            self.mtime_ms is None or self.mtime_ms == found.mtime_ms
        )


def record_batch(
    lake: Lake,
    receipt_ts: str,
    batch_id: int | None,
    files: list[landing.FileEntry],
    source: str = "stream",
    input_rules: InputRules | None = None,
) -> None:
    """Write one batch's entry.

    files: {path, size, mtime_ms, lines, verdict[, sha256, reason]}; input_rules: the rules the
    batch judged its lines by (a replay reads them back: `rules_of`).
    """
    entry: Entry = {
        "receipt_ts": receipt_ts,
        "batch_id": batch_id,
        "source": source,
        "files": sorted(files, key=lambda f: f["path"]),
    }
    if input_rules is not None:
        entry["input_rules"] = rules_record(input_rules)
    lake.landing_ledger_path(receipt_ts).write_json_atomic(dict(entry))


def read_entry(lake: Lake, receipt_ts: str) -> Entry | None:
    """Batch receipt_ts's entry (in its day folder, or where a legacy lake kept it), if any."""
    found = lake.landing_ledger_path(receipt_ts).read_json()
    if found is None:
        found = lake.legacy_landing_ledger_path(receipt_ts).read_json()
    return cast("Entry | None", found)  # JSON that record_batch wrote


def rules_record(rules: InputRules) -> dict[str, Any]:
    """The input rules as a ledger entry records them: readable, and exact in microseconds."""
    return {
        **rules.describe(),
        "max_clock_skew_us": rules.max_clock_skew_us,
        "earliest_event_ts_us": rules.earliest_us,
    }


def rules_of(entry: Entry) -> InputRules | None:
    """The input rules an entry records; None for an entry written before they were recorded."""
    recorded = entry.get("input_rules")
    if not recorded:
        return None
    return InputRules(
        max_clock_skew=timedelta(microseconds=int(recorded["max_clock_skew_us"])),
        earliest_event_ts=from_micros(int(recorded["earliest_event_ts_us"])),
    )


def _entries(lake: Lake, since_day: date | None) -> list[tuple[str, File]]:
    """(receipt_ts, file) of the ledger's entries, oldest first.

    Those in day folders from `since_day` on (every day: None) and those a lake from before the day
    folders keeps at the top.
    """
    root = lake.landing_ledger_dir()
    found = []
    for name in root.names():
        text = layout.partition_value(name, "day")
        if text is not None:
            day = layout.as_event_date(text)  # the folder's name, as listed: where the day enters
            if since_day is None or day >= since_day:
                folder = lake.landing_ledger_day(day)
                found += [(ts, folder.file(n)) for n in folder.names() if (ts := _entry_ts(n))]
        elif receipt_ts := _entry_ts(name):
            found.append((receipt_ts, root.file(name)))
    return sorted(found)


def _entry_ts(name: str) -> str | None:
    return layout.partition_value(name.removesuffix(".json"), "receipt_ts") if name.endswith(".json") else None


def read_ledger(lake: Lake, since_day: date | None = None) -> dict[str, FileRecord]:
    """{path: the newest record of that path} over every entry, or over those from `since_day` on.

    `since_day` selects the entries of batches received from that day on (and a legacy lake's
    undated entries).
    """
    return {path: records[-1] for path, records in read_history(lake, since_day).items()}


def read_history(lake: Lake, since_day: date | None = None) -> dict[str, list[FileRecord]]:
    """{path: every record of that path, oldest first}, over the entries read_ledger reads.

    A name landed again after its file was archived has one record per content read.
    """
    out: dict[str, list[FileRecord]] = {}
    for receipt_ts, file in _entries(lake, since_day):  # receipt_ts order
        entry = cast("Entry", file.read_json() or {})  # JSON that record_batch wrote
        rules = rules_of(entry)
        for item in entry.get("files", []):
            record = FileRecord(
                item["path"],
                item.get("size"),
                item.get("mtime_ms"),
                int(item.get("lines") or 0),
                item["verdict"],
                receipt_ts,
                rules,
            )
            out.setdefault(record.path, []).append(record)
    return out


def receipt_us(receipt_ts: str) -> int:
    """A ledger entry's receipt_ts as microseconds.

    The receipt time the stream's clock guard used (the batch timestamp, which receipt_ts spells to
    the millisecond).
    """
    return to_micros(layout.parse_receipt_ts(receipt_ts))


@dataclass
class Audit:
    """The landing compared with the ledger."""

    read: list[str] = field(default_factory=list)  # input files read as they are now
    pending: list[str] = field(default_factory=list)  # input files no batch has read yet
    replaced: list[landing.LandedFile] = field(default_factory=list)  # read once, changed since
    in_progress: list[landing.LandedFile] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """The findings as JSON: counts of read and hidden files, the paths of the others."""
        return {
            "read": len(self.read),
            "pending": self.pending,
            "replaced": [f.path for f in self.replaced],
            "in_progress": [f.path for f in self.in_progress],
            "hidden": len(self.hidden),
        }


def audit(landing_uri: str, lake: Lake, archive: str | None = None) -> Audit:
    """Every file in the landing, sorted by what the ledger says of it. Reads no file's content.

    With the stream's archive (tidemark.ingest.landing_archive), a file under a name whose earlier file was
    read and archived (or set aside as replaced) is a new file, pending: the stream reads it in a new
    checkpoint generation, which it starts for it (its events, if it repeats the old file, are
    copies that the dedup collapses).

    Cost: without the archive, the landing keeps every file and the whole ledger is read. With it,
    the landing holds only files not yet archived, and a batch reads a file after it landed, so only
    the entries from the day before the oldest landed file's modification time on are read
    (`since_day`): the audit's cost follows the landing, not the lake's age. (A file read and then
    replaced while the stream was stopped for more than a day before archiving it reads as pending
    here; the stream's archive drain sets it aside as replaced when it restarts.)
    """
    files = list(landing.list_landing(landing_uri))
    readable = [f for f in files if f.verdict == landing.INPUT]  # hidden and in-progress files are never read
    ledger = read_ledger(lake, since_day(readable) if archive is not None else None)
    out = Audit()
    for found in files:
        verdict = found.verdict
        if verdict == landing.HIDDEN:
            out.hidden.append(found.path)
        elif verdict == landing.IN_PROGRESS:
            out.in_progress.append(found)
        elif found.path not in ledger:
            # an empty file has no line to read: Spark lists it, no batch sees it, nothing is lost
            (out.read if found.size == 0 else out.pending).append(found.path)
        elif ledger[found.path].matches(found):
            out.read.append(found.path)
        elif archive is not None and landing_archive.holds(archive, ledger[found.path].receipt_ts, found.path):
            out.pending.append(found.path)
        else:
            out.replaced.append(found)
    return out


def since_day(files: list[landing.LandedFile]) -> date:
    """The first ledger day that can record a read of these landed files.

    The day before the oldest one's modification time (a day of margin for the clocks of the
    stream's driver and the store).
    """
    oldest_ms = min((f.mtime_ms for f in files if f.mtime_ms is not None), default=None)
    if oldest_ms is None:
        return datetime.now(timezone.utc).date()
    return (datetime.fromtimestamp(oldest_ms / 1000, tz=timezone.utc) - timedelta(days=1)).date()


def quarantine_replaced(landing_uri: str, lake: Lake, found: Audit | None = None, archive: str | None = None) -> Audit:
    """Quarantine the new content of every replaced file (once: the ledger then records it).

    The quarantine folder is one of the lake's usual ones (`tidemark quarantine` lists it), with a
    receipt_ts of its own, so a later micro-batch's folder is never taken.
    """
    found = found if found is not None else audit(landing_uri, lake, archive)
    if not found.replaced:
        return found
    contents = [(f.path, f.size, f.mtime_ms, landing.read_file(landing_uri, f.path)) for f in found.replaced]
    receipt_ts = quarantine_contents(lake, contents, REPLACED, REPLACED_VERDICT, source="audit")
    for replaced in found.replaced:
        log.warning(
            "landed file replaced after it was read: new content quarantined",
            file=replaced.path,
            receipt_ts=receipt_ts,
            path=lake.quarantine_dir(receipt_ts),
        )
    if archive is not None:  # out of the landing: a later checkpoint generation must not read it
        for replaced in found.replaced:
            landing_archive.set_aside(landing_uri, archive, receipt_ts, replaced.path)
    return found


def quarantine_contents(
    lake: Lake,
    contents: Sequence[tuple[str, int | None, int | None, bytes]],
    reason: str,
    verdict: str,
    source: str,
    batch_id: int | None = None,
) -> str:
    """Quarantine every line of each (path, size, mtime_ms, bytes) with `reason`, and record the files.

    The lines go to a quarantine folder of their own (a receipt_ts no batch has), and a ledger entry
    records the files with `verdict` and their sha256. Returns that receipt_ts.
    """
    receipt_ts = _free_receipt_ts(lake)
    rows: dict[str, list[Any]] = {"raw": [], "reason": [], "source_file": [], "batch_id": []}
    records: list[landing.FileEntry] = []
    for path, size, mtime_ms, data in contents:
        lines = landing.file_lines(data)
        for line in lines:
            rows["raw"].append(line)
            rows["reason"].append(reason)
            rows["source_file"].append(path)
            rows["batch_id"].append(batch_id)
        records.append(
            {
                "path": path,
                "size": size,
                "mtime_ms": mtime_ms,
                "lines": len(lines),
                "verdict": verdict,
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        )
    folder = lake.quarantine_dir(receipt_ts)
    table = pa.table(
        {
            "raw": pa.array(rows["raw"], pa.binary()),
            "reason": pa.array(rows["reason"], pa.string()),
            "source_file": pa.array(rows["source_file"], pa.string()),
            "receipt_ts": pa.array([receipt_ts] * len(rows["raw"]), pa.string()),
            "batch_id": pa.array(rows["batch_id"], pa.int64()),
        }
    )
    fs, path = folder.at()
    fs.create_dir(path, recursive=True)
    pq.write_table(table, f"{path}/part-00000-{verdict}.parquet", filesystem=fs)
    folder.file(QUARANTINE_MARKER).write_json_atomic(
        {"receipt_ts": receipt_ts, "batch_id": None, "rows": len(rows["raw"])}
    )
    record_batch(lake, receipt_ts, None, records, source=source)
    return receipt_ts


def sweep_read(landing_uri: str, lake: Lake, archive: str) -> int:
    """Move every file of the landing that the ledger records as read to the archive.

    Each goes under the day of the batch that read it, and every replaced one is quarantined and set
    aside: what a checkpoint's first rotation needs when the stream ran without the archive before.
    Reads the whole ledger: once per checkpoint (tidemark.ingest.landing_archive.rotate). Returns
    files moved.
    """
    ledger = read_ledger(lake)
    found = audit(landing_uri, lake, archive)
    for path in found.read:
        record = ledger.get(path)
        if record is not None and record.verdict == landing.INPUT:
            landing_archive.move_read(landing_uri, archive, record.receipt_ts, path)
    quarantine_replaced(landing_uri, lake, found, archive=archive)
    return len(found.read)


def _free_receipt_ts(lake: Lake) -> str:
    """Now as a receipt_ts that no quarantine folder or ledger entry has yet."""
    millis = int(datetime.now(timezone.utc).timestamp() * 1000)
    while True:
        receipt_ts = layout.receipt_ts_from_millis(millis)
        if not (lake.quarantine_dir(receipt_ts).exists() or lake.has_landing_ledger_entry(receipt_ts)):
            return receipt_ts
        millis += 1


def report(landing_uri: str, lake: Lake, quarantine: bool = True, archive: str | None = None) -> Audit:
    """Audit the landing, quarantine replaced files, and log what was not read and why."""
    found = quarantine_replaced(landing_uri, lake, archive=archive) if quarantine else audit(landing_uri, lake, archive)
    now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
    for stuck in found.in_progress:
        log.warning(
            "landed file under an in-progress name: not read until it is renamed",
            file=stuck.path,
            age_s=round((now_ms - stuck.mtime_ms) / 1000, 1),
        )
    if found.pending:
        log.info("landed files not read yet", files=len(found.pending), first=found.pending[:5])
    return found
