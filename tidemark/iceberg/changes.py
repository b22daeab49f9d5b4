"""Every committed version's changeset, as data: the append-only Iceberg table `sessions_changes`.

Beside `sessions_dedup` (same catalog, same namespace), one row per session a version retracted or
inserted, with the change-feed columns Delta's Change Data Feed and Spark's CHANGES clause name:

    _change_type        insert | delete | update_preimage | update_postimage (an update is a pair:
                        the session's id stays, some column changed)
    _commit_version     the version (sessions_dedup's version id of the date)
    _commit_timestamp   when that version was committed to sessions_dedup
    _previous_version   the version it replaced (null: the date's first version)
    session_id ... event_date   THE session row (tidemark/session/session_schema.py) as it was
                        (delete, update_preimage) or as it is (insert, update_postimage)

Applying a version's rows to its previous version's sessions (remove the deletes and preimages, add
the inserts and postimages) gives exactly the version's sessions (tests/test_changes_invariant.py).

How a changeset gets there, so that a consumer never sees the changes of a version that did not
commit and none is lost when a process dies between the two commits:

1. before its commit, the dedup run writes the changeset it computed from what it holds (the
   touched users' old and new sessions; a full run: the previous version's and its own) as Parquet
   into its run folder, `run=<id>/changes/` (tidemark/deduplication/changeset.py), and the counts into
   its marker (`changes`). A run killed here left nothing any reader lists.
2. the sessions commit (tidemark/iceberg/commits.py) makes the version current; a marker with a
   changeset is committed only over the version it was planned on (else the run replans), so the
   changeset is relative to the version the commit replaces.
3. `ensure` then appends the changeset to this table: the staged rows, with the commit's columns
   added, copied into one new file of the table, appended in one snapshot whose summary names the
   date, version and run (`tidemark.*`), then `run=<id>/changes/_appended.json` records the snapshot.
   Idempotent: the record, else the table's history, tells an append already made (a concurrent
   `ensure` that loses the catalog's compare-and-swap finds the winner's snapshot and stops).

Step 3 runs right after the commit, and again (a no-op when done) in every place that may follow a
process killed between 2 and 3: the next dedup run of the date before it commits (so a date's
changesets are appended in version order), and the corrected notice's recording (the dedup DAG's
notify and emit tasks), whose notice says where the changeset is (`changes.snapshot_id`).

A version written without a changeset (by an older tidemark) has none here: a consumer sees the next
changeset's `_previous_version` differ from the version it applied last, and rereads that date whole.

Pure Python (pyiceberg, pyarrow): no JVM, so the DAG's light tasks can complete it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import date
from typing import Any, Literal, TypeVar, overload

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import NestedField, StringType, TimestamptzType
from sqlalchemy.exc import IntegrityError

from tidemark.base import layout
from tidemark.base.logs import get_logger
from tidemark.base.times import parse_iso
from tidemark.iceberg import table as iceberg
from tidemark.session import session_schema
from tidemark.store.lake import Lake
from tidemark.store.locations import File, Folder
from tidemark.store.version_record import VersionRecord

log = get_logger("changes")

TABLE_NAME = "sessions_changes"
STAGED_DIR = "changes"  # inside a run's folder (not "_changes": Spark skips such a path)
APPENDED = "_appended.json"
CHANGE_TYPES = ("insert", "delete", "update_preimage", "update_postimage")
CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP, PREVIOUS_VERSION = (
    "_change_type",
    "_commit_version",
    "_commit_timestamp",
    "_previous_version",
)
META_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP, PREVIOUS_VERSION)
_META_DOCS = {
    CHANGE_TYPE: "insert, delete, update_preimage or update_postimage (an update is a pair: same session_id)",
    COMMIT_VERSION: "the version of event_date whose changeset this row is part of",
    COMMIT_TIMESTAMP: "when that version was committed to sessions_dedup",
    PREVIOUS_VERSION: "the version of event_date it replaced (null: the date's first version)",
}
SUMMARY_DATE, SUMMARY_VERSION, SUMMARY_RUN = "tidemark.event-date", "tidemark.version", "tidemark.run-id"


@dataclass(frozen=True)
class Counts:
    """A changeset's size: sessions inserted, deleted, updated (pairs of rows)."""

    inserted: int = 0
    deleted: int = 0
    updated: int = 0

    @property
    def rows(self) -> int:
        """The changeset's rows: an update is two (its preimage and postimage)."""
        return self.inserted + self.deleted + 2 * self.updated

    def to_json(self) -> dict[str, int]:
        """The counts as JSON (the keys of the fields)."""
        return asdict(self)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Counts:
        """The counts of a JSON object with (at least) the keys of the fields."""
        return cls(int(payload["inserted"]), int(payload["deleted"]), int(payload["updated"]))


