"""Publishing a deduplicated version of an event date into the Iceberg table, and what is current.

A dedup run writes its Parquet files (Spark) into a folder of its own, then a marker, then commits:

    sessions_dedup/data/event_date=D/run=<run_id>/part-*.parquet    the run's sessions of D
    sessions_dedup/data/event_date=D/run=<run_id>/_tidemark_run.json what the run included (receipts,
                                                                      sessions, hi, gap, affected dates)

`commit` is ONE Iceberg commit (pyiceberg, optimistic, compare-and-swap in the catalog) that
- replaces D's data files by the run's files and its version file (a zero-row Parquet file in the
  run's folder named `_tidemark_version_<version>_<previous|first>_<committed_at>.parquet`: an
  `overwrite` snapshot; other dates untouched), D's half month of manifests merged into one,
- records in the snapshot summary the event date, the version, the run, the receipts included.

So the table's current snapshot is the one truth of what is current: D's live files name the run
(their folder) whose marker holds the receipts the dedup's planning needs, and the version record
(the version file's name), and they change in the same atomic commit. No table property per date
(tables written before issue 27 have `tidemark.current.D`: read while present, see `maintain`). A run killed before the commit leaves an unreferenced folder (gc removes it;
the rerun recomputes); killed after, the rerun finds its receipts covered.

Conflicts (another run committed first, any date) are retried on a freshly loaded table, and each
attempt checks again, on that fresh state, that it does not replace a version made under the same
rules holding receipts this run lacks: the newest complete version wins, whatever the order the runs
finish in. Complete means complete for the version's own plan under its own rules, so a version
made under rules the lake no longer has is replaced whatever it read (a migration's plan may need
fewer receipts). The version id (the highest receipt_ts included, or the current id + 1 ms when that
is not higher) is chosen in the same attempt, so two runs of one date can never publish the same id.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import uuid
from dataclasses import dataclass
from datetime import date, timedelta

from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_random_exponential

from tidemark.base import layout
from tidemark.base.logs import get_logger
from tidemark.base.times import from_micros, iso_z, now_iso_z, parse_iso
from tidemark.iceberg import table as iceberg
from tidemark.session import rules_record
from tidemark.store.lake import RUN_MARKER, Lake, run_folder
from tidemark.store.version_record import MARKER_KEYS, Commit, VersionRecord

log = get_logger("publish")

CURRENT_PREFIX = "tidemark.current."
SUMMARY_PREFIX = "tidemark."
_EPOCH_DAY = date(1970, 1, 1)


class Superseded(RuntimeError):
    """The current version holds receipts this run lacks: its plan is stale, it must replan."""


@dataclass(frozen=True)
class Outcome:
    committed: bool  # this run's version became current
    current: VersionRecord  # the date's current version after the attempt (see current_version)
    attempts: int = 1  # commit attempts (more than one: conflicts retried on a fresh snapshot)


def new_run_id() -> str:
    return uuid.uuid4().hex


def write_marker(lake: Lake, marker: VersionRecord) -> None:
    lake.write_json_atomic(lake.run_marker(marker.event_date_text, marker.run_id), marker.to_marker())


def read_marker(lake: Lake, event_date: str, run_id: str, commit: Commit | None = None) -> VersionRecord | None:
    """A run's marker (None: not written), with `commit`, the table's record of it, when known."""
    payload = lake.read_json(lake.run_marker(event_date, run_id))
    return None if payload is None else VersionRecord.from_marker(payload, commit)


def run_files(lake: Lake, marker: VersionRecord) -> list[str]:
    """The marker's data files as URIs (names checked: never outside the run's folder)."""
    base = lake.run_dir(marker.event_date_text, marker.run_id)
    out = []
    for name in marker.files:
        if "/" in name or name.startswith(".") or not name.endswith(".parquet"):
            raise ValueError(f"run marker of {marker.event_date} names a file outside its folder: {name!r}")
        out.append(iceberg.file_uri(layout.join(base, name)))
    return out


# --- what is current ------------------------------------------------------------------------------
#
# The current version of a date is read from the date's live files in the table's current snapshot:
# every commit adds, beside the run's data files, one zero-row data file named for the version,
#
#     event_date=D/run=<run_id>/_tidemark_version_<version>_<previous version|first>_<committed_at>.parquet
#
# so the live files of D name the run (its folder) and the version record, and the run's immutable
# marker has the rest. A version with no session is findable the same way. Tables written before
# (issue 27) hold the record in a table property `tidemark.current.D` instead: it is read when present
# (it wins: only a commit of that older code sets it, and a commit of this code removes it), removed
# at the date's next commit, and `migrate_current` (run by `tidemark gc`) moves the rest.

VERSION_FILE_PREFIX = "_tidemark_version_"
_VERSION_FILE = re.compile(r"^_tidemark_version_([0-9TZ]+)_([0-9TZ]+|first)_([0-9TZ]+)\.parquet$")
# The metadata log (earlier metadata files, listed in every metadata file) is capped at 100 entries
# by default: ~18 KB of every metadata file once the table has 100 commits, which a young table does
# not have. gc removes the earlier metadata files after its retention anyway, so the log's entries
# beyond a few name files already gone: keep 10 (one table property, set by the first commit).
METADATA_LOG_KEY = "write.metadata.previous-versions-max"
METADATA_LOG_MAX = "10"
_LIVE_CACHE: dict[tuple, dict] = {}
_LIVE_LOCK = threading.Lock()  # (metadata location, snapshot id) -> {day: [DataFile]}: immutable


def version_file_name(record: Commit) -> str:
    committed = layout.format_receipt_ts(parse_iso(record.committed_at))
    return f"{VERSION_FILE_PREFIX}{record.version}_{record.previous_version or 'first'}_{committed}.parquet"


def _record_of_files(files: list) -> Commit | None:
    """The version record a date's live files name (None: no version file among them)."""
    for data_file in files:
        folder, _, name = data_file.file_path.rpartition("/")
        found = _VERSION_FILE.match(name)
        if found:
            version, previous, committed = found.groups()
            return Commit(
                version=version,
                run_id=layout.check_run_id(layout.partition_value(folder.rpartition("/")[2], "run")),
                previous_version=None if previous == "first" else previous,
                committed_at=iso_z(layout.parse_receipt_ts(committed)),
            )
    if files:
        raise RuntimeError(
            f"the table's live files {files[0].file_path} ... name no version (no {VERSION_FILE_PREFIX}* file "
            f"and no {CURRENT_PREFIX}<date> property): written by something other than tidemark.iceberg.publish"
        )
    return None


