"""A micro-batch's input, fixed at its first attempt: the files it reads, pinned under the checkpoint.

Spark replays the last uncommitted micro-batch after a crash from the same file names (its
file-source log), not the same content: a landed file replaced between a kill and the restart would
give the replay other lines than the first attempt, which may have completed some of the batch's
receipt partitions already. So the stream never reads the landing itself: before any Spark job of a
batch, each file Spark planned for it is pinned, and the batch reads the pins.

    <checkpoint>/pinned/batch_id=N/<path relative to the landing>   the batch's files (tidemark batch id)
    <checkpoint>/pinned/batch_id=N.json   {"generation", "spark_batch_id"}: whose commit releases them

A pin is a hard link on a local disk (no copy; a file replaced by a rename leaves the pinned inode
as it was), a copy across devices or on an object store. The batch's landing ledger entry
(tidemark.ingest.landing_ledger) records each file's sha256 and the batch's input rules before the
batch writes anything; a replay reads the same pins under the recorded rules, after checking each
against its digest (`verify`): a pin that grew (a file appended to in place shares the linked
inode) is cut back to the recorded bytes; one gone or otherwise changed is not read, and the ledger
and the quarantine say so. Pins are released (`release`) once Spark's commit log holds their batch.

The batch's files and timestamp come from Spark's checkpoint without a Spark job (`planned`): the
offset log's `batchTimestampMs` (receipt_ts) and the file-source log's entries of the batch.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from dataclasses import dataclass

import pyarrow.fs as pafs

from tidemark.base import layout
from tidemark.base.logs import get_logger
from tidemark.ingest import landing
from tidemark.store.locations import File, Folder, Root

log = get_logger("stream")

PINNED_DIR = "pinned"
CHUNK = 8 << 20

MISSING = "its file was gone before the batch could pin it"
PIN_GONE = "its pinned copy was gone when the batch was replayed"
PIN_CHANGED = "its pinned copy changed before the batch was replayed: that content is quarantined"


@dataclass(frozen=True)
class PlannedBatch:
    """What Spark planned for a micro-batch.

    Its timestamp and files (path relative to the landing -> the file's URI as Spark names a line's
    file, `_metadata.file_path`).
    """

    spark_batch_id: int
    receipt_ms: int
    files: dict[str, str]


@dataclass(frozen=True)
class Pin:
    """A pinned file: its size and modification time (those of the landed file it links)."""

    path: str
    size: int
    mtime_ms: int


def planned(query_dir: str, spark_batch_id: int, landing_uri: str) -> PlannedBatch | None:
    """The batch's plan from Spark's offset and file-source logs.

    None when the query folder has no offset entry for it (a batch built by hand, not by a streaming
    query).
    """
    offsets = Root(query_dir).folder("offsets")
    text = offsets.file(str(spark_batch_id)).read_text()
    if text is None:
        return None
    lines = text.splitlines()
    receipt_ms = int(json.loads(lines[1])["batchTimestampMs"])
    upto = int(json.loads(lines[2])["logOffset"])
    previous = offsets.file(str(spark_batch_id - 1)).read_text()
    after = int(json.loads(previous.splitlines()[2])["logOffset"]) if previous else upto - 1
    files = {}
    for log_id in range(after + 1, upto + 1):
        for uri in _source_log(query_dir, log_id):
            spark_uri = "file:/" + uri[len("file:///") :] if uri.startswith("file:///") else uri
            files[landing.relative_path(landing_uri, spark_uri)] = spark_uri
    return PlannedBatch(spark_batch_id, receipt_ms, files)


def _source_log(query_dir: str, log_id: int) -> list[str]:
    """The file URIs the file source's log entry `log_id` added.

    A compacted entry holds every earlier one too: only those of `log_id` are taken.
    """
    folder = Root(query_dir).folder("sources", "0")
    text = folder.file(str(log_id)).read_text()
    if text is None:
        text = folder.file(f"{log_id}.compact").read_text()
    if text is None:
        raise FileNotFoundError(f"Spark's file-source log has no entry {log_id} under {folder}")
    out = []
    for line in text.splitlines()[1:]:
        if line.strip():
            entry = json.loads(line)
            if int(entry.get("batchId", log_id)) == log_id:
                out.append(entry["path"])
    return out


def pin_dir(checkpoint: str, batch_id: int) -> Folder:
    """The folder that holds a batch's pinned files."""
    return Root(checkpoint).folder(PINNED_DIR, f"batch_id={batch_id}")