@dataclass(frozen=True)
class Appended:
    """Where a committed version's changeset is: the changes table's snapshot that appended it.

    An incremental_append_scan from `parent_snapshot_id` to `snapshot_id` reads exactly it.
    """

    snapshot_id: int
    parent_snapshot_id: int | None
    counts: Counts

    def to_json(self) -> dict[str, int | None]:
        """The record as JSON: the snapshot ids and the counts."""
        return {"snapshot_id": self.snapshot_id, "parent_snapshot_id": self.parent_snapshot_id, **self.counts.to_json()}

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Appended:
        """The record of its JSON form (a run's `changes/_appended.json`)."""
        parent = payload.get("parent_snapshot_id")
        return cls(int(payload["snapshot_id"]), None if parent is None else int(parent), Counts.from_json(payload))


def identifier() -> str:
    """The changes table's identifier: sessions_dedup's namespace, `sessions_changes`.

    A renamed sessions table (TIDEMARK_TABLE=ns.name) gets ns.name_changes.
    """
    sessions = iceberg.identifier()
    if sessions == iceberg.DEFAULT_IDENTIFIER:
        return f"{sessions.split('.')[0]}.{TABLE_NAME}"
    return f"{sessions}_changes"


def root(lake: Lake) -> Folder:
    """The changes table's folder in the lake."""
    return lake.folder(TABLE_NAME)


def location(lake: Lake) -> str:
    """The changes table's location, as a URI pyiceberg and engines resolve."""
    return iceberg.file_uri(root(lake))


def staged_dir(lake: Lake, event_date: date, run_id: str) -> Folder:
    """Where a run stages its changeset before its commit."""
    return lake.run_dir(event_date, run_id).folder(STAGED_DIR)


def schema() -> Schema:
    """The changes table's Iceberg schema: the change-feed columns, then THE session columns."""
    kinds = {COMMIT_TIMESTAMP: TimestamptzType()}
    meta = [
        NestedField(900_000 + i, name, kinds.get(name, StringType()), required=False, doc=_META_DOCS[name])
        for i, name in enumerate(META_COLUMNS)
    ]
    return assign_fresh_schema_ids(Schema(*meta, *session_schema.iceberg_schema().fields))


def partition_spec(table_schema: Schema) -> PartitionSpec:
    """By event date (identity), whatever layout sessions_dedup has.

    A changeset's file holds one date, and a consumer reads a date's changesets.
    """
    source = table_schema.find_field(iceberg.PARTITION_COLUMN)
    return PartitionSpec(
        PartitionField(source_id=source.field_id, field_id=1000, transform=IdentityTransform(), name="event_date")
    )


# --- the table ----------------------------------------------------------------------------------


_T = TypeVar("_T")


def _retrying(attempt: Callable[[], _T]) -> Callable[[], _T]:
    """`attempt`, retried as every commit is, and when two processes create the table at once."""
    return iceberg.retrying_conflicts(attempt, also=(IntegrityError,))


@overload
def load(lake: Lake, create: Literal[True]) -> Table: ...


@overload
def load(lake: Lake, create: bool = False) -> Table | None: ...