def _day(event_date: str) -> int:
    return (date.fromisoformat(event_date) - _EPOCH_DAY).days


def _date(day: int) -> str:
    return (_EPOCH_DAY + timedelta(days=day)).isoformat()


def _day_range(manifest) -> tuple[int, int] | None:
    """The event dates (as days) a manifest's partition summary spans; None when it does not say."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import DateType

    summary = (manifest.partitions or [None])[0]
    if summary is None or summary.lower_bound is None or summary.upper_bound is None:
        return None
    # a DateType value decodes to its day number (pyiceberg's stubs type from_bytes' result loosely)
    return int(from_bytes(DateType(), summary.lower_bound)), int(from_bytes(DateType(), summary.upper_bound))


def live_files(tbl, event_date: str | None = None) -> dict[int, list]:
    """{day: the live DataFiles of that event date} in the loaded table's current snapshot: of one
    date (only the manifests whose partition range holds it are read: one, manifests being merged by
    half month) or of every date (each manifest read once, kept for this metadata file)."""
    snapshot = tbl.current_snapshot() if tbl is not None else None
    if snapshot is None:
        return {}
    key = (tbl.metadata_location, snapshot.snapshot_id)
    cached = _LIVE_CACHE.get(key)
    if cached is not None:
        if event_date is None:
            return cached
        return {_day(event_date): cached[_day(event_date)]} if _day(event_date) in cached else {}
    wanted = None if event_date is None else _day(event_date)
    out: dict[int, list] = {}
    for manifest in snapshot.manifests(tbl.io):
        span = _day_range(manifest)
        if wanted is not None and span is not None and not span[0] <= wanted <= span[1]:
            continue
        for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True):
            day = entry.data_file.partition[0]
            if wanted is None or day == wanted:
                out.setdefault(day, []).append(entry.data_file)
    if event_date is None:
        with _LIVE_LOCK:
            while len(_LIVE_CACHE) >= 4:
                _LIVE_CACHE.pop(next(iter(_LIVE_CACHE)))
            _LIVE_CACHE[key] = out
    return out


def current_records(tbl) -> dict[str, Commit]:
    """{event date: the commit of its current version (version, run_id, previous_version,
    committed_at)} of every date with a version in this loaded table (every manifest read once)."""
    if tbl is None:
        return {}
    out = {
        key[len(CURRENT_PREFIX) :]: Commit.from_json(json.loads(value))  # a table written before issue 27
        for key, value in tbl.properties.items()
        if key.startswith(CURRENT_PREFIX)
    }
    for day, files in live_files(tbl).items():
        if _date(day) not in out and (record := _record_of_files(files)) is not None:
            out[_date(day)] = record
    return dict(sorted(out.items()))


def current_record(tbl, event_date: str, files: list | None = None) -> Commit | None:
    """What this loaded table holds for a date's current version (its run id and version), or
    None: no marker read. `files`: the date's live files when the caller has them."""
    value = tbl.properties.get(CURRENT_PREFIX + event_date)
    if value is not None:
        return Commit.from_json(json.loads(value))
    if files is None:
        files = live_files(tbl, event_date).get(_day(event_date), [])
    return _record_of_files(files)