def _manifest(checkpoint: str, batch_id: int) -> File:
    return Root(checkpoint).file(PINNED_DIR, f"batch_id={batch_id}.json")


def pin(
    checkpoint: str, batch_id: int, generation: int, landing_uri: str, plan: PlannedBatch
) -> tuple[dict[str, Pin], list[str]]:
    """Pin every file of a first attempt.

    An earlier attempt's pins, which nothing recorded, go first. Returns ({path: Pin}, paths of
    files gone from the landing already).
    """
    folder = pin_dir(checkpoint, batch_id)
    folder.delete()
    _manifest(checkpoint, batch_id).write_json_atomic(
        {"generation": generation, "spark_batch_id": plan.spark_batch_id},
    )
    fs, root = Root(landing_uri).folder().at()
    pfs, target = folder.at()
    local = isinstance(fs, pafs.LocalFileSystem) and isinstance(pfs, pafs.LocalFileSystem)
    pins, missing = {}, []
    for path in sorted(plan.files):
        source, pinned = f"{root.rstrip('/')}/{path}", f"{target}/{path}"
        try:
            found = _link(source, pinned) if local else _copy(fs, source, pfs, pinned)
        except FileNotFoundError:
            missing.append(path)
            continue
        pins[path] = Pin(path, found[0], found[1])
    if missing:
        log.warning("planned input files gone before the batch read them", batch_id=batch_id, files=missing)
    return pins, missing


def _link(source: str, pinned: str) -> tuple[int, int]:
    os.makedirs(os.path.dirname(pinned), exist_ok=True)
    try:
        os.link(source, pinned)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise FileNotFoundError(source) from exc
        shutil.copy2(source, pinned)  # another device, or a file system without hard links
    info = os.stat(pinned)
    return info.st_size, info.st_mtime_ns // 1_000_000