def load(lake: Lake, create: bool = False) -> Table | None:
    """The lake's changes table, freshly loaded (None when it does not exist and not create)."""
    if not create and not iceberg.may_exist(lake):
        return None  # no catalog yet: no changes table either (opening it would create the file)
    cat = iceberg.catalog(lake)

    @_retrying
    def attempt() -> Table | None:
        try:
            return cat.load_table(identifier())
        except (NoSuchTableError, NoSuchNamespaceError):
            if not create:
                return None
        cat.create_namespace_if_not_exists(identifier().split(".")[0])
        table_schema = schema()
        try:
            created = cat.create_table(
                identifier(),
                table_schema,
                location=location(lake),
                partition_spec=partition_spec(table_schema),
                properties={
                    "commit.retry.num-retries": "0",  # conflicts are re-checked here (idempotency)
                    "schema.name-mapping.default": table_schema.name_mapping.model_dump_json(),
                    "format-version": "2",
                    # appends merge their manifests (pyiceberg's merge append): one per append otherwise
                    "commit.manifest-merge.enabled": "true",
                    # one metadata file per append: the oldest removed by the commit itself
                    "write.metadata.previous-versions-max": "10",
                    "write.metadata.delete-after-commit.enabled": "true",
                },
            )
        except TableAlreadyExistsError:
            return cat.load_table(identifier())
        log.info("changes table created", table=identifier(), location=created.location())
        return created

    found = attempt()
    if found is not None and found.location().rstrip("/") != location(lake).rstrip("/"):
        raise RuntimeError(f"catalog table {identifier()} lives at {found.location()}, not in lake {lake}")
    return found


def history(tbl: Table | None) -> list[tuple[Snapshot, dict[str, str]]]:
    """(snapshot, summary properties) of the table's appends still in its history, oldest first."""
    current = tbl.current_snapshot() if tbl is not None else None
    if tbl is None or current is None:
        return []
    out = [(s, s.summary.additional_properties if s.summary else {}) for s in ancestors_of(current, tbl.metadata)]
    return out[::-1]


# --- staged -> appended -------------------------------------------------------------------------


def staged_counts(lake: Lake, event_date: date, run_id: str) -> Counts:
    """The counts of a staged changeset (its _change_type column alone is read)."""
    fs, path = staged_dir(lake, event_date, run_id).at()
    files = _staged_files(lake, event_date, run_id)
    if not files:
        return Counts()
    staged = ds.dataset([f.at()[1] for f in files], filesystem=fs, format="parquet")
    column = staged.to_table(columns=[CHANGE_TYPE])[CHANGE_TYPE]
    counted = pc.value_counts(column)
    pairs = zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist(), strict=True)
    found: dict[str | None, int] = {value: int(count or 0) for value, count in pairs}
    unknown = set(found) - set(CHANGE_TYPES)
    if unknown or found.get("update_preimage", 0) != found.get("update_postimage", 0):
        raise ValueError(f"{path}: not a changeset ({found})")
    return Counts(found.get("insert", 0), found.get("delete", 0), found.get("update_preimage", 0))


def _staged_files(lake: Lake, event_date: date, run_id: str) -> list[File]:
    folder = staged_dir(lake, event_date, run_id)
    return [folder.file(n) for n in folder.names() if n.endswith(".parquet")]


def appended(lake: Lake, version: VersionRecord) -> Appended | None:
    """Where the version's changeset was appended, by its run's record (None: not recorded)."""
    payload = staged_dir(lake, version.event_date, version.run_id).file(APPENDED).read_json()
    return None if payload is None else Appended.from_json(payload)


def has_changeset(version: VersionRecord) -> bool:
    """Did the run stage a changeset (a marker of this tidemark's dedup)?"""
    return version.changes is not None