def current_of(lake: Lake, tbl, event_date: str, files: list | None = None) -> VersionRecord | None:
    """The current version of a date according to this loaded table (see current_version)."""
    record = current_record(tbl, event_date, files)
    if record is None:
        return None
    marker = read_marker(lake, event_date, record.run_id, record)
    if marker is None:
        raise RuntimeError(
            f"the table names run {record.run_id} current for {event_date} but its marker "
            f"{lake.run_marker(event_date, record.run_id)} is missing"
        )
    return marker


def current_version(lake: Lake, event_date: date | str) -> VersionRecord | None:
    """The current version of an event date, from the table's current metadata, or None before the
    first publish: its run's marker and its commit (version, previous_version, committed_at).
    Text from a caller outside the typed path is parsed here, once (as_event_date)."""
    text = layout.event_date_part(event_date)
    tbl = iceberg.load(lake)
    return None if tbl is None else current_of(lake, tbl, text)


def dates_with_version(tbl) -> list[str]:
    """Every event date with a current version in this loaded table (None: no table), oldest first."""
    return sorted(current_records(tbl))


def list_dedup_dates(lake: Lake) -> list[str]:
    """Every event date with a current version, oldest first."""
    return dates_with_version(iceberg.load(lake))


def snapshot_versions(tbl, event_date: str | None = None) -> list[tuple]:
    """(snapshot, summary fields) of the tidemark commits still in the table's history, oldest first."""
    from pyiceberg.table.snapshots import ancestors_of

    out = []
    for snapshot in ancestors_of(tbl.current_snapshot(), tbl.metadata):
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if event_date is None or props.get("tidemark.event-date") == event_date:
            out.append((snapshot, props))
    return out[::-1]


def list_versions(lake: Lake, event_date: date | str) -> list[VersionRecord]:
    """The versions of a date the table still knows, oldest first: the snapshots that published
    them (each with snapshot_id, committed_at and its run's marker), and the current version even
    when gc expired the snapshot that published it."""
    text = layout.event_date_part(event_date)  # a date passes, text is parsed
    tbl = iceberg.load(lake)
    if tbl is None:
        return []
    out = []
    for snapshot, props in snapshot_versions(tbl, text):
        out.append(snapshot_record(lake, text, snapshot, props))
    current = current_of(lake, tbl, text)
    if current is not None and all(v.run_id != current.run_id for v in out):
        out.insert(0, current)
    return out