def _copy(fs: pafs.FileSystem, source: str, pfs: pafs.FileSystem, pinned: str) -> tuple[int, int]:
    info = fs.get_file_info(source)
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(source)
    pfs.create_dir(pinned.rsplit("/", 1)[0], recursive=True)
    pafs.copy_files(source, pinned, source_filesystem=fs, destination_filesystem=pfs)
    return int(info.size or 0), int(info.mtime_ns // 1_000_000) if info.mtime_ns is not None else 0


def pinned_file(checkpoint: str, batch_id: int, path: str) -> str | None:
    """The URI of a batch's pinned file, if it is there."""
    found = pin_dir(checkpoint, batch_id).file(path)
    return found.uri if found.exists() else None


def pinned_files(checkpoint: str, batch_id: int) -> list[str]:
    """Paths (relative to the batch's pin folder) of its pinned files."""
    folder = pin_dir(checkpoint, batch_id)
    prefix = folder.at()[1].rstrip("/") + "/"
    return sorted(info.path[len(prefix) :] for info in folder.walk_files())


def sha256(checkpoint: str, batch_id: int, path: str, limit: int | None = None) -> str | None:
    """The sha256 of a pinned file's bytes (its first `limit` bytes); None when it is gone."""
    fs, pinned = pin_dir(checkpoint, batch_id).file(path).at()
    digest, left = hashlib.sha256(), limit
    try:
        with fs.open_input_stream(pinned) as stream:
            while left is None or left > 0:
                chunk = stream.read(CHUNK if left is None else min(CHUNK, left))
                if not chunk:
                    break
                digest.update(chunk)
                left = None if left is None else left - len(chunk)
    except FileNotFoundError:
        return None
    if left:
        return None  # shorter than the recorded size: not the recorded bytes
    return digest.hexdigest()


def digests(checkpoint: str, batch_id: int, paths: list[str]) -> dict[str, str | None]:
    """{path: the SHA-256 of its pinned file}, None for a pin that is gone."""
    return {path: sha256(checkpoint, batch_id, path) for path in paths}


def restore(
    checkpoint: str,
    batch_id: int,
    generation: int,
    landing_uri: str,
    plan: PlannedBatch,
    recorded: list[landing.FileEntry],
) -> list[str]:
    """Pin again, from the landing, each recorded file whose pin is gone.

    A pin is gone when it was released after a commit that Spark's log no longer holds, or when a
    checkpoint was restored without its pins; it is pinned again when the landed file still starts
    with the recorded bytes. Returns the paths pinned again; a landed file that holds other content
    now is left to the landing (a later batch reads a reused name).
    """
    restored = []
    folder = pin_dir(checkpoint, batch_id)
    fs, root = Root(landing_uri).folder().at()
    pfs, target = folder.at()
    local = isinstance(fs, pafs.LocalFileSystem) and isinstance(pfs, pafs.LocalFileSystem)
    for record in recorded:
        path = record["path"]
        if not record.get("sha256") or folder.file(path).exists():
            continue
        source, pinned = f"{root.rstrip('/')}/{path}", f"{target}/{path}"
        try:
            _link(source, pinned) if local else _copy(fs, source, pfs, pinned)
        except FileNotFoundError:
            continue
        if sha256(checkpoint, batch_id, path, limit=record.get("size")) == record["sha256"]:
            restored.append(path)
        else:
            pfs.delete_file(pinned)
    if restored:
        manifest = _manifest(checkpoint, batch_id)
        if not manifest.exists():
            manifest.write_json_atomic({"generation": generation, "spark_batch_id": plan.spark_batch_id})
        log.warning("replayed batch: pins gone, pinned again from the landing", batch_id=batch_id, files=restored)
    return restored


def verify(
    checkpoint: str, batch_id: int, recorded: list[landing.FileEntry]
) -> tuple[dict[str, str], dict[str, bytes]]:
    """A replay's pins checked against the first attempt's ledger records ({path, size, sha256}).

    A pin holding the recorded bytes followed by more (the landed file appended to in place: they
    share the inode) is cut back to them, as a copy of its own. A pin that recorded no line (an
    empty file) is removed. Returns ({path: reason} of recorded files that cannot be read as they
    were, {path: bytes} of those of them whose pin holds other content now); those pins are removed,
    so that the batch reads exactly the recorded content that is still there.
    """
    folder = pin_dir(checkpoint, batch_id)
    fs, root = folder.at()
    wanted = {r["path"]: r for r in recorded if r.get("sha256")}
    lost: dict[str, str] = {}
    changed: dict[str, bytes] = {}
    for path in pinned_files(checkpoint, batch_id):
        if path not in wanted:
            fs.delete_file(f"{root}/{path}")
    for path, record in sorted(wanted.items()):
        pinned = f"{root}/{path}"
        if sha256(checkpoint, batch_id, path) == record["sha256"]:
            continue
        if not folder.file(path).exists():
            lost[path] = PIN_GONE
            continue
        size = record.get("size")
        if size is not None and sha256(checkpoint, batch_id, path, limit=size) == record["sha256"]:
            with fs.open_input_stream(pinned) as stream:
                data = stream.read(size)
            _replace(fs, pinned, data)
            log.warning("pinned input grew after its batch read it: cut back to the bytes read", file=path)
            continue
        with fs.open_input_stream(pinned) as stream:
            changed[path] = stream.read()
        fs.delete_file(pinned)
        lost[path] = PIN_CHANGED
    return lost, changed


def _replace(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    if isinstance(fs, pafs.LocalFileSystem):
        tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.pin.tmp"
        with open(tmp, "wb") as out:
            out.write(data)
        os.replace(tmp, path)  # a new inode: the landed file's is no longer shared
    else:
        with fs.open_output_stream(path) as out:
            out.write(data)


def release(checkpoint: str, generation: int, query_dir: str, keep: frozenset[int] = frozenset()) -> list[int]:
    """Remove the pins of every batch Spark's commit log holds, except those in `keep`.

    The current `generation`'s query folder is `query_dir`; every batch of an earlier generation is
    committed (a rotation happens only once its batches are). Returns the batch ids released.
    """
    released = []
    root = Root(checkpoint).folder(PINNED_DIR)
    commits = Root(query_dir).folder("commits")
    for name in root.names():
        value = layout.partition_value(name.removesuffix(".json"), "batch_id")
        if not (name.endswith(".json") and value is not None and value.isdigit()) or int(value) in keep:
            continue
        batch_id = int(value)
        meta = root.file(name).read_json() or {}
        if (
            int(meta.get("generation", generation)) >= generation
            and not commits.file(str(int(meta.get("spark_batch_id", -1)))).exists()
        ):
            continue
        pin_dir(checkpoint, batch_id).delete()
        root.file(name).delete()
        released.append(batch_id)
    return released
