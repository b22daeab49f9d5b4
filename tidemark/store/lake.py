"""The lake: one handle, opened once from a URI, that owns its filesystem and every path of its layout.

In the spirit of pyiceberg's `FileIO`/`load_file_io`: the CLI, the Spark job, the DAGs and the
function open a `Lake` from the URI they were given (`Lake.open`), and everything below them takes
the handle. It is the only place that knows the lake's folder names; tidemark.base.layout keeps the
formats of the partition values (event dates, receipt times, run ids) that go into them.

    <lake>/sessions/event_date=YYYY-MM-DD/receipt_ts=YYYYMMDDTHHMMSSmmmZ/   stream panes (immutable)
        _tidemark_receipt.json      completion marker, written last; readers skip folders without it
    <lake>/sessions_dedup/                                                  the deduplicated sessions:
        metadata/                                  an Iceberg table (tidemark.iceberg.table, tidemark.iceberg.commits)
        data/event_date=D/run=<run_id>/            one dedup run's files, its marker, its context
    <lake>/_catalog/iceberg.db, _catalog/catalog.json                      the table's local SQLite catalog, or
                                                                           the properties of a configured one
    <lake>/_quarantine/receipt_ts=<receipt_ts>/                             malformed input lines
    <lake>/_notices/{outbox,sent,pending,corrected}/                       notice outboxes (tidemark.notices)
    <lake>/_rules/rules-NNNNNN.json                                        session rules record, one per change
    <lake>/_obligations/event_date=YYYY-MM-DD/<source date>__<version>.json  reruns owed (tidemark.orchestration.obligations)
    <lake>/_receipts/reach/event_date=E/<event_date>__<receipt_ts>          receipt partitions of earlier dates whose
                                                                           sessions reach into E (tidemark.panes.receipt_index)
    <lake>/_receipts/ends/event_date=E/<receipt_ts>__<max_event_us>         every receipt partition of E with the latest end of its
                                                                           panes (planning without reading markers)
    <lake>/_receipts/arrivals/day=YYYY-MM-DD/<receipt_ts>__<event_date>   every receipt partition, by the day it was received
                                                                           (what changed since a time: tidemark.panes.receipt_index)
    <lake>/_receipts/head.json, reach_complete.json, arrivals_pruned.json  the newest fully written batch; the index's
                                                                           start; how far gc pruned the arrivals
    <lake>/_reconcile/cursor.json                                          where reconciliation's last pass stopped
    <lake>/_landing/receipt_ts=<receipt_ts>.json                           the landing ledger: files read per batch
    <lake>/_products/<product>/event_date=D/                               downstream products (tidemark.products.session_metrics)
    <lake>/_packs/event_date=D/pack=<pack_id>/part-*.parquet               a derived, rebuildable copy of some of D's
        _tidemark_pack.json         receipt partitions' panes; its manifest (written last) names them (tidemark.panes.pack_cache)

Every partition value is checked (tidemark.base.layout) before it can reach a path. The lake's small
records go through its own filesystem, resolved once (`Lake.fs`): paths under the lake are mapped to
the filesystem's paths without asking pyarrow again (which, for a bucket, builds a client each time).
"""

from __future__ import annotations

import os
import re
from datetime import date

import pyarrow.fs as pafs

from tidemark.base import layout
from tidemark.base.layout import check_receipt_ts, check_run_id, event_date_text, join
from tidemark.store import storage
from tidemark.store.locations import File, Folder, JsonRecords

SESSIONS = "sessions"
SESSIONS_DEDUP = "sessions_dedup"
CATALOG = "_catalog"
QUARANTINE = "_quarantine"
NOTICES = "_notices"
RULES = "_rules"
OBLIGATIONS = "_obligations"
LANDING_LEDGER = "_landing"
RECEIPT_INDEX = "_receipts"
RECONCILE = "_reconcile"
PRODUCTS = "_products"
PACKS = "_packs"

RECEIPT_MARKER = "_tidemark_receipt.json"
QUARANTINE_MARKER = "_tidemark_quarantine.json"
RUN_MARKER = "_tidemark_run.json"
PACK_MANIFEST = "_tidemark_pack.json"
RUN_CONTEXT = "context"
NOTICE_FOLDERS = ("outbox", "sent", "pending")
# A pack's data file names come from its manifest: only plain Parquet part names reach a path.
_PACK_FILE = re.compile(r"^part-[0-9A-Za-z_-]+(\.[0-9A-Za-z_-]+)*\.parquet$")