def snapshot_record(lake: Lake, event_date: str, snapshot, props: dict) -> VersionRecord:
    """The version a tidemark snapshot published (its summary `props`), with its run's marker; a
    marker gc removed leaves the record of the commit alone (every marker key absent)."""
    commit = Commit(
        version=props["tidemark.version"],
        run_id=layout.check_run_id(props["tidemark.run-id"]),
        previous_version=props.get("tidemark.previous-version") or None,
        committed_at=_iso_ms(snapshot.timestamp_ms),
        snapshot_id=snapshot.snapshot_id,
    )
    marker = read_marker(lake, event_date, commit.run_id, commit)
    if marker is not None:
        return marker
    return VersionRecord(
        event_date=layout.as_event_date(event_date),
        run_id=commit.run_id,
        commit=commit,
        absent=frozenset(MARKER_KEYS) - {"event_date", "run_id"},
    )


def _iso_ms(millis: int) -> str:
    return iso_z(from_micros(millis * 1000))  # exact: no float on the way


def _next_ms(receipt_ts: str) -> str:
    return layout.format_receipt_ts(layout.parse_receipt_ts(receipt_ts) + timedelta(milliseconds=1))


# --- the commit -----------------------------------------------------------------------------------


def _conflicts():
    from pyiceberg.exceptions import CommitFailedException
    from sqlalchemy.exc import OperationalError

    return (CommitFailedException, OperationalError)


def commit(lake: Lake, marker: VersionRecord, replace: bool = False) -> Outcome:
    """Make the run's version (its marker is written, its files complete) the date's current one,
    unless the current version already includes all its receipts (Outcome.committed False).
    `replace`: also when the current version read exactly the run's receipts (a full recomputation
    that found another result, `tidemark dedup --full`).

    Raises Superseded when the current version, made under the same rules, includes receipts the
    run lacks (replan and rerun); one made under other rules is replaced (see the comment inside).
    Retries conflicting commits on a fresh snapshot; safe to call from many processes at once.
    """
    event_date = marker.event_date_text
    run_id = layout.check_run_id(marker.run_id)
    paths = run_files(lake, marker)
    tbl = iceberg.load(lake, create=True)
    data_files = _data_files(tbl, paths, event_date)
    attempts = 0

    @retry(
        retry=retry_if_exception_type(_conflicts()),
        stop=stop_after_delay(300),
        wait=wait_random_exponential(multiplier=0.05, max=2),
        reraise=True,
    )
    def attempt() -> Outcome:
        nonlocal attempts
        attempts += 1
        # The first attempt works on the table just loaded (a stale one fails the catalog's
        # compare-and-swap like any other conflict); every retry loads it afresh.
        fresh = tbl if attempts == 1 else iceberg.load(lake)
        live = live_files(fresh, event_date).get(_day(event_date), [])  # D's files: read once
        current = current_of(lake, fresh, event_date, live)
        if current is not None and current.run_id == run_id:
            return Outcome(True, current)  # an earlier attempt of ours landed (reported lost)
        changed = rules_record.outdated(lake, marker)
        if changed:
            raise Superseded(f"{event_date}: {changed}")  # the replan takes the lake's new rules
        # "Complete" is relative to a plan, and a plan to its rules: the receipts a version needs
        # are those its own plan under its own rules holds (lo = D0 - gap, hi from its reach). So
        # the receipt sets are compared only between versions made under the same rules, where
        # they are comparable: same lo, and a replan from the current version reaches at least its
        # hi, so every receipt it read is one our replan reads (Superseded always converges). A
        # current version made under other rules is stale (ours are the lake's, checked just
        # above; on a lake without a record, the rules the run was given) and its receipts answer
        # another plan's needs: a smaller gap's plan never reads the previous day's partitions a
        # larger gap's lo took in. It is replaced whatever it read; refusing would refuse every
        # run under the lake's rules, for good (issue 33).
        ours, theirs = set(marker.receipts), set(current.receipts) if current else set()
        if current is not None and rules_record.same_rules(marker, current):
            if ours <= theirs and not (replace and ours == theirs):
                return Outcome(False, current)
            if not theirs <= ours:
                raise Superseded(
                    f"{event_date}: the current version {current.version} includes "
                    f"{len(theirs - ours)} receipt partition(s) run {run_id} did not read"
                )
        if marker.changes is not None and marker.planned_on != (current.version if current else None):
            # Its changeset (tidemark/iceberg/changes.py) is relative to the version it was planned on
            raise Superseded(f"{event_date}: run {run_id} was planned on {marker.planned_on}, not the current version")
        version = marker.max_receipt_ts
        if version is None:
            raise ValueError(f"run {run_id} of {event_date} read no receipt: nothing to commit")
        if current is not None and current.version is not None and current.version >= version:
            # Same highest receipt but more receipts (an older batch's partition completed late):
            # a later id, so that version ids keep growing with completeness.
            version = _next_ms(current.version)
        record = Commit(
            version=version,
            run_id=run_id,
            previous_version=current.version if current else None,
            committed_at=now_iso_z(),
        )
        _commit_once(lake, fresh, event_date, marker, record, data_files, live)
        return Outcome(True, marker.committed(record))

    found = attempt()
    outcome = Outcome(found.committed, found.current, attempts)
    if outcome.committed:
        log.info(
            "version committed",
            event_date=event_date,
            version=outcome.current.version,
            run_id=run_id,
            previous=outcome.current.previous_version,
            files=len(data_files),
            sessions=marker.sessions,
            attempts=attempts,
        )
    else:
        log.info(
            "version not committed: the current one covers it",
            event_date=event_date,
            current=outcome.current.version,
            run_id=run_id,
            attempts=attempts,
        )
    return outcome


