"""Which landed files are input, and how a file's bytes become lines.

One rule for the stream, the batch reference and docs/input-contract.md ("Landing").

A landed file is named by its path relative to the landing folder, `/`-separated. It is
  - **hidden** when any part of that path (a folder or the file name) starts with `_` or `.`:
    not data (`_SUCCESS`, `.crc`, `_metadata/`, `_part=1/...`, a writer's `.name.tmp`);
  - **in progress** when its name ends with a suffix that copy tools give a file until it is
    complete (`._COPYING_` from `hadoop fs -put`, `.tmp`, `.part`): not read under that name; it
    is read once, under its final name, after the writer renames it, and reported while it stays;
  - **input** otherwise.

Spark's file source lists more than that (it reads `_part=1/x.jsonl` and `_metadata*` folders, and
`x.tmp` files, while it silently skips `._COPYING_`), so the stream applies this rule to the file of
every line it read (streaming_job/batch.py) and records what it did not read
(tidemark/ingest/landing_ledger.py).

A UTF-8 byte order mark at the very start of a file is not part of its first line (Hadoop's line
reader, which Spark's text source uses, drops it; Windows tools write it); anywhere else it is a
byte of its line, which the contract then refuses as not JSON.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NotRequired, TypedDict
from urllib.parse import unquote, urlsplit

from tidemark.ingest import contract
from tidemark.store.locations import Root

INPUT = "input"
HIDDEN = "hidden"
IN_PROGRESS = "in_progress"

HIDDEN_PREFIXES = ("_", ".")
IN_PROGRESS_SUFFIXES = ("._COPYING_", ".tmp", ".part")
UTF8_BOM = b"\xef\xbb\xbf"


class FileEntry(TypedDict):
    """What a batch records of one landed file it was given (a landing ledger entry's `files`).

    `size` and `mtime_ms` as the batch pinned the file (None: unknown), `lines` its line count,
    `verdict` the landing rule's (or the ledger's `unreadable`, then with a `reason`), `sha256` the
    digest of the bytes read.
    """

    path: str
    size: int | None
    mtime_ms: int | None
    lines: int
    verdict: str
    sha256: NotRequired[str]
    reason: NotRequired[str]


def classify(relative_path: str) -> str:
    """INPUT, HIDDEN or IN_PROGRESS for a file's path relative to the landing folder."""
    parts = [part for part in relative_path.split("/") if part]
    if not parts or any(part.startswith(HIDDEN_PREFIXES) for part in parts):
        return HIDDEN
    if parts[-1].endswith(IN_PROGRESS_SUFFIXES):
        return IN_PROGRESS
    return INPUT


def file_lines(data: bytes) -> list[bytes]:
    """A landed file's lines: a leading UTF-8 BOM dropped, then split as the contract splits."""
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM) :]
    return contract.split_lines(data)


def _location(uri: str) -> str:
    """A path or URI as a comparable location.

    Local paths absolute, URIs percent-decoded (Spark names files as Hadoop URIs,
    `file:/tmp/sub%20dir/a.jsonl`).
    """
    if uri.startswith("file:"):
        return os.path.abspath(unquote(urlsplit(uri).path))
    if "://" not in uri:
        return os.path.abspath(uri)
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc}{unquote(parts.path)}"


def relative_path(landing: str | None, file_uri: str) -> str:
    """The path of a landed file (a path or a Spark file URI) relative to the landing folder.

    Without a landing (a batch built by hand) or for a file outside it, the file's name alone.
    """
    location = _location(file_uri)
    if landing is not None:
        root = _location(landing).rstrip("/") + "/"
        if location.startswith(root):
            return location[len(root) :]
    return location.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class LandedFile:
    """A file found in the landing folder: its relative path, size and modification time."""

    path: str
    size: int
    mtime_ms: int

    @property
    def verdict(self) -> str:
        """What the landing rule makes of the file (classify)."""
        return classify(self.path)


def list_landing(landing: str) -> list[LandedFile]:
    """Every file under the landing folder (recursively, hidden ones too), sorted by path."""
    folder = Root(landing).folder()
    prefix = folder.at()[1].rstrip("/") + "/"
    out = [
        LandedFile(
            info.path[len(prefix) :] if info.path.startswith(prefix) else info.base_name,
            int(info.size or 0),
            int(info.mtime_ns // 1_000_000) if info.mtime_ns is not None else 0,
        )
        for info in folder.walk_files()
    ]
    return sorted(out, key=lambda f: f.path)


def read_file(landing: str, path: str) -> bytes:
    """The bytes of the landed file at `path` (relative to the landing folder)."""
    fs, where = Root(landing).file(path).at()
    with fs.open_input_stream(where) as handle:
        return handle.read()