def ensure(lake: Lake, version: VersionRecord | None) -> Appended | None:
    """Append a committed version's staged changeset to the changes table unless it is there.

    Returns where it is (None: no committed version, or a version staged no changeset).
    """
    if version is None or version.commit is None or not has_changeset(version):
        return None
    event_date, run_id = version.event_date, version.run_id
    done = appended(lake, version)
    if done is not None:
        return done
    tbl = load(lake, create=True)
    found = _in_history(tbl, event_date, run_id)
    if found is None:
        found = _append(lake, tbl, version)
    staged_dir(lake, event_date, run_id).file(APPENDED).write_json_atomic(found.to_json())
    return found


def _in_history(tbl: Table | None, event_date: date, run_id: str) -> Appended | None:
    wanted = layout.event_date_text(event_date)  # summary properties are text
    for snapshot, props in reversed(history(tbl)):
        if props.get(SUMMARY_RUN) == run_id and props.get(SUMMARY_DATE) == wanted:
            return Appended(snapshot.snapshot_id, snapshot.parent_snapshot_id, Counts.from_json(_counts_of(props)))
    return None


def _counts_of(props: dict[str, str]) -> dict[str, Any]:
    return {k: props.get(f"tidemark.{k}", 0) for k in ("inserted", "deleted", "updated")}


def _append(lake: Lake, tbl: Table, version: VersionRecord) -> Appended:
    event_date, run_id = version.event_date, version.run_id
    commit = version.commit
    assert commit is not None
    counts = staged_counts(lake, event_date, run_id)
    files = _staged_files(lake, event_date, run_id)
    if version.changes is not None and Counts.from_json(version.changes) != counts:
        raise RuntimeError(
            f"the staged changeset of run {run_id} of {event_date} holds {counts}, its marker says {version.changes}"
        )
    written = _copy_with_commit(lake, tbl, files, version) if counts.rows else None
    props = {
        SUMMARY_DATE: layout.event_date_text(event_date),
        SUMMARY_VERSION: str(commit.version),
        SUMMARY_RUN: run_id,
        "tidemark.previous-version": commit.previous_version or "",
        **{f"tidemark.{k}": str(v) for k, v in counts.to_json().items()},
    }

    attempts = 0

    @_retrying
    def attempt() -> Appended:
        nonlocal attempts
        attempts += 1
        fresh = tbl if attempts == 1 else load(lake, create=True)  # a retry works on the fresh table
        found = _in_history(fresh, event_date, run_id)
        if found is not None:  # a concurrent ensure appended it first: ours is an orphan
            if written is not None:
                written.delete()
            return found
        tx = fresh.transaction()
        with tx.update_snapshot(snapshot_properties=props).merge_append() as append:
            if written is not None:
                append.append_data_file(parquet_file_to_data_file(fresh.io, fresh.metadata, iceberg.file_uri(written)))
        tx.commit_transaction()
        mine = _in_history(load(lake), event_date, run_id)
        assert mine is not None
        return mine

    result = attempt()
    log.info(
        "changeset appended",
        event_date=event_date,
        version=commit.version,
        previous=commit.previous_version,
        snapshot_id=result.snapshot_id,
        **counts.to_json(),
    )
    return result


def _copy_with_commit(lake: Lake, tbl: Table, files: list[File], version: VersionRecord) -> File:
    """The staged rows with the commit's columns, as one new Parquet file of the table.

    Copied batch by batch: a first version's changeset holds the whole date.
    """
    commit = version.commit
    assert commit is not None
    name = f"{commit.version}-{version.run_id[:12]}-{uuid.uuid4().hex[:12]}.parquet"
    target = root(lake).file("data", f"event_date={layout.event_date_text(version.event_date)}", name)
    fs, path = target.at()
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    stamp = pa.scalar(parse_iso(commit.committed_at), pa.timestamp("us", tz="UTC"))
    version_id = pa.scalar(commit.version, pa.string())
    previous = pa.scalar(commit.previous_version, pa.string())
    writer: pq.ParquetWriter | None = None
    try:
        for staged in files:
            src_fs, src = staged.at()
            with src_fs.open_input_file(src) as handle:
                for batch in pq.ParquetFile(handle).iter_batches(batch_size=16_384):
                    columns = {CHANGE_TYPE: batch.column(CHANGE_TYPE)}
                    columns[COMMIT_VERSION] = pa.repeat(version_id, batch.num_rows)
                    columns[COMMIT_TIMESTAMP] = pa.repeat(stamp, batch.num_rows)
                    columns[PREVIOUS_VERSION] = pa.repeat(previous, batch.num_rows)
                    columns.update({n: batch.column(n) for n in batch.schema.names if n != CHANGE_TYPE})
                    out = pa.table(columns)
                    if writer is None:
                        writer = pq.ParquetWriter(path, out.schema, filesystem=fs)
                    writer.write_table(out)
    finally:
        if writer is not None:
            writer.close()
    return target