def _data_files(tbl, paths: list[str], event_date: str) -> list:
    """Iceberg DataFiles of the run's Parquet files (footers read: statistics, partition value)."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    day = (date.fromisoformat(event_date) - _EPOCH_DAY).days
    out = []
    for path in paths:
        data_file = parquet_file_to_data_file(tbl.io, tbl.metadata, path)
        if data_file.partition[0] != day:
            raise ValueError(f"{path} holds sessions of another event date than {event_date}")
        out.append(data_file)
    return out


def _summary_of(event_date: str, marker: VersionRecord, record: Commit) -> dict:
    return {
        "tidemark.event-date": event_date,
        "tidemark.version": record.version,
        "tidemark.run-id": record.run_id,
        "tidemark.previous-version": record.previous_version or "",
        "tidemark.receipts": str(len(marker.receipts)),
        "tidemark.max-receipt-ts": marker.max_receipt_ts or "",
        "tidemark.sessions": str(marker.sessions),
        "tidemark.affected-dates": ",".join(marker.affected_dates),
        "tidemark.gap": marker.gap or "",
        "tidemark.marker": f"{run_folder(event_date, record.run_id)}/{RUN_MARKER}",
    }


def _commit_once(
    lake: Lake, tbl, event_date: str, marker: VersionRecord, record: Commit, data_files: list, live: list
) -> None:
    """One catalog commit: D's live files replaced by the run's files and its version file (and an
    older table's property of D removed), the manifests of D's half month merged into one."""
    from pyiceberg.table.snapshots import Operation

    version_file = _version_file(lake, tbl, event_date, record)  # before the commit: never named unwritten
    tx = _transaction_class()(tbl)
    operation = Operation.OVERWRITE if tbl.current_snapshot() is not None else Operation.APPEND
    summary = _summary_of(event_date, marker, record)
    with _Overwrite(operation=operation, transaction=tx, io=tbl.io, snapshot_properties=summary) as overwrite:
        for data_file in live:
            overwrite.delete_data_file(data_file)
        for data_file in (*data_files, version_file):
            overwrite.append_data_file(data_file)
    if CURRENT_PREFIX + event_date in tbl.properties:
        tx.remove_properties(CURRENT_PREFIX + event_date)  # a table written before issue 27
    if tbl.properties.get(METADATA_LOG_KEY) != METADATA_LOG_MAX:
        tx.set_properties(**{METADATA_LOG_KEY: METADATA_LOG_MAX})  # once per table
    tx.commit_transaction()


def _version_file(lake: Lake, tbl, event_date: str, record: Commit):
    """Write the version's zero-row data file into its run's folder; its Iceberg DataFile."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    uri = layout.join(lake.run_dir(event_date, record.run_id), version_file_name(record))
    sink = pa.BufferOutputStream()
    pq.write_table(schema_to_pyarrow(tbl.schema()).empty_table(), sink)
    body = sink.getvalue()
    fs, path = lake.locate(uri)
    with fs.open_output_stream(path) as out:
        out.write(body)
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=iceberg.file_uri(uri),
        file_format=FileFormat.PARQUET,
        partition=Record(_day(event_date)),
        file_size_in_bytes=len(body),
        record_count=0,
        column_sizes={},
        value_counts={},
        null_value_counts={},
        nan_value_counts={},
        lower_bounds={},
        upper_bounds={},
        split_offsets=None,
        sort_order_id=None,
        spec_id=tbl.metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
    )