def run_folder(event_date: date, run_id: object) -> str:
    """A dedup run's folder relative to the table's location (snapshot summaries, gc)."""
    return f"data/event_date={event_date_text(event_date)}/run={check_run_id(run_id)}"


class Lake:
    """A lake folder or bucket prefix (local path, file://, gs://, s3://): its paths and its files."""

    __slots__ = ("uri", "_fs", "_root")

    def __init__(self, uri: str, filesystem: pafs.FileSystem | None = None, root: str | None = None) -> None:
        """A lake at `uri`; `filesystem` and `root` when already resolved (else on first use)."""
        if not uri or not isinstance(uri, str):
            raise ValueError(f"a lake needs a folder or URI, got {uri!r}")
        self.uri = uri.rstrip("/") or "/"
        self._fs = filesystem
        self._root = root

    @classmethod
    def open(cls, where: str | os.PathLike[str] | Lake) -> Lake:
        """The lake at a folder or URI (a Lake is returned as it is)."""
        if isinstance(where, Lake):
            return where
        return cls(os.fspath(where))

    # A local lake stands in for its folder (subprocess arguments, os.path, pathlib), and a lake
    # prints, logs and pickles as its URI (Spark ships it to executors).
    def __fspath__(self) -> str:
        """The URI, so that a local lake stands in for its folder."""
        return self.uri

    def __str__(self) -> str:
        """The URI."""
        return self.uri

    def __structlog__(self) -> str:
        """The URI, in structured logs."""
        return self.uri

    def __repr__(self) -> str:
        """The lake's constructor call."""
        return f"Lake({self.uri!r})"

    def __eq__(self, other: object) -> bool:
        """Two handles on one URI are equal."""
        return isinstance(other, Lake) and other.uri == self.uri

    def __hash__(self) -> int:
        """The URI's hash."""
        return hash(self.uri)

    def __reduce__(self) -> tuple[type[Lake], tuple[str]]:
        """Pickled as its URI: the filesystem is resolved again where it is unpickled."""
        return (Lake, (self.uri,))

    # -- its filesystem --------------------------------------------------------------------------

    @property
    def fs(self) -> pafs.FileSystem:
        """The lake's filesystem, resolved once."""
        if self._fs is None:
            self._fs, self._root = storage.resolve(self.uri)
        return self._fs

    @property
    def root(self) -> str:
        """The lake's path inside its filesystem."""
        self.fs  # noqa: B018 - resolves the filesystem and the root together
        assert self._root is not None
        return self._root

    @property
    def is_local(self) -> bool:
        """A folder on this machine (a path or file://), from the URI alone."""
        return "://" not in self.uri or self.uri.startswith("file://")

    def locate(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """(filesystem, path in it) of a URI; under the lake without resolving anything again.

        Every file operation of the lake goes through here (bench/history.py counts them
        here).
        """
        if uri == self.uri:
            return self.fs, self.root
        if uri.startswith(self.uri + "/"):
            return self.fs, self.root.rstrip("/") + uri[len(self.uri) :]
        return storage.resolve(uri)

    # -- where things are ------------------------------------------------------------------------

    def path(self, *parts: str) -> str:
        """The URI of a path under the lake, as text."""
        return join(self.uri, *parts)

    def folder(self, *parts: str) -> Folder:
        """The lake itself, or a folder under it."""
        return Folder(join(self.uri, *parts) if parts else self.uri, self)

    def file(self, *parts: str) -> File:
        """A file under the lake."""
        return File(join(self.uri, *parts), self)

    # stream panes
    def sessions_root(self) -> Folder:
        """The stream's panes: one folder per event date."""
        return self.folder(SESSIONS)

    def event_date_dir(self, event_date: date) -> Folder:
        """The receipt partitions of one event date."""
        return self.folder(SESSIONS, f"event_date={event_date_text(event_date)}")

    def receipt_dir(self, event_date: date, receipt_ts: object) -> Folder:
        """One receipt partition's folder."""
        return self.event_date_dir(event_date).folder(f"receipt_ts={check_receipt_ts(receipt_ts)}")

    def receipt_marker(self, event_date: date, receipt_ts: object) -> File:
        """A receipt partition's completion marker."""
        return self.receipt_dir(event_date, receipt_ts).file(RECEIPT_MARKER)

    # the deduplicated table
    def dedup_root(self) -> Folder:
        """The deduplicated sessions' Iceberg table."""
        return self.folder(SESSIONS_DEDUP)

    def dedup_metadata_dir(self) -> Folder:
        """The Iceberg table's metadata folder."""
        return self.folder(SESSIONS_DEDUP, "metadata")

    def dedup_data_dir(self) -> Folder:
        """The Iceberg table's data folder."""
        return self.folder(SESSIONS_DEDUP, "data")

    def run_dir(self, event_date: date, run_id: object) -> Folder:
        """The folder one dedup run writes its Parquet files, marker and context into."""
        return self.dedup_root().folder(run_folder(event_date, run_id))

    def run_marker(self, event_date: date, run_id: object) -> File:
        """A dedup run's marker."""
        return self.run_dir(event_date, run_id).file(RUN_MARKER)

    def run_context_dir(self, event_date: date, run_id: object) -> Folder:
        """The sessions of a run's context dates, kept for the next incremental run (tidemark.deduplication.incremental)."""
        return self.run_dir(event_date, run_id).folder(RUN_CONTEXT)

    def current_pointer(self, event_date: date) -> str:
        """Where the current version of a date is recorded, for messages.

        The date's live files (its version file) in the Iceberg table at
        <lake>/sessions_dedup (see tidemark.iceberg.table_versions).
        """
        return f"{self.dedup_root()} (live files of event_date={event_date_text(event_date)})"

    def local_catalog(self) -> File:
        """The table's local SQLite catalog."""
        return self.file(CATALOG, "iceberg.db")

    def catalog_config(self) -> File:
        """The properties of a configured catalog."""
        return self.file(CATALOG, "catalog.json")

    # malformed input
    def quarantine_root(self) -> Folder:
        """Malformed input lines, by batch."""
        return self.folder(QUARANTINE)

    def quarantine_dir(self, receipt_ts: object) -> Folder:
        """One batch's malformed input lines."""
        return self.folder(QUARANTINE, f"receipt_ts={check_receipt_ts(receipt_ts)}")

    # the receipt index (tidemark.panes.receipt_index)
    def receipt_index_dir(self) -> Folder:
        """The receipt index's folder."""
        return self.folder(RECEIPT_INDEX)

    def receipt_index_file(self, name: str) -> File:
        """One of the receipt index's records (head, reach_complete, arrivals_pruned)."""
        if name not in ("head.json", "reach_complete.json", "arrivals_pruned.json"):
            raise ValueError(f"unknown receipt index record {name!r}")
        return self.file(RECEIPT_INDEX, name)

    def reach_dir(self, event_date: date) -> Folder:
        """Entries naming the receipt partitions of earlier dates whose panes reach into event_date."""
        return self.folder(RECEIPT_INDEX, "reach", f"event_date={event_date_text(event_date)}")

    def reach_entry(self, into: date, event_date: date, receipt_ts: object) -> File:
        """The entry saying that partition (event_date, receipt_ts) reaches into `into`."""
        return self.reach_dir(into).file(f"{event_date_text(event_date)}__{check_receipt_ts(receipt_ts)}")

    def ends_dir(self, event_date: date) -> Folder:
        """Entries naming each receipt partition of event_date and the latest end of its panes."""
        return self.folder(RECEIPT_INDEX, "ends", f"event_date={event_date_text(event_date)}")

    def end_entry(self, event_date: date, receipt_ts: object, max_event_us: int) -> File:
        """The entry naming a receipt partition and the latest end of its panes (microseconds)."""
        if isinstance(max_event_us, bool) or not isinstance(max_event_us, int):
            raise layout.InvalidPartitionValue(f"invalid max_event_us {max_event_us!r}: expected microseconds")
        return self.ends_dir(event_date).file(f"{check_receipt_ts(receipt_ts)}__{max_event_us}")

    def arrivals_root(self) -> Folder:
        """The arrival entries, by the day their partitions were received."""
        return self.folder(RECEIPT_INDEX, "arrivals")

    def arrivals_dir(self, day: date) -> Folder:
        """Entries naming the receipt partitions received on `day` (UTC), one per partition."""
        return self.arrivals_root().folder(f"day={event_date_text(day)}")

    def arrival_entry(self, receipt_ts: object, event_date: date) -> File:
        """The arrival entry of a receipt partition."""
        received = layout.parse_receipt_ts(receipt_ts).date()
        return self.arrivals_dir(received).file(f"{check_receipt_ts(receipt_ts)}__{event_date_text(event_date)}")

    # reconciliation, the landing ledger, obligations, notices, rules, products
    def reconcile_cursor(self) -> File:
        """Where reconciliation's last pass stopped."""
        return self.file(RECONCILE, "cursor.json")

    def landing_ledger_dir(self) -> Folder:
        """The landing ledger: the files each batch read."""
        return self.folder(LANDING_LEDGER)

    def landing_ledger_day(self, day: date) -> Folder:
        """The ledger entries of the batches received on `day` (UTC).

        One folder per day, so that a reader of recent entries lists recent days only.
        """
        return self.folder(LANDING_LEDGER, f"day={event_date_text(day)}")

    def landing_ledger_path(self, receipt_ts: object) -> File:
        """Batch receipt_ts's ledger entry, in the folder of the day it was received."""
        received = layout.parse_receipt_ts(receipt_ts).date()
        return self.landing_ledger_day(received).file(f"receipt_ts={check_receipt_ts(receipt_ts)}.json")

    def legacy_landing_ledger_path(self, receipt_ts: object) -> File:
        """Where a lake written before the ledger had day folders keeps a batch's entry (still read)."""
        return self.file(LANDING_LEDGER, f"receipt_ts={check_receipt_ts(receipt_ts)}.json")

    def has_landing_ledger_entry(self, receipt_ts: object) -> bool:
        """Whether batch receipt_ts has a ledger entry, in its day folder or where a legacy lake kept it."""
        return self.landing_ledger_path(receipt_ts).exists() or self.legacy_landing_ledger_path(receipt_ts).exists()

    def obligations_root(self) -> Folder:
        """The reruns owed, by event date."""
        return self.folder(OBLIGATIONS)

    def obligations_dir(self, event_date: date) -> Folder:
        """The reruns owed to one event date."""
        return self.folder(OBLIGATIONS, f"event_date={event_date_text(event_date)}")

    def notices_dir(self, which: str, channel: str | None = None) -> Folder:
        """The URI of one notices folder.

        The availability notices' folders, or (channel) another kind of notice's outbox and
        the sent records of each of its destinations (tidemark.notices.outbox.SINKS).
        """
        if channel is None:
            if which not in NOTICE_FOLDERS:
                raise ValueError(f"unknown notices folder {which!r}")
            return self.folder(NOTICES, which)
        if not channel.isidentifier() or channel in NOTICE_FOLDERS or not which.isidentifier():
            raise ValueError(f"unknown notices folder {channel!r}/{which!r}")
        return self.folder(NOTICES, channel, which)

    def notice_records(self, which: str, channel: str | None = None) -> JsonRecords:
        """The records of one notices folder (notices_dir).

        An outbox, a destination's sent records, or the coalescing groups waiting for their
        notice ("pending").
        """
        return JsonRecords(self.notices_dir(which, channel))

    def rules_dir(self) -> Folder:
        """The session rules records."""
        return self.folder(RULES)

    def rules_record(self, sequence: int) -> File:
        """The rules record number `sequence` (1 = the first rules the lake was written with)."""
        if isinstance(sequence, bool) or not isinstance(sequence, int) or not 0 < sequence < 1_000_000:
            raise ValueError(f"invalid rules record sequence {sequence!r}")
        return self.file(RULES, f"rules-{sequence:06d}.json")

    def product_dir(self, product: str) -> Folder:
        """A downstream product's folder."""
        if not product.replace("_", "").isalnum():
            raise ValueError(f"invalid product name {product!r}")
        return self.folder(PRODUCTS, product)

    # packs: derived copies of receipt partitions' panes (tidemark.panes.pack_cache)
    def packs_root(self) -> Folder:
        """The packs, by event date."""
        return self.folder(PACKS)

    def packs_dir(self, event_date: date) -> Folder:
        """One event date's packs."""
        return self.folder(PACKS, f"event_date={event_date_text(event_date)}")

    def pack_dir(self, event_date: date, pack_id: object) -> Folder:
        """One pack's folder; a pack id has a run id's form (32 lowercase hex digits)."""
        return self.packs_dir(event_date).folder(f"pack={check_run_id(pack_id)}")

    def pack_manifest(self, event_date: date, pack_id: object) -> File:
        """A pack's manifest, written last."""
        return self.pack_dir(event_date, pack_id).file(PACK_MANIFEST)

    def pack_file(self, event_date: date, pack_id: object, name: object) -> File:
        """One of a pack's data files (a plain part-*.parquet name)."""
        if not isinstance(name, str) or not _PACK_FILE.match(name):
            raise layout.InvalidPartitionValue(f"invalid pack file name {str(name)[:80]!r}: expected part-*.parquet")
        return self.pack_dir(event_date, pack_id).file(name)
