"""A bounded landing.

Read files moved out of the landing folder, and the stream's checkpoint started afresh now and then,
so that neither the listing of every trigger nor Spark's file-source log grows with the landing's
age (docs/input-contract.md "Landing").

Spark's file source keeps every file it ever read in its source log, and compacting the log keeps
every entry; `maxFileAge` only bounds the in-memory map (SPARK-30462). Its own `cleanSource=archive`
moves every file of a committed batch, best effort, from a background thread: that includes names
tidemark does not read (in-progress `.tmp`/`.part` files still being written, hidden files), and the
files of the last batch before a stop or a checkpoint change are never moved. So tidemark moves the
files itself, with the landing rule and the stream's commit log deciding:

    <archive>/received=YYYY-MM-DD/<path relative to the landing>   a read input file, under the UTC
                                                                   date of the batch that read it
    <checkpoint>/archive_queue/batch_id=N.json   the input files batch N read (tidemark batch id),
                                                 written before its ledger entry; deleted once moved
    <checkpoint>/generation.json                 {"generation": g, "batch_base": B}: the query folder
                                                 in use, and the batch id its batch 0 has
    <checkpoint>/query, query-g1, query-g2 ...   Spark's checkpoint of generation 0, 1, 2 ...

A file moves only after Spark's commit log records the batch that read it (`commits/<id>`): a batch
that is not committed is replayed from the same files, so its files must stay. A file whose size or
modification time changed since the batch read it was replaced: its new content is quarantined
(tidemark.ingest.landing_ledger, as the landing audit does) and it moves under `<archive>/_replaced/`.
The archive keeps every content it is handed: another content under a name already archived that
day goes beside it as `<path>.sha256-<digest of its content>` (version_path), and a content it holds
already is not copied twice (a move retried after a kill between a bucket's copy and its delete).
The first rotation of a checkpoint also moves whatever the landing ledger records as read (a
landing that held read files before the archive was turned on).

A rotation (every `rotate_after` batches of a generation, at a graceful stop, and when a pending
landed file is under a name the generation has listed, which its query never reads again: unread)
starts the next generation on an empty query folder. It is safe only when every file a batch read
has left the landing, else the new query would read it again: so it happens only when the archive
queue is empty after moving every committed batch's files (no batch left any work half done), and
the generation file is switched last. A SIGKILL anywhere before the switch resumes the old
generation (its committed files are gone from the landing; it never needs them again); after it,
the new one starts, and the old query folder is deleted at the next start. Batch ids continue across
generations (batch_base), so the stream's state versions (streaming_job/state.py), pane batch ids
and notices see one increasing sequence.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import TypedDict, cast

import pyarrow.fs as pafs

from tidemark.base import layout
from tidemark.base.logs import get_logger
from tidemark.ingest import input_pins
from tidemark.ingest.landing import FileEntry, LandedFile, relative_path
from tidemark.store.lake import Lake
from tidemark.store.locations import File, Folder, Root

log = get_logger("landing")

GENERATION_FILE = "generation.json"
QUEUE_DIR = "archive_queue"
RECEIVED_KEY = "received"
REPLACED_DIR = "_replaced"  # hidden: files replaced after they were read (content quarantined)
VERSION_MARK = ".sha256-"  # another content of a name archived the same day: <path>.sha256-<hex digest>
_VERSION = re.compile(re.escape(VERSION_MARK) + "[0-9a-f]{64}$")


@dataclass(frozen=True)
class Generation:
    """A checkpoint generation: its number, and the stream batch id its Spark batch 0 has."""

    generation: int
    batch_base: int

    def query_dir(self, checkpoint: str) -> Folder:
        """Spark's checkpoint folder of this generation (generation 0 keeps today's name)."""
        return Root(checkpoint).folder("query" if self.generation == 0 else f"query-g{self.generation}")


def current(checkpoint: str) -> Generation:
    """The checkpoint's current generation (generation 0 before any rotation)."""
    meta = Root(checkpoint).file(GENERATION_FILE).read_json() or {}
    return Generation(int(meta.get("generation", 0)), int(meta.get("batch_base", 0)))