def ensure_after_commit(lake: Lake, version: VersionRecord) -> None:
    """Append the version's changeset right after its commit (called by the dedup).

    Never fails the run: a changeset not appended now is appended by the next run of the date or
    the corrected notice's recording (the DAG's tasks).
    """
    try:
        ensure(lake, version)
    except Exception:  # noqa: BLE001 - the version is committed; its changeset is appended later
        log.exception(
            "changeset not appended after the commit (the next run or the DAG's notify task appends it)",
            event_date=version.event_date,
            version=version.version,
        )


# --- garbage collection (tidemark gc) -------------------------------------------------------------


@dataclass(frozen=True)
class Expired:
    """A snapshot or a file of the changes table that gc expires (or would, dry)."""

    what: str  # "changes snapshot" or "changes file" (an append that never committed)
    path: str  # the snapshot id, or the file's path relative to the table's location
    event_date: date | None
    version: str | None
    age_s: float


def gc(lake: Lake, kept: set[tuple[date, str]], retention_s: float, now_s: float, dry_run: bool) -> list[Expired]:
    """The changes table's share of `tidemark gc`.

    Its rows are never removed (append-only: every committed version's changeset stays readable by
    `_commit_version`); a snapshot that appended one is expired once its version's snapshot in
    sessions_dedup is (`kept`: the (event_date, version) pairs sessions_dedup still knows), so a
    notice's `changes.snapshot_id` stays valid exactly as long as its `table.snapshot_id`. Files no
    snapshot names (an append killed before its commit) are removed once older than the retention.
    """
    tbl = load(lake)
    snapshot = tbl.current_snapshot() if tbl is not None else None
    if tbl is None or snapshot is None:
        return []
    current = snapshot.snapshot_id
    out = []
    for snapshot, props in history(tbl):
        day_text, version = props.get(SUMMARY_DATE), props.get(SUMMARY_VERSION)
        day = None if day_text is None else layout.as_event_date(day_text)  # a summary property: text
        if snapshot.snapshot_id != current and (day, version) not in kept:
            age_s = now_s - snapshot.timestamp_ms / 1000
            out.append(Expired("changes snapshot", str(snapshot.snapshot_id), day, version, age_s))
    if out and not dry_run:
        tbl.maintenance.expire_snapshots().by_ids([int(e.path) for e in out]).commit()
        reloaded = load(lake)
        if reloaded is None:
            raise RuntimeError(f"the changes table of {lake} is gone during gc")
        tbl = reloaded
    base = location(lake).rstrip("/") + "/"
    named = {task.file.file_path[len(base) :] for task in tbl.scan().plan_files()}  # every row stays live
    local_root = root(lake).at()[1].rstrip("/") + "/"
    for info in root(lake).folder("data").walk_files():
        relative = info.path[len(local_root) :]
        age_s = now_s - info.mtime.timestamp() if info.mtime is not None else 0.0
        if relative in named or age_s < retention_s or not relative.endswith(".parquet"):
            continue
        out.append(Expired("changes file", relative, None, None, age_s))
        if not dry_run:
            root(lake).file(relative).delete()
    return out