# --- table upkeep: manifests by half month, older tables' properties ------------------------------


def _bucket(day: int) -> int:
    """The manifest bucket of an event date: half a month (the 1st to the 15th, the 16th to the end).
    A month's manifest (up to 31 dates, ~450 bytes per file) made a commit on a table a year old
    write about 1.45x the bytes of one on a week-old table (estimated from the 60-day build:
    BENCHMARKS.md section 7); half months bound it to 16 dates, and the manifest list grows by 24
    short entries a year."""
    moment = _EPOCH_DAY + timedelta(days=day)
    return (moment.year * 12 + moment.month - 1) * 2 + (moment.day > 15)


def _buckets(span: tuple[int, int]) -> set[int]:
    return set(range(_bucket(span[0]), _bucket(span[1]) + 1))


def buckets_to_merge(tbl) -> set[int]:
    """Buckets (half months, _bucket) of event dates whose files the current manifest list does not
    hold in exactly one manifest of that bucket alone (several manifests, one spanning buckets, one
    with no live file).
    Reads the manifest list only."""
    snapshot = tbl.current_snapshot() if tbl is not None else None
    if snapshot is None:
        return set()
    seen: dict[int, int] = {}
    out: set[int] = set()
    for manifest in snapshot.manifests(tbl.io):
        span = _day_range(manifest)
        if span is None:
            continue
        buckets = _buckets(span)
        if len(buckets) > 1 or (manifest.added_files_count or 0) + (manifest.existing_files_count or 0) == 0:
            out |= buckets
        for bucket in buckets:
            seen[bucket] = seen.get(bucket, 0) + 1
    return out | {bucket for bucket, n in seen.items() if n > 1}