def _received_folder(receipt_ts: str) -> str:
    """The archive's folder name for the UTC day of a batch's receipt_ts (received=YYYY-MM-DD)."""
    return f"{RECEIVED_KEY}={layout.event_date_text(layout.parse_receipt_ts(receipt_ts).date())}"


def archive_path(archive: str, receipt_ts: str, relative: str) -> File:
    """Where the archive keeps a file read by the batch of `receipt_ts`."""
    return Root(archive).file(_received_folder(receipt_ts), relative)


def holds(archive: str, receipt_ts: str, relative: str) -> bool:
    """The archive took a file of this name out of the landing on receipt_ts's day.

    Read (received=) or set aside as replaced (_replaced/received=).
    """
    return (
        archive_path(archive, receipt_ts, relative).exists() or _replaced_path(archive, receipt_ts, relative).exists()
    )


def _replaced_path(archive: str, receipt_ts: str, relative: str) -> File:
    return Root(archive).file(REPLACED_DIR, _received_folder(receipt_ts), relative)


def _queue_dir(checkpoint: str) -> Folder:
    return Root(checkpoint).folder(QUEUE_DIR)


def _queue_entry(checkpoint: str, batch_id: int) -> File:
    return _queue_dir(checkpoint).file(f"batch_id={batch_id}.json")


def enqueue(
    checkpoint: str, generation: Generation, spark_batch_id: int, receipt_ts: str, files: list[FileEntry]
) -> None:
    """Record what a batch read, before its ledger entry and its panes.

    Written again identically when the batch is replayed. files: {path, size, mtime_ms, sha256} of
    its input files.
    """
    _queue_entry(checkpoint, generation.batch_base + spark_batch_id).write_json_atomic(
        {
            "generation": generation.generation,
            "spark_batch_id": spark_batch_id,
            "receipt_ts": receipt_ts,
            "files": [
                {"path": f["path"], "size": f.get("size"), "mtime_ms": f.get("mtime_ms"), "sha256": f.get("sha256")}
                for f in files
            ],
        },
    )


class QueuedFile(TypedDict):
    """A file of a queue entry: what the batch read of it (enqueue)."""

    path: str
    size: int | None
    mtime_ms: int | None
    sha256: str | None


class QueueEntry(TypedDict):
    """A batch's queue entry, as enqueue writes it, with the batch id its name holds."""

    generation: int
    spark_batch_id: int
    receipt_ts: str
    files: list[QueuedFile]
    batch_id: int


def queued(checkpoint: str) -> list[QueueEntry]:
    """The queue's entries (batches whose files are not all moved yet), oldest first."""
    out: list[QueueEntry] = []
    folder = _queue_dir(checkpoint)
    for name in folder.names():
        value = layout.partition_value(name.removesuffix(".json"), "batch_id")
        if value is not None and value.isdigit() and name.endswith(".json"):
            entry = folder.file(name).read_json()
            if entry is not None:
                out.append(cast("QueueEntry", {**entry, "batch_id": int(value)}))  # JSON that enqueue wrote
    return sorted(out, key=lambda e: e["batch_id"])


def committed(checkpoint: str, entry: QueueEntry) -> bool:
    """Spark's commit log of the entry's generation records its batch: it is never replayed."""
    query = Generation(int(entry["generation"]), 0).query_dir(checkpoint)
    return query.file("commits", str(int(entry["spark_batch_id"]))).exists()


