"""tidemark/iceberg/publish.py as main had it at 5f76019 (before issue 27 item 5: the current version in a
table property tidemark.current.D per date), kept to write the "older table" the migration tests
migrate. Not imported by tidemark.

Publishing a deduplicated version of an event date into the Iceberg table, and what is current.

A dedup run writes its Parquet files (Spark) into a folder of its own, then a marker, then commits:

    sessions_dedup/data/event_date=D/run=<run_id>/part-*.parquet    the run's sessions of D
    sessions_dedup/data/event_date=D/run=<run_id>/_tidemark_run.json what the run included (receipts,
                                                                      sessions, hi, gap, affected dates)

`commit` is ONE Iceberg commit (pyiceberg, optimistic, compare-and-swap in the catalog) that
- replaces D's data files by the run's files (an `overwrite` snapshot; other dates untouched),
- records in the snapshot summary the event date, the version, the run, the receipts included,
- sets the table property `tidemark.current.D` = {"version", "run_id", ...}.

So the table's current metadata is the one truth of what is current: the property names the run
whose marker holds the receipts the dedup's planning needs, and it changes in the same atomic
commit as the files. A run killed before the commit leaves an unreferenced folder (gc removes it;
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

import json
import re
import uuid
from dataclasses import dataclass
from datetime import date, timedelta

from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_random_exponential

from tidemark.base import layout
from tidemark.base.logs import get_logger
from tidemark.base.times import from_micros, iso_z, now_iso_z
from tidemark.iceberg import table as iceberg
from tidemark.session import rules_record
from tidemark.store.lake import RUN_MARKER, Lake, run_folder

log = get_logger("publish")

CURRENT_PREFIX = "tidemark.current."
SUMMARY_PREFIX = "tidemark."
_EPOCH_DAY = date(1970, 1, 1)


class Superseded(RuntimeError):
    """The current version holds receipts this run lacks: its plan is stale, it must replan."""


@dataclass(frozen=True)
class Outcome:
    committed: bool  # this run's version became current
    current: dict  # the date's current version after the attempt (see current_version)
    attempts: int = 1  # commit attempts (more than one: conflicts retried on a fresh snapshot)


def new_run_id() -> str:
    return uuid.uuid4().hex


def write_marker(lake: Lake, marker: dict) -> None:
    lake.write_json_atomic(lake.run_marker(marker["event_date"], marker["run_id"]), marker)


def read_marker(lake: Lake, event_date: str, run_id: str) -> dict | None:
    return lake.read_json(lake.run_marker(event_date, run_id))


def run_files(lake: Lake, marker: dict) -> list[str]:
    """The marker's data files as URIs (names checked: never outside the run's folder)."""
    base = lake.run_dir(marker["event_date"], marker["run_id"])
    out = []
    for name in marker["files"]:
        if "/" in name or name.startswith(".") or not name.endswith(".parquet"):
            raise ValueError(f"run marker of {marker['event_date']} names a file outside its folder: {name!r}")
        out.append(iceberg.file_uri(layout.join(base, name)))
    return out


# --- what is current ------------------------------------------------------------------------------


def current_record(tbl, event_date: str) -> dict | None:
    """What this loaded table's properties hold for a date's current version (its run id and
    version), or None: no marker read."""
    value = tbl.properties.get(CURRENT_PREFIX + event_date)
    return None if value is None else json.loads(value)


def current_of(lake: Lake, tbl, event_date: str) -> dict | None:
    """The current version of a date according to this loaded table (see current_version)."""
    record = current_record(tbl, event_date)
    if record is None:
        return None
    marker = read_marker(lake, event_date, record["run_id"])
    if marker is None:
        raise RuntimeError(
            f"the table names run {record['run_id']} current for {event_date} but its marker "
            f"{lake.run_marker(event_date, record['run_id'])} is missing"
        )
    return {**marker, **record}


def current_version(lake: Lake, event_date: str) -> dict | None:
    """The current version of an event date, from the table's current metadata, or None before the
    first publish. A dict with at least: event_date, version, run_id, receipts (sorted
    'YYYY-MM-DD/receipt_ts' keys), sessions, affected_dates, hi, gap, lo, max_receipt_ts,
    previous_version, files, created_at (the data's), committed_at."""
    event_date = layout.check_event_date(event_date)
    tbl = iceberg.load(lake)
    return None if tbl is None else current_of(lake, tbl, event_date)


# The names callers used before the table existed; the same answer.
newest_version = current_version
read_pointer = current_version


def dates_with_version(tbl) -> list[str]:
    """Every event date with a current version in this loaded table (None: no table), oldest first."""
    if tbl is None:
        return []
    return sorted(key[len(CURRENT_PREFIX) :] for key in tbl.properties if key.startswith(CURRENT_PREFIX))


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


def list_versions(lake: Lake, event_date: str) -> list[dict]:
    """The versions of a date the table still knows, oldest first: the snapshots that published
    them (each with snapshot_id, committed_at and its run's marker), and the current version even
    when gc expired the snapshot that published it."""
    event_date = layout.check_event_date(event_date)
    tbl = iceberg.load(lake)
    if tbl is None:
        return []
    out = []
    for snapshot, props in snapshot_versions(tbl, event_date):
        marker = read_marker(lake, event_date, props["tidemark.run-id"]) or {}
        out.append(
            {
                **marker,
                "event_date": event_date,
                "version": props["tidemark.version"],
                "run_id": props["tidemark.run-id"],
                "snapshot_id": snapshot.snapshot_id,
                "committed_at": _iso_ms(snapshot.timestamp_ms),
            }
        )
    current = current_of(lake, tbl, event_date)
    if current is not None and all(v["run_id"] != current["run_id"] for v in out):
        out.insert(0, current)
    return out


def _iso_ms(millis: int) -> str:
    return iso_z(from_micros(millis * 1000))  # exact: no float on the way


def _next_ms(receipt_ts: str) -> str:
    return layout.format_receipt_ts(layout.parse_receipt_ts(receipt_ts) + timedelta(milliseconds=1))


# --- the commit -----------------------------------------------------------------------------------


def _conflicts():
    from pyiceberg.exceptions import CommitFailedException
    from sqlalchemy.exc import OperationalError

    return (CommitFailedException, OperationalError)


def commit(lake: Lake, marker: dict) -> Outcome:
    """Make the run's version (its marker is written, its files complete) the date's current one,
    unless the current version already includes all its receipts (Outcome.committed False).

    Raises Superseded when the current version, made under the same rules, includes receipts the
    run lacks (replan and rerun); one made under other rules is replaced (see the comment inside).
    Retries conflicting commits on a fresh snapshot; safe to call from many processes at once.
    """
    event_date = layout.check_event_date(marker["event_date"])
    run_id = layout.check_run_id(marker["run_id"])
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
        current = current_of(lake, fresh, event_date)
        if current is not None and current["run_id"] == run_id:
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
        ours, theirs = set(marker["receipts"]), set(current["receipts"]) if current else set()
        if current is not None and rules_record.same_rules(marker, current):
            if ours <= theirs:
                return Outcome(False, current)
            if not theirs <= ours:
                raise Superseded(
                    f"{event_date}: the current version {current['version']} includes "
                    f"{len(theirs - ours)} receipt partition(s) run {run_id} did not read"
                )
        version = marker["max_receipt_ts"]
        if current is not None and current["version"] >= version:
            # Same highest receipt but more receipts (an older batch's partition completed late):
            # a later id, so that version ids keep growing with completeness.
            version = _next_ms(current["version"])
        record = {
            "version": version,
            "run_id": run_id,
            "previous_version": current and current["version"],
            "committed_at": now_iso_z(),
        }
        _commit_once(fresh, event_date, marker, record, data_files)
        return Outcome(True, {**marker, **record})

    found = attempt()
    outcome = Outcome(found.committed, found.current, attempts)
    if outcome.committed:
        log.info(
            "version committed",
            event_date=event_date,
            version=outcome.current["version"],
            run_id=run_id,
            previous=outcome.current.get("previous_version"),
            files=len(data_files),
            sessions=marker.get("sessions"),
            attempts=attempts,
        )
    else:
        log.info(
            "version not committed: the current one covers it",
            event_date=event_date,
            current=outcome.current["version"],
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


def _commit_once(tbl, event_date: str, marker: dict, record: dict, data_files: list) -> None:
    from pyiceberg.expressions import EqualTo

    date_filter = EqualTo(iceberg.PARTITION_COLUMN, event_date)  # type: ignore[call-arg, arg-type]  # pyiceberg's positional form
    replaced = [task.file for task in tbl.scan(row_filter=date_filter).plan_files()]
    summary = {
        "tidemark.event-date": event_date,
        "tidemark.version": record["version"],
        "tidemark.run-id": record["run_id"],
        "tidemark.previous-version": record["previous_version"] or "",
        "tidemark.receipts": str(len(marker["receipts"])),
        "tidemark.max-receipt-ts": marker["max_receipt_ts"],
        "tidemark.sessions": str(marker["sessions"]),
        "tidemark.affected-dates": ",".join(marker.get("affected_dates", [])),
        "tidemark.gap": marker.get("gap", ""),
        "tidemark.marker": f"{run_folder(event_date, record['run_id'])}/{RUN_MARKER}",
    }
    from pyiceberg.table.snapshots import Operation

    tx = _transaction_class()(tbl)
    operation = Operation.OVERWRITE if tbl.current_snapshot() is not None else Operation.APPEND
    with _Overwrite(operation=operation, transaction=tx, io=tbl.io, snapshot_properties=summary) as overwrite:
        for data_file in replaced:
            overwrite.delete_data_file(data_file)
        for data_file in data_files:
            overwrite.append_data_file(data_file)
    tx.set_properties(**{CURRENT_PREFIX + event_date: json.dumps(record, sort_keys=True)})
    tx.commit_transaction()


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
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    class Overwrite(_OverwriteFiles):
        """pyiceberg 0.12's overwrite (what `update_snapshot().overwrite()` returns) carries a
        manifest whose entries are all DELETED into every later snapshot, so the manifest list grows
        by one per commit, and with it the cost of every commit and every scan. Drop the manifests
        that hold no live file, as Java Iceberg does (older snapshots still list them)."""

        def _existing_manifests(self):
            return [
                m
                for m in super()._existing_manifests()
                if m.added_files_count is None
                or m.existing_files_count is None
                or m.added_files_count + m.existing_files_count > 0
            ]

    return Overwrite


def _Overwrite(**kwargs):  # noqa: N802 - builds the class on first use (pyiceberg imported lazily)
    global _OVERWRITE
    if _OVERWRITE is None:
        _OVERWRITE = _overwrite_class()
    return _OVERWRITE(**kwargs)


_OVERWRITE = None