def maintain(lake: Lake, dry_run: bool = False) -> dict:
    """Table upkeep in one commit, only when needed: merge the manifests by half month of event date (the
    commits keep them so; a table written before issue 27 has one per date) and move an older
    table's `tidemark.current.D` properties to version files (see "what is current" above). Safe
    beside running commits (a conflict retries on the fresh table). Run by `tidemark gc`.
    Returns {"buckets": half months merged, "migrated": dates moved off properties}."""

    @retry(
        retry=retry_if_exception_type(_conflicts()),
        stop=stop_after_delay(300),
        wait=wait_random_exponential(multiplier=0.05, max=2),
        reraise=True,
    )
    def attempt() -> dict:
        from pyiceberg.table.snapshots import Operation

        tbl = iceberg.load(lake)
        if tbl is None or tbl.current_snapshot() is None:
            return {"buckets": 0, "migrated": 0}
        legacy = {
            key[len(CURRENT_PREFIX) :]: Commit.from_json(json.loads(value))
            for key, value in tbl.properties.items()
            if key.startswith(CURRENT_PREFIX)
        }
        buckets = buckets_to_merge(tbl) | {_bucket(_day(d)) for d in legacy}
        done = {"buckets": len(buckets), "migrated": len(legacy)}
        if dry_run or not buckets:
            return done
        live = live_files(tbl) if legacy else {}
        added = []
        for event_date, record in sorted(legacy.items()):
            name = version_file_name(record)
            if not any(f.file_path.endswith("/" + name) for f in live.get(_day(event_date), [])):
                added.append(_version_file(lake, tbl, event_date, record))
        tx = _transaction_class()(tbl)
        operation = Operation.APPEND if added else Operation.REPLACE
        summary = {
            "tidemark.maintenance": "manifests merged by half month"
            + (", current moved to version files" if legacy else "")
        }
        with _Overwrite(operation=operation, transaction=tx, io=tbl.io, snapshot_properties=summary) as producer:
            producer.buckets = buckets
            for data_file in added:
                producer.append_data_file(data_file)
        if legacy:
            tx.remove_properties(*(CURRENT_PREFIX + d for d in legacy))
        tx.commit_transaction()
        return done

    done = attempt()
    if done["buckets"] and not dry_run:
        log.info("table maintained", merged_buckets=done["buckets"], migrated_dates=done["migrated"])
    return done


migrate_current = maintain  # the migration of a table written before issue 27 is part of the upkeep


# The commit relies on pyiceberg internals no public API offers (a Transaction subclass reading
# `_updates`, and `_OverwriteFiles`, what `update_snapshot().overwrite()` returns, with
# `_existing_manifests` replaced: the public overwrite keeps every all-deleted manifest). They are
# checked for these versions only (setup.cfg pins the same range; tests/test_publish_pyiceberg.py
# asserts the internals' shape): another pyiceberg fails the commit loudly, before it starts.
PYICEBERG_SUPPORTED = ((0, 12), (0, 13))  # >=0.12,<0.13


class UnsupportedPyiceberg(RuntimeError):
    """The installed pyiceberg is outside PYICEBERG_SUPPORTED."""


def require_supported_pyiceberg(installed: str | None = None) -> None:
    """Raise UnsupportedPyiceberg, naming the installed version, unless it is a supported one."""
    if installed is None:
        import pyiceberg

        installed = pyiceberg.__version__
    release = tuple(int(x) for x in re.findall(r"\d+", installed)[:2])
    (low, high) = PYICEBERG_SUPPORTED
    if not low <= release < high:
        raise UnsupportedPyiceberg(
            f"tidemark.iceberg.publish commits through pyiceberg internals (Transaction._updates, "
            f"_OverwriteFiles._existing_manifests) checked for pyiceberg >={'.'.join(map(str, low))},"
            f"<{'.'.join(map(str, high))} only; pyiceberg {installed} is installed. Install a supported "
            f"pyiceberg (setup.cfg, constraints.txt), or check those internals against the new version "
            f"(tests/test_publish_pyiceberg.py) and widen PYICEBERG_SUPPORTED"
        )


_TRANSACTION = None


def _transaction_class():
    global _TRANSACTION
    if _TRANSACTION is None:
        require_supported_pyiceberg()
        from pyiceberg.table import Transaction

        class CachedTransaction(Transaction):
            """pyiceberg 0.12 re-applies every staged update to a deep copy of the table metadata on
            each access of `table_metadata` (about 20 per commit); with a few hundred snapshots the
            copies were most of a commit's time, and so widened the window in which another
            commit makes ours retry. The metadata changes only when an update is staged: keep one
            copy per number of staged updates."""

            @property
            def table_metadata(self):
                cached = self.__dict__.get("_tidemark_metadata")
                if cached is None or cached[0] != len(self._updates):
                    cached = (len(self._updates), Transaction.table_metadata.fget(self))
                    self.__dict__["_tidemark_metadata"] = cached
                return cached[1]

        _TRANSACTION = CachedTransaction
    return _TRANSACTION


