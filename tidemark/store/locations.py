"""Typed locations: a file or folder of the lake (or of the landing) that does its own I/O.

`Lake` hands these out (`lake.receipt_marker(d, ts).read_json()`, `lake.run_dir(d, r).delete()`),
so no caller builds a path and passes it back to a filesystem call, and no module outside
tidemark.store calls the filesystem itself. Folders outside a lake (the landing a sender writes to,
a stack's scratch folders) are reached the same way through a `Root` opened on their URI.

A location is its URI: a `str`, so Spark, pyarrow and the path helpers take it as it is, and it
prints, logs, compares and pickles as that URI. What it adds is where its filesystem comes from
(its lake or root, resolved once) and the operations on it. Text built from it (`loc + "/x"`) is
plain text again: `Folder.file` and `Folder.folder` keep the type.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import date
from typing import Any, Protocol

import pyarrow.fs as pafs

from tidemark.base import layout
from tidemark.store import storage


class Locator(Protocol):
    """What a location needs from its owner: a URI's filesystem and the path in it."""

    def locate(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """(filesystem, path in it) of a URI under the owner."""
        ...


class Root:
    """A folder or bucket prefix outside a lake (the landing, a scratch folder), resolved once."""

    __slots__ = ("uri", "_fs", "_root")

    def __init__(self, uri: str) -> None:
        """The root at a local folder or URI (gs://, s3://, file://)."""
        if not uri or not isinstance(uri, str):
            raise ValueError(f"a root needs a folder or URI, got {uri!r}")
        self.uri = uri.rstrip("/") or "/"
        self._fs: pafs.FileSystem | None = None
        self._root = ""

    def __repr__(self) -> str:
        """The root's constructor call."""
        return f"Root({self.uri!r})"

    def __reduce__(self) -> tuple[type[Root], tuple[str]]:
        """Pickled as its URI: the filesystem is resolved again where it is unpickled."""
        return (Root, (self.uri,))

    def locate(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """(filesystem, path in it) of a URI; under the root without resolving anything again."""
        if self._fs is None:
            self._fs, self._root = storage.resolve(self.uri)
        if uri == self.uri:
            return self._fs, self._root
        if uri.startswith(self.uri + "/"):
            return self._fs, self._root.rstrip("/") + uri[len(self.uri) :]
        return storage.resolve(uri)

    @property
    def is_local(self) -> bool:
        """A folder on this machine (a path or file://), from the URI alone."""
        return storage.is_local(self.uri)

    def folder(self, *parts: str) -> Folder:
        """The root itself, or a folder under it."""
        return Folder(layout.join(self.uri, *parts) if parts else self.uri, self)

    def file(self, *parts: str) -> File:
        """A file under the root."""
        return File(layout.join(self.uri, *parts), self)


class _Location(str):
    """A URI bound to the owner that resolves its filesystem (see the module's docstring)."""

    locator: Locator

    def __new__(cls, uri: str, locator: Locator) -> _Location:  # noqa: PYI034 - subclasses return their own type
        """The location at `uri`, whose filesystem `locator` resolves."""
        made = super().__new__(cls, uri)
        made.locator = locator
        return made

    def __reduce__(self) -> tuple[type[_Location], tuple[str, Locator]]:
        """Pickled as its URI and its owner (a lake or root pickles as its URI)."""
        return (type(self), (str(self), self.locator))

    def __repr__(self) -> str:
        """The location's kind and URI."""
        return f"{type(self).__name__}({str(self)!r})"

    @property
    def uri(self) -> str:
        """The URI as plain text."""
        return str(self)

    @property
    def name(self) -> str:
        """The last part of the path."""
        return self.rstrip("/").rsplit("/", 1)[-1]

    def at(self) -> tuple[pafs.FileSystem, str]:
        """(filesystem, path in it), for pyarrow calls that take a filesystem and a path."""
        return self.locator.locate(str(self))

    def exists(self) -> bool:
        """Whether something is there."""
        return storage.exists_at(*self.at())


class File(_Location):
    """A file: a marker, an entry, a record, a data file."""

    def read_text(self) -> str | None:
        """The file's text, or None when it does not exist."""
        return storage.read_text_at(*self.at())

    def read_json(self) -> dict[str, Any] | None:
        """The JSON object the file holds, or None when it does not exist."""
        return storage.read_json_at(*self.at())

    def write_text_atomic(self, text: str) -> None:
        """Write the whole file: a reader sees the old content or the new, never a part."""
        storage.write_text_atomic_at(*self.at(), text)

    def write_bytes_atomic(self, data: bytes) -> None:
        """Write the whole file's bytes (a Parquet file, say): a reader sees the old or the new, never a part."""
        storage.write_bytes_atomic_at(*self.at(), data)

    def write_json_atomic(self, payload: dict[str, Any]) -> None:
        """Write a JSON record whole (sorted keys, one-space indent)."""
        storage.write_json_atomic_at(*self.at(), payload)

    def create_text_if_absent(self, text: str, settle_seconds: float = 2.0) -> bool:
        """Create the file with this text unless it exists; True when this call created it.

        Of concurrent creators one wins (storage.create_text_if_absent_at).
        """
        return storage.create_text_if_absent_at(*self.at(), text, settle_seconds)

    def create_json_if_absent(self, payload: dict[str, Any], settle_seconds: float = 2.0) -> bool:
        """Create the file with this JSON (compact) unless it exists; True when this call created it."""
        return self.create_text_if_absent(json.dumps(payload), settle_seconds)

    def delete(self) -> None:
        """Remove the file; nothing happens when it does not exist."""
        storage.delete_file_at(*self.at())


class Folder(_Location):
    """A folder: a partition, a run's folder, an index's entries, an outbox."""

    def file(self, *parts: str) -> File:
        """A file inside (parts joined with '/')."""
        return File(layout.join(str(self), *parts), self.locator)

    def folder(self, *parts: str) -> Folder:
        """A folder inside (parts joined with '/')."""
        return Folder(layout.join(str(self), *parts), self.locator)

    def names(self) -> list[str]:
        """The names of its entries, sorted; [] when it does not exist."""
        return storage.list_dir_at(*self.at())

    def subfolder_names(self) -> list[str]:
        """The names of its subfolders, sorted."""
        return storage.list_subdirs_at(*self.at())

    def partition_values(self, key: str, check: Callable[[str], str]) -> list[str]:
        """The checked values of its `key=value` subfolders, sorted (others are skipped)."""
        return storage.partition_values(self.subfolder_names(), key, check)

    def event_dates(self) -> list[date]:
        """The event dates of its `event_date=` subfolders, in order."""
        return self.partition_dates("event_date")

    def partition_dates(self, key: str) -> list[date]:
        """The dates of its `key=YYYY-MM-DD` subfolders, in order (others are skipped)."""
        return [layout.parse_event_date(text) for text in self.partition_values(key, layout.check_event_date)]

    def data_file_names(self, suffix: str = ".parquet") -> list[str]:
        """The names of the visible data files (not _markers or .hidden) directly inside, sorted."""
        return sorted(path.rsplit("/", 1)[1] for path in storage.data_files_at(*self.at(), suffix))

    def walk_files(self) -> Iterator[pafs.FileInfo]:
        """Every file under it (one recursive listing: one call per 1,000 names on a bucket)."""
        fs, path = self.at()
        selector = pafs.FileSelector(path, allow_not_found=True, recursive=True)
        for info in fs.get_file_info(selector):
            if info.type == pafs.FileType.File:
                yield info

    def delete(self) -> None:
        """Remove the folder and what it holds; nothing happens when it does not exist."""
        storage.delete_dir_at(*self.at())


class JsonRecords:
    """A folder that holds one small JSON record per key, as `<key>.json`.

    The notice outboxes (one record per notice_id and destination) and the waiting coalescing
    groups are such folders: their owners name records by key and never build a path or call the
    filesystem themselves. Records are written atomically (a reader sees the old record or the
    new one, never a part), as the lake's other small records are.
    """

    __slots__ = ("folder",)

    SUFFIX = ".json"

    def __init__(self, folder: Folder) -> None:
        """The records of `folder`."""
        self.folder = folder

    def __repr__(self) -> str:
        """The records' folder, for logs."""
        return f"JsonRecords({str(self.folder)!r})"

    @property
    def uri(self) -> str:
        """The folder's URI."""
        return self.folder.uri

    def path(self, key: str) -> File:
        """The record `key` (a plain file name stem: no folder, no dot first)."""
        if not _is_record_key(key):
            raise ValueError(f"invalid record key {key[:80]!r}")
        return self.folder.file(key + self.SUFFIX)

    def exists(self, key: str) -> bool:
        """Whether the record is there."""
        return self.path(key).exists()

    def read(self, key: str) -> dict[str, Any] | None:
        """The record, or None when there is none."""
        return self.path(key).read_json()

    def write(self, key: str, record: dict[str, Any]) -> None:
        """Write the record whole (sorted keys, one-space indent), replacing any earlier one."""
        self.path(key).write_json_atomic(record)

    def create(self, key: str, record: dict[str, Any]) -> bool:
        """Create the record (compact JSON) unless it exists; True when this call created it.

        Of concurrent creators one wins (storage.create_text_if_absent_at): a record written once,
        such as when a log began, keeps its first value.
        """
        return self.path(key).create_json_if_absent(record)

    def delete(self, key: str) -> None:
        """Remove the record; nothing happens when there is none."""
        self.path(key).delete()

    def names(self) -> list[str]:
        """The keys of the folder's records, by file name (temp files of an atomic write are not records)."""
        stems = (name[: -len(self.SUFFIX)] for name in self.folder.names() if name.endswith(self.SUFFIX))
        return [stem for stem in stems if _is_record_key(stem)]


def _is_record_key(key: str) -> bool:
    """A record key is a file name stem: not empty, no folder separator, not hidden."""
    return bool(key) and "/" not in key and "\\" not in key and not key.startswith(".")
