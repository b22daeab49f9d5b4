"""The pyiceberg internals tidemark's commits depend on, alone here, each override with its reason.

No public pyiceberg API does two things the commits need:
- `CachedTransaction`: a `Transaction` whose `table_metadata` is computed once per staged update
  (reads the private `Transaction._updates`);
- `Overwrite`: the private `_OverwriteFiles` (what `Transaction.update_snapshot().overwrite()`
  returns) with `_manifests` and `_summary` replaced, to keep one manifest per half month.

They are checked for the pyiceberg releases in `PYICEBERG_SUPPORTED` only (setup.cfg pins the same
range; tests/test_pyiceberg_compat.py asserts, per override, that the internals it reads still have
the expected shape and that the base behaviour it changes is still the base behaviour). Another
pyiceberg warns at import and fails a commit loudly before it starts (`require_supported_pyiceberg`).
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterable

import pyiceberg
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile, ManifestWriter
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles

from tidemark.iceberg.partitions import buckets_spanned, day_range, manifest_bucket

PYICEBERG_SUPPORTED = ((0, 12), (0, 13))  # >=0.12,<0.13


class UnsupportedPyiceberg(RuntimeError):
    """The installed pyiceberg is outside PYICEBERG_SUPPORTED."""


class UnsupportedPyicebergWarning(UserWarning):
    """Warned at import when the installed pyiceberg is outside PYICEBERG_SUPPORTED."""


def _unsupported(installed: str) -> str | None:
    """Why `installed` is not supported (None: it is)."""
    release = tuple(int(x) for x in re.findall(r"\d+", installed)[:2])
    (low, high) = PYICEBERG_SUPPORTED
    if low <= release < high:
        return None
    return (
        f"tidemark.iceberg.compat commits through pyiceberg internals (Transaction._updates, "
        f"_OverwriteFiles._manifests and _summary) checked for pyiceberg >={'.'.join(map(str, low))},"
        f"<{'.'.join(map(str, high))} only; pyiceberg {installed} is installed. Install a supported "
        f"pyiceberg (setup.cfg, constraints.txt), or check those internals against the new version "
        f"(tests/test_pyiceberg_compat.py) and widen PYICEBERG_SUPPORTED"
    )


def require_supported_pyiceberg(installed: str | None = None) -> None:
    """Raise UnsupportedPyiceberg, naming the installed version, unless it is a supported one.

    Args:
        installed: the version to check; the installed pyiceberg's when None.
    """
    reason = _unsupported(pyiceberg.__version__ if installed is None else installed)
    if reason is not None:
        raise UnsupportedPyiceberg(reason)


# Checked at import: reading versions works on any pyiceberg, a commit refuses (see the classes).
if (_REASON := _unsupported(pyiceberg.__version__)) is not None:
    warnings.warn(_REASON, UnsupportedPyicebergWarning, stacklevel=2)


class CachedTransaction(Transaction):
    """A Transaction whose table metadata is computed once per staged update.

    Overrides `table_metadata` (a property): pyiceberg 0.12 re-applies every staged update to a deep
    copy of the table metadata on each access (about 20 per commit); with a few hundred snapshots
    the copies were most of a commit's time, and so widened the window in which another commit makes
    ours retry. The metadata changes only when an update is staged (`_updates` grows): keep one copy
    per number of staged updates.
    """

    def __init__(self, table: Table, autocommit: bool = False) -> None:
        """Open a transaction on a loaded table; refuses an unsupported pyiceberg before anything."""
        require_supported_pyiceberg()
        self._tidemark_metadata: tuple[int, TableMetadata] | None = None
        super().__init__(table, autocommit)

    @property
    def table_metadata(self) -> TableMetadata:
        """The table's metadata with the staged updates applied (cached per number of updates)."""
        cached = self._tidemark_metadata
        if cached is None or cached[0] != len(self._updates):
            cached = (len(self._updates), super().table_metadata)
            self._tidemark_metadata = cached
        return cached[1]


class Overwrite(_OverwriteFiles):
    """An overwrite that keeps one manifest per half month of event dates.

    Overrides `_manifests`: pyiceberg 0.12's overwrite carries a manifest whose entries are all
    DELETED into every later snapshot, and keeps one manifest per commit (it merges manifests on fast
    appends only, by size): the manifest list grew by one per event date forever, and with it every
    commit and scan. This one writes, for each half month it touches (`buckets`, and those of the
    files added and deleted), ONE manifest holding that half month's live files (and this snapshot's
    deletes), read from the parent's manifests that may hold it; the others are kept as they are,
    except those that hold no live file (dropped, as Java Iceberg does; older snapshots still list
    them). So a commit of D reads and writes one manifest, whatever the table's age.

    Overrides `_summary`: for a REPLACE (manifests rewritten, no file added or removed), which
    pyiceberg's summary collector refuses, the parent's totals are carried over.
    """

    def __init__(
        self,
        operation: Operation,
        transaction: Transaction,
        io: FileIO,
        snapshot_properties: dict[str, str],
        buckets: Iterable[int] = (),
    ) -> None:
        """Stage a snapshot of `operation`; `buckets`: half months to merge even if untouched."""
        self.buckets = set(buckets)
        super().__init__(operation=operation, transaction=transaction, io=io, snapshot_properties=snapshot_properties)

    def _manifests(self) -> list[ManifestFile]:
        metadata = self._transaction.table_metadata
        parent = metadata.snapshot_by_name(name=self._target_branch)
        buckets = self.buckets | {
            manifest_bucket(f.partition[0]) for f in (*self._added_data_files, *self._deleted_data_files)
        }
        writers: dict[int, ManifestWriter] = {}
        kept: list[ManifestFile] = []
        found = set()
        with contextlib.ExitStack() as stack:

            def writer(bucket: int) -> ManifestWriter:
                if bucket not in writers:
                    writers[bucket] = stack.enter_context(self.new_manifest_writer(metadata.spec()))
                return writers[bucket]

            for manifest in parent.manifests(self._io) if parent is not None else []:
                if manifest.content != ManifestContent.DATA:
                    kept.append(manifest)
                    continue
                added, existing = manifest.added_files_count, manifest.existing_files_count
                if added is not None and existing is not None and added + existing == 0:
                    continue  # no live file
                span = day_range(manifest)
                if span is not None and not buckets_spanned(span) & buckets:
                    kept.append(manifest)
                    continue
                for entry in manifest.fetch_manifest_entry(self._io, discard_deleted=True):
                    into = writer(manifest_bucket(entry.data_file.partition[0]))
                    if entry.data_file in self._deleted_data_files:
                        found.add(entry.data_file)
                        into.delete(entry)
                    else:
                        into.existing(entry)
            for data_file in self._added_data_files:
                writer(manifest_bucket(data_file.partition[0])).add_entry(
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

    def _summary(self, snapshot_properties: dict[str, str] | None = None) -> Summary:
        if self._operation != Operation.REPLACE:
            return super()._summary(snapshot_properties or {})
        parent = (
            None
            if self._parent_snapshot_id is None
            else self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)
        )
        parent_props = parent.summary.additional_properties if parent is not None and parent.summary else {}
        totals = {k: v for k, v in parent_props.items() if k.startswith("total-")}
        return Summary(operation=Operation.REPLACE, **totals, **(snapshot_properties or {}))