def _overwrite_class():
    require_supported_pyiceberg()
    from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus
    from pyiceberg.table.snapshots import Operation, Summary
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    class Overwrite(_OverwriteFiles):
        """pyiceberg 0.12's overwrite (what `update_snapshot().overwrite()` returns) carries a
        manifest whose entries are all DELETED into every later snapshot, and keeps one manifest per
        commit (it merges manifests on fast appends only, by size): the manifest list grew by one
        per event date forever, and with it every commit and scan. This one writes, for each half
        month of event dates it touches (`buckets`: by default those of the files added and
        deleted), ONE manifest holding that half month's live files (and this snapshot's deletes),
        read from the parent's manifests that may hold it; the others are kept as they are, except those
        that hold no live file (dropped, as Java Iceberg does; older snapshots still list them).
        So a commit of D reads and writes one manifest, whatever the table's age."""

        buckets: set[int] | None = None

        def _manifests(self):
            metadata = self._transaction.table_metadata
            parent = metadata.snapshot_by_name(name=self._target_branch)
            buckets = set(self.buckets or ()) | {
                _bucket(f.partition[0]) for f in (*self._added_data_files, *self._deleted_data_files)
            }
            writers: dict[int, object] = {}
            kept, found = [], set()
            with contextlib.ExitStack() as stack:

                def writer(bucket: int):
                    if bucket not in writers:
                        writers[bucket] = stack.enter_context(self.new_manifest_writer(metadata.spec()))
                    return writers[bucket]

                for manifest in parent.manifests(self._io) if parent is not None else []:
                    if manifest.content != ManifestContent.DATA:
                        kept.append(manifest)
                        continue
                    counts = (manifest.added_files_count, manifest.existing_files_count)
                    if None not in counts and sum(counts) == 0:
                        continue  # no live file
                    span = _day_range(manifest)
                    if span is not None and not _buckets(span) & buckets:
                        kept.append(manifest)
                        continue
                    for entry in manifest.fetch_manifest_entry(self._io, discard_deleted=True):
                        into = writer(_bucket(entry.data_file.partition[0]))
                        if entry.data_file in self._deleted_data_files:
                            found.add(entry.data_file)
                            into.delete(entry)
                        else:
                            into.existing(entry)
                for data_file in self._added_data_files:
                    writer(_bucket(data_file.partition[0])).add_entry(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED,
                            snapshot_id=self._snapshot_id,
                            sequence_number=None,
                            file_sequence_number=None,
                            data_file=data_file,
                        )
                    )
            missing = [f.file_path for f in self._deleted_data_files if f not in found]
            if missing:
                raise RuntimeError(f"files to replace are not live in the parent snapshot: {sorted(missing)}")
            return [writers[m].to_manifest_file() for m in sorted(writers, reverse=True)] + kept

        def _summary(self, snapshot_properties=None):
            if self._operation != Operation.REPLACE:
                return super()._summary(snapshot_properties or {})
            # Manifests rewritten, no file added or removed: pyiceberg's summaries know no REPLACE.
            parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)
            totals = {
                k: v
                for k, v in (parent.summary.additional_properties if parent and parent.summary else {}).items()
                if k.startswith("total-")
            }
            return Summary(operation=Operation.REPLACE, **totals, **(snapshot_properties or {}))

    return Overwrite


def _Overwrite(**kwargs):  # noqa: N802 - builds the class on first use (pyiceberg imported lazily)
    global _OVERWRITE
    if _OVERWRITE is None:
        _OVERWRITE = _overwrite_class()
    return _OVERWRITE(**kwargs)


_OVERWRITE = None