def drain(
    landing: str, archive: str, checkpoint: str, on_replaced: Callable[[list[LandedFile]], None] | None = None
) -> int:
    """Move the files of every committed batch in the queue to the archive.

    Returns files moved. Idempotent: a file already moved (a crash after the move, before the
    entry's deletion) is skipped.

    What is archived is the content the batch read: the landed file while its size and time are
    the ones read, else (replaced, deleted) the batch's pin of it (tidemark.ingest.input_pins).

    A file changed since its batch read it (replaced under its name) is not archived as read:
    on_replaced gets it before the batch's entry is deleted (the stream quarantines its new content
    and sets it aside: tidemark.ingest.landing_ledger.quarantine_replaced), so that no later checkpoint
    generation reads it as a new file. Without on_replaced it stays, for the landing audit.
    """
    moved = 0
    for entry in queued(checkpoint):
        if not committed(checkpoint, entry):
            continue
        replaced = []
        for item in entry["files"]:
            path = item["path"]
            found = _found(landing, path)
            if found is not None and not (
                (item.get("size") is not None and item["size"] != found.size)
                or (item.get("mtime_ms") is not None and item["mtime_ms"] != found.mtime_ms)
            ):
                move_read(landing, archive, entry["receipt_ts"], path)  # the landed file is the one read
                moved += 1
                continue
            pinned = input_pins.pinned_file(checkpoint, entry["batch_id"], path)
            if pinned is not None:  # the content read, from its pin (a pin archived already is only removed)
                _rename(
                    input_pins.pin_dir(checkpoint, entry["batch_id"]),
                    path,
                    archive_path(archive, entry["receipt_ts"], path),
                )
                moved += 1
            if found is not None:
                replaced.append(found)
        if replaced:
            log.warning(
                "landed files changed after they were read: not archived as read", files=[f.path for f in replaced]
            )
            if on_replaced is not None:
                on_replaced(replaced)
        _queue_entry(checkpoint, entry["batch_id"]).delete()
    return moved


