"""Open-session state of the stream, versioned by batch id inside the checkpoint folder.

Spark's own stateful operators drop rows behind the watermark before user code sees them, and
session_window cannot emit early panes; tidemark must see every late row (to write it as a
too_late fragment) and emit early panes, so it keeps its state itself, the way Spark's state store
does: version N = f(version N-1, batch N). A replayed batch N reads version N-1 again and rewrites
version N identically, which makes every batch idempotent.

    <checkpoint>/state/batch_id=N/*.parquet   open sessions after batch N
    <checkpoint>/state/batch_id=N/_tidemark_state.json   marker, written last: watermark, counts

The version's files are written by the batch's executors in the same pass as its panes
(streaming_job.pane_writer.write_batch, into the folder `prepare` empties); the marker by the driver
(`commit`) once the panes are complete. A batch without input writes no version; the newest KEEP_VERSIONS versions that exist are kept, so
the version a replayed batch starts from is always there.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from tidemark.base import layout
from tidemark.base.times import iso_from_micros
from tidemark.session import session_schema
from tidemark.store.locations import Folder, Root

STATE_MARKER = "_tidemark_state.json"
KEEP_VERSIONS = 3
# Watermark before any event was seen: far in the past, nothing is late yet.
NO_WATERMARK_US = -(2**62)


def watermark_text(watermark_us: int) -> str | None:
    """A watermark as RFC 3339 text for logs and reports.

    None before the stream has one (a stream whose batches so far held no valid event):
    NO_WATERMARK_US is no representable instant.
    """
    return None if watermark_us <= NO_WATERMARK_US else iso_from_micros(watermark_us)


# THE session schema's state columns (tidemark/session/session_schema.py): the session's events and its
# pane bookkeeping; what stream_panes.sql computes from the events (event_type_count) is not kept.
STATE_SCHEMA = session_schema.STATE_DDL
STATE_COLUMNS = list(session_schema.STATE_COLUMNS)


@dataclass(frozen=True)
class StateVersion:
    """A committed state version: its batch, the watermark after it and its open sessions."""

    batch_id: int
    watermark_us: int
    sessions: int


class StateStore:
    """The stream's open sessions, one committed version per batch, under the checkpoint."""

    def __init__(self, spark: SparkSession, checkpoint: str) -> None:
        """The store under `checkpoint`/state, read and written with `spark`."""
        self.spark = spark
        self.root = Root(checkpoint).folder("state")

    def _dir(self, batch_id: int) -> Folder:
        return self.root.folder(f"batch_id={batch_id}")

    def versions(self) -> list[int]:
        """The batch ids of the committed versions (those with a marker), oldest first."""
        ids = []
        for name in self.root.subfolder_names():
            value = layout.partition_value(name, "batch_id")
            if value is not None and value.isdigit() and self.root.file(name, STATE_MARKER).exists():
                ids.append(int(value))
        return sorted(ids)

    def before(self, batch_id: int) -> tuple[StateVersion, DataFrame]:
        """The committed state a batch starts from: the newest version older than the batch."""
        older = [v for v in self.versions() if v < batch_id]
        if not older:
            return StateVersion(-1, NO_WATERMARK_US, 0), self.spark.createDataFrame([], STATE_SCHEMA)
        version_id = older[-1]
        meta = self._dir(version_id).file(STATE_MARKER).read_json()
        if meta is None:  # versions() lists only versions with a marker: removed since (a replay's cleanup)
            raise RuntimeError(f"state version {version_id} lost its marker {STATE_MARKER} while being read")
        version = StateVersion(version_id, int(meta["watermark_us"]), int(meta["sessions"]))
        if version.sessions == 0:
            return version, self.spark.createDataFrame([], STATE_SCHEMA)
        return version, self.spark.read.schema(STATE_SCHEMA).parquet(self._dir(version_id).uri)

    def prepare(self, batch_id: int) -> Folder:
        """The folder a batch writes its version's files into, emptied first.

        The pane writer (streaming_job.pane_writer) writes them in the same pass as the panes. The
        version's marker goes first, then what an interrupted attempt left. Until `commit` writes
        the marker again the version does not exist for `before`.
        """
        folder = self._dir(batch_id)
        folder.file(STATE_MARKER).delete()
        folder.delete()
        return folder

    def commit(self, batch_id: int, session_count: int, watermark_us: int, receipt_ts: str) -> None:
        """The version's marker, written once its files are in place; then the oldest versions go."""
        self._dir(batch_id).file(STATE_MARKER).write_json_atomic(
            {"batch_id": batch_id, "watermark_us": watermark_us, "sessions": session_count, "receipt_ts": receipt_ts},
        )
        # Keep the newest KEEP_VERSIONS versions that exist, not "batch_id - K and later": empty
        # batches write no version, so after a run of them that arithmetic deleted the very
        # version a replay of this batch starts from. Versions after this batch (stale ones,
        # rewritten when their batches replay) are left alone.
        existing = [v for v in self.versions() if v <= batch_id]
        for old in existing[:-KEEP_VERSIONS]:
            self._dir(old).delete()
