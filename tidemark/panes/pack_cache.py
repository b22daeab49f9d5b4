"""Packs: a derived, rebuildable copy of many of one date's receipt partitions' panes.

A pack is a derived, immutable, rebuildable copy of the panes of an explicit set of one date's
receipt partitions, so that a full dedup of a date with thousands of receipts reads a few files,
not thousands. This module is the pack's format: choosing, reading, writing and removing packs;
the pass that packs closed dates ahead is tidemark/panes/pack_maintenance.py.

Why: a 10 s trigger writes 8,640 receipt partitions a day for today's date alone, and reading them
costs ~1 ms of pyarrow per tiny file whatever the reader (BENCHMARKS.md section 7). The receipt
partitions themselves stay immutable (never rewritten, never deleted here): a pack is a cache beside
them, `<lake>/_packs/event_date=D/pack=<id>/` (tidemark.store.lake), and deleting it changes no result.

- Written by a full dedup of D that has just read the panes of at least PACK_AT of D's receipt
  partitions from their folders (tidemark.deduplication.dedup): from the panes it already holds, data first, then
  the manifest naming exactly the receipt partitions (receipt_ts) and the files it holds. A reader
  trusts a pack only through its manifest: a pack killed mid-write (no manifest) is ignored, and
  `tidemark gc` removes it once it is older than its retention.
- Each writer picks a fresh pack id: two concurrent dedups write two complete packs, never one
  folder together. A reader takes the pack that holds the most of the receipt partitions it needs,
  among those whose receipts it needs all of, and reads every other needed partition from its own
  folder: a receipt registered after the pack (even with an older receipt_ts) is never missed, and
  the panes read are the same rows as without the pack.
- A manifest records the columns it was written with; a pack of other columns is not used.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow.parquet as pq

from tidemark.base import layout, times
from tidemark.base.logs import get_logger
from tidemark.panes.receipt_index import PartitionKey
from tidemark.store.lake import Lake
from tidemark.store.locations import File, Folder

if TYPE_CHECKING:  # a type only: pyspark is imported where a pack is written
    from pyspark.sql import DataFrame

P = TypeVar("P", bound=PartitionKey)

log = get_logger("packs")

# From how many of a date's receipt partitions read one by one a full dedup writes a pack, and from
# how many needed partitions of a date a reader looks for one. Measured (BENCHMARKS.md section 7):
# the tiny files cost ~1 ms each to read (8,640: ~9 s of a 17 s full dedup, quiet), writing a
# 135k-pane pack costs about as much as reading 1-3k of them, and every later full dedup of the date
# saves their cost again; below a few hundred the saving is lost in the noise. An incremental
# correction's few new receipts stay below it: they never pay a listing of the packs.
PACK_AT = 500
FORMAT = 1
# Files per pack, side by side: Spark reads them in as many tasks (local[2]: two cores busy).
FILES = 2


@dataclass(frozen=True)
class Pack:
    """A complete pack, as its manifest describes it."""

    event_date: date
    pack_id: str
    receipts: frozenset[str]  # the receipt_ts of every receipt partition whose panes it holds
    files: tuple[str, ...]
    rows: int
    created_at: str

    def file_uris(self, lake: Lake) -> list[File]:
        """The pack's data files."""
        return [lake.pack_file(self.event_date, self.pack_id, name) for name in self.files]


def new_pack_id() -> str:
    """A fresh pack id (32 hex digits): each writer its own folder."""
    return uuid.uuid4().hex


def listed(lake: Lake, event_date: date) -> list[str]:
    """Every pack folder of a date, complete or not (checked ids only)."""
    return lake.packs_dir(event_date).partition_values("pack", layout.check_run_id)