def _found(landing: str, path: str) -> LandedFile | None:
    fs, where = Root(landing).file(path).at()
    info = fs.get_file_info(where)
    if info.type != pafs.FileType.File:
        return None
    return LandedFile(path, int(info.size or 0), int(info.mtime_ns // 1_000_000) if info.mtime_ns is not None else 0)


def move_read(landing: str, archive: str, receipt_ts: str, path: str) -> None:
    """Move a read input file to <archive>/received=<its batch's day>/<path>.

    Or to a version of that name (_rename).
    """
    _rename(landing, path, archive_path(archive, receipt_ts, path))


def set_aside(landing: str, archive: str, receipt_ts: str, path: str) -> None:
    """Move a replaced file, its new content quarantined, to <archive>/_replaced/received=<day>/<path>.

    Out of the landing, and out of what the batch reference reads (a hidden folder).
    """
    _rename(landing, path, _replaced_path(archive, receipt_ts, path))


def version_path(path: str, digest: str) -> str:
    """The archive's name for another content of `path` archived the same day.

    The SHA-256 of that content (hex) appended.
    """
    return f"{path}{VERSION_MARK}{digest}"


def original_path(archived: str) -> str:
    """The landing path of an archived file (its path under the received= folder).

    A version's content suffix removed.
    """
    return _VERSION.sub("", archived)


def _rename(landing: str, path: str, target_file: File) -> None:
    """Move a landed file to target_file, keeping every distinct content the archive is handed.

    The target name holds the first content archived under it; another content is archived beside
    it under version_path (content identity, whatever the sizes), and a content already there (a
    move retried after a kill between a bucket's copy and its delete, or the same file landed and
    read again the same day) is not copied again: the landing's file is only deleted. Each copy
    appears whole (a rename on a local disk, an object on a bucket), so a kill leaves either the
    landed file or its archived copy, or both, and the retried move finishes it.
    """
    fs, source = Root(landing).file(path).at()
    info = fs.get_file_info(source)
    if info.type != pafs.FileType.File:
        return
    afs, target = target_file.at()
    existing = afs.get_file_info(target)
    if existing.type != pafs.FileType.File:
        _transfer(fs, source, afs, target)
        return
    digest = _sha256(fs, source)
    if not _holds(afs, target, existing, info.size, digest):
        target = version_path(target, digest)
        existing = afs.get_file_info(target)
        if existing.type != pafs.FileType.File:
            _transfer(fs, source, afs, target)
            return
        if not _holds(afs, target, existing, info.size, digest):
            raise ValueError(f"the archive's {target} does not hold the content its name says: {source} stays")
    log.info("landed file already archived: removed from the landing", file=path, archived=target)
    fs.delete_file(source)


def _holds(afs: pafs.FileSystem, path: str, info: pafs.FileInfo, size: int | None, digest: str) -> bool:
    """The archived file at path has the content whose SHA-256 is digest."""
    return info.size == size and _sha256(afs, path) == digest


def _transfer(fs: pafs.FileSystem, source: str, afs: pafs.FileSystem, target: str) -> None:
    """Source (on fs) to target (on afs), which must not exist; the copy appears whole."""
    folder, name = target.rsplit("/", 1)
    afs.create_dir(folder, recursive=True)
    if type(afs) is type(fs):
        fs.move(source, target)  # a rename on a local disk; copy and delete on a bucket
        return
    if isinstance(afs, pafs.LocalFileSystem):  # a copy to a local disk is written under a hidden name first
        staged = f"{folder}/.{name}.archiving"
        pafs.copy_files(source, staged, source_filesystem=fs, destination_filesystem=afs)
        afs.move(staged, target)
    else:
        pafs.copy_files(source, target, source_filesystem=fs, destination_filesystem=afs)
    fs.delete_file(source)


def _sha256(fs: pafs.FileSystem, path: str) -> str:
    digest = hashlib.sha256()
    with fs.open_input_stream(path) as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def rotate(
    landing: str,
    archive: str,
    checkpoint: str,
    generation: Generation,
    on_replaced: Callable[[list[LandedFile]], None] | None = None,
    sweep: Callable[[], object] | None = None,
    lake: Lake | None = None,
) -> Generation | None:
    """Start the next generation if nothing a batch read is left in the landing.

    Returns it, or None when some batch's work is not committed (the old generation then resumes and
    replays it). Call only after the generation's query has stopped.

    sweep: at the first rotation only (generation 0, which may have run without the archive), what
    moves every file the landing ledger records as read (tidemark.ingest.landing_ledger.sweep_read): a
    landing that held read files before the archive was turned on is cleared before a new
    file-source log could read them again. Later generations ran with the archive throughout (a
    generation file refuses a start without it), so their queue is the whole story.

    lake: also refuse while a planned, uncommitted batch has a landing ledger entry (its receipt_ts
    is its batch timestamp in the offset log): work a run without the archive left half done,
    which its replay must finish from the landing's files.
    """
    drain(landing, archive, checkpoint, on_replaced)
    query = generation.query_dir(checkpoint)
    offsets = [int(n) for n in query.folder("offsets").names() if n.isdigit()]
    commits = [int(n) for n in query.folder("commits").names() if n.isdigit()]
    if queued(checkpoint) or (lake is not None and _half_done(lake, query, offsets, commits)):
        log.warning("checkpoint rotation skipped: a batch is not committed yet", checkpoint=checkpoint)
        return None
    if sweep is not None and generation.generation == 0:
        sweep()
    # every id the old query planned, even one it refused to run (a graceful stop): never reused
    nxt = Generation(generation.generation + 1, generation.batch_base + max(offsets, default=-1) + 1)
    Root(checkpoint).file(GENERATION_FILE).write_json_atomic(
        {"generation": nxt.generation, "batch_base": nxt.batch_base}
    )
    log.info(
        "checkpoint rotated: a new file-source log",
        checkpoint=checkpoint,
        generation=nxt.generation,
        batch_base=nxt.batch_base,
    )
    remove_old_generations(checkpoint, nxt)
    return nxt


def listed(landing: str, checkpoint: str, generation: Generation) -> set[str]:
    """The paths (relative to the landing) that the generation's committed batches listed.

    Spark's source log (`<query>/sources/0/`: the newest `N.compact`, which holds every entry before
    it, and the entries after it), whose names its query never reads again. A file of a batch not
    committed yet is left out: that batch (or its replay) reads it. Costs a read of the log, which
    grows with the files the generation read (a rotation bounds it).
    """
    query = generation.query_dir(checkpoint)
    done = max((int(n) for n in query.folder("commits").names() if n.isdigit()), default=-1)
    folder = query.folder("sources", "0")
    names = folder.names()
    compacts = [int(n.removesuffix(".compact")) for n in names if n.endswith(".compact") and n[:-8].isdigit()]
    since = max(compacts, default=-1)
    wanted = ([f"{since}.compact"] if compacts else []) + sorted(
        (n for n in names if n.isdigit() and since < int(n) <= done), key=int
    )
    out = set()
    for name in wanted:
        for line in (folder.file(name).read_text() or "").splitlines()[1:]:
            try:
                entry = json.loads(line)
                if int(entry.get("batchId", -1)) <= done:
                    out.add(relative_path(landing, entry["path"]))
            except (AttributeError, KeyError, TypeError, ValueError):
                log.warning("an entry of Spark's file-source log not understood", file=name, entry=line[:200])
    return out


def unread(landing: str, checkpoint: str, generation: Generation, pending: list[str]) -> list[str]:
    """The pending landed files that the generation's query will never read.

    A name one of its committed batches listed (a name landed again after its file was archived or
    set aside, or an empty file written again). Only a new generation reads them (rotate). Reads
    Spark's source log only when some file is pending.
    """
    if not pending:
        return []
    seen = listed(landing, checkpoint, generation)
    return [path for path in pending if path in seen]


def _half_done(lake: Lake, query: Folder, offsets: list[int], commits: list[int]) -> bool:
    done = max(commits, default=-1)
    for batch_id in (n for n in offsets if n > done):
        text = query.file("offsets", str(batch_id)).read_text() or ""
        lines = text.splitlines()
        try:
            millis = int(json.loads(lines[1])["batchTimestampMs"])
        except (IndexError, KeyError, ValueError):
            return True  # an offset entry not understood: do not guess
        if lake.has_landing_ledger_entry(layout.receipt_ts_from_millis(millis)):
            return True
    return False


def clear_unfinished_first_write(query_dir: str) -> list[str]:
    """Remove what a query killed during its very first offset write left in its offsets folder.

    Spark writes each log entry to a hidden temporary file and renames it into place. Killed
    before the rename of entry 0 (a new checkpoint, or a generation's first batch after a
    rotation), the folder holds only that temporary file, and Spark 4 then refuses to start the
    query for good (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY: "offsets should be empty on batch
    0"). With no numbered entry, no batch was planned: the leftovers carry nothing. Returns the
    names removed.
    """
    offsets = Root(query_dir).folder("offsets")
    names = offsets.names()
    if any(name.isdigit() for name in names):
        return []
    leftovers = [name for name in names if name.startswith(".")]
    for name in leftovers:
        offsets.file(name).delete()
    if leftovers:
        log.warning("removed an unfinished first offset write of a killed query", folder=offsets, files=leftovers)
    return leftovers


def remove_old_generations(checkpoint: str, generation: Generation) -> None:
    """Delete the query folders of earlier generations (left by a crash right after a switch)."""
    keep = generation.query_dir(checkpoint).name
    folder = Root(checkpoint).folder()
    for name in folder.subfolder_names():
        if name != keep and (name == "query" or (name.startswith("query-g") and name[7:].isdigit())):
            folder.folder(name).delete()


def archived_days(archive: str) -> dict[date, int]:
    """{received day: files archived under it}; folders not named received=YYYY-MM-DD are not counted."""
    folder = Root(archive).folder()
    return {
        day: sum(1 for _ in folder.folder(f"{RECEIVED_KEY}={layout.event_date_text(day)}").walk_files())
        for day in folder.partition_dates(RECEIVED_KEY)
    }