def complete(lake: Lake, event_date: date, columns: str | None = None, ids: list[str] | None = None) -> list[Pack]:
    """The packs of a date whose manifest exists (and, when given, that hold `columns`).

    `ids`: the date's pack folders when the caller listed them already.
    """
    ids = listed(lake, event_date) if ids is None else ids
    if not ids:
        return []
    with ThreadPoolExecutor(max_workers=8) as pool:  # a bucket: the manifests' round trips in parallel
        manifests = list(pool.map(lambda pack_id: lake.pack_manifest(event_date, pack_id).read_json(), ids))
    packs = [
        _from_manifest(event_date, pack_id, manifest, columns) for pack_id, manifest in zip(ids, manifests, strict=True)
    ]
    return [pack for pack in packs if pack is not None]


def _from_manifest(
    event_date: date, pack_id: str, manifest: dict[str, Any] | None, columns: str | None = None
) -> Pack | None:
    """The pack a manifest describes; None when there is none or this reader cannot use it.

    Or one this reader cannot use (another format, other columns, not readable as one): such a
    pack is skipped, never half-trusted.
    """
    if (
        not manifest
        or manifest.get("format") != FORMAT
        or manifest.get("event_date") != layout.event_date_text(event_date)
    ):
        return None
    if columns is not None and manifest.get("columns") != columns:
        return None
    try:
        return Pack(
            event_date,
            pack_id,
            frozenset(layout.check_receipt_ts(ts) for ts in manifest["receipts"]),
            tuple(str(name) for name in manifest["files"]),
            int(manifest["rows"]),
            str(manifest["created_at"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("pack manifest not usable: pack ignored", event_date=event_date, pack_id=pack_id, error=str(exc))
        return None


def best(packs: list[Pack], needed: set[str]) -> Pack | None:
    """The pack holding the most of `needed` (receipt_ts), among those holding nothing else.

    A pack with a receipt partition the reader does not want would add its panes.
    """
    usable = [p for p in packs if p.receipts and p.receipts <= needed]
    return max(usable, key=_preference, default=None)


def _preference(pack: Pack) -> tuple[int, str, str]:
    """Which of two packs a reader prefers (the larger, then the newer).

    `tidemark gc` removes a pack only in favour of one preferred to it.
    """
    return (len(pack.receipts), pack.created_at, pack.pack_id)


def cover(lake: Lake, partitions: list[P], columns: str) -> tuple[list[Pack], list[P]]:
    """(packs to read, partitions still to read from their folders) for reading `partitions`.

    A date's packs are looked for only when PACK_AT of its partitions are needed.
    """
    needed_of: dict[date, set[str]] = {}  # receipt_ts by event date
    for p in partitions:
        needed_of.setdefault(p.event_date, set()).add(p.receipt_ts)
    chosen: list[Pack] = []
    for event_date, needed in sorted(needed_of.items()):
        if len(needed) >= PACK_AT:
            pack = best(complete(lake, event_date, columns), needed)
            if pack is not None:
                chosen.append(pack)
    packed = {(p.event_date, ts) for p in chosen for ts in p.receipts}
    return chosen, [p for p in partitions if (p.event_date, p.receipt_ts) not in packed]


def write(
    lake: Lake, event_date: date, panes: DataFrame, receipts: list[str], columns: str, files: int = FILES
) -> Pack:
    """Write the panes of D's receipt partitions `receipts` as a new pack.

    `panes`: a DataFrame of `columns`, every pane of those partitions and nothing else. The
    data goes first, then the manifest (atomically).
    """
    # pyspark: only where Spark writes a pack, never at the CLI's start
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    started = time.monotonic()
    pack_id = new_pack_id()
    folder = lake.pack_dir(event_date, pack_id)
    schema = StructType.fromDDL(columns)
    assert isinstance(schema, StructType)  # a column list's DDL parses to a struct
    names = schema.fieldNames()
    panes = panes.where(F.col("event_date") == F.lit(layout.event_date_text(event_date))).select(*names)
    # A few files, side by side (coalesce: no shuffle); "error" refuses a folder that already exists.
    panes.coalesce(files).write.mode("error").parquet(folder)
    written = folder.data_file_names()
    pack = write_manifest(
        lake, event_date, pack_id, receipts, written, _rows(lake, event_date, pack_id, written), columns
    )
    seconds = round(time.monotonic() - started, 3)
    log.info(
        "pack written", event_date=event_date, pack_id=pack_id, receipts=len(receipts), rows=pack.rows, seconds=seconds
    )
    return pack


def write_manifest(
    lake: Lake, event_date: date, pack_id: str, receipts: list[str], files: list[str], rows: int, columns: str
) -> Pack:
    """Write a pack's manifest, the last step of every pack writer.

    The pack's manifest, written last by every pack writer (the dedup's above, the maintenance
    pass's: tidemark/panes/pack_maintenance.py) once its data files are whole: the pack exists
    for readers from here on, whole; a writer killed before it leaves a folder readers ignore
    and gc removes.
    """
    manifest = {
        "format": FORMAT,
        "event_date": layout.event_date_text(event_date),
        "pack_id": layout.check_run_id(pack_id),
        "receipts": sorted(layout.check_receipt_ts(ts) for ts in receipts),
        "files": sorted(files),
        "rows": int(rows),
        "columns": columns,
        "created_at": times.now_iso_z(),
    }
    lake.pack_manifest(event_date, pack_id).write_json_atomic(manifest)
    pack = _from_manifest(event_date, pack_id, manifest)
    assert pack is not None
    return pack


def _rows(lake: Lake, event_date: date, pack_id: str, names: list[str]) -> int:
    """Rows of the written files, from their footers (a count without another Spark job)."""
    total = 0
    for name in names:
        fs, path = lake.pack_file(event_date, pack_id, name).at()
        with fs.open_input_file(path) as handle:
            total += pq.ParquetFile(handle).metadata.num_rows
    return total


@dataclass(frozen=True)
class Leftover:
    """A pack `tidemark gc` may remove, and why."""

    event_date: date
    pack_id: str
    why: str  # "incomplete" (no usable manifest) or "superseded" (another pack holds all it holds)
    age_s: float


def leftovers(lake: Lake, retention_s: float, age_s: Callable[[Folder], float | None], now: datetime) -> list[Leftover]:
    """The packs `tidemark gc` may remove: incomplete, or superseded for longer than the retention.

    Packs `tidemark gc` may remove: folders without a usable manifest whose newest write is
    older than the retention (a writer still at work is young), and packs whose receipts a newer
    pack holds all of, once that newer pack is older than the retention (a reader that listed
    the packs before it appeared has long finished). `age_s`: seconds since the newest write
    below a folder (gc's).
    """
    found = []
    for event_date in lake.packs_root().event_dates():
        ids = listed(lake, event_date)
        packs = {p.pack_id: p for p in complete(lake, event_date, ids=ids)}
        for pack_id in ids:
            if pack_id in packs:
                continue
            age = age_s(lake.pack_dir(event_date, pack_id))
            if age is not None and age >= retention_s:
                found.append(Leftover(event_date, pack_id, "incomplete", age))
        for pack in packs.values():
            newer = [
                other
                for other in packs.values()
                if other is not pack and pack.receipts <= other.receipts and _preference(other) > _preference(pack)
            ]
            if newer:
                age = min((now - times.parse_iso(o.created_at)).total_seconds() for o in newer)
                if age >= retention_s:
                    found.append(Leftover(event_date, pack.pack_id, "superseded", age))
    return found


def remove(lake: Lake, leftover: Leftover) -> None:
    """Remove a leftover pack: its manifest first, then its folder.

    The manifest goes first: a half-removed pack is then plainly incomplete, never half-read.
    """
    lake.pack_manifest(leftover.event_date, leftover.pack_id).delete()
    lake.pack_dir(leftover.event_date, leftover.pack_id).delete()
