"""Small file operations on the lake through pyarrow's filesystems (local paths, file://, gs://, s3://).

Markers and the lake's other records (notice records, obligations, ledgers) are tiny JSON files.
Publishing one must be atomic so that readers never see a
half-written file: on a local disk we write a hidden temp file and rename it over the target; on
object stores a single object upload is already atomic.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow.fs as pafs

from tidemark.base import layout

_SCHEME_ALIASES = {"s3a://": "s3://", "s3n://": "s3://"}


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """Return (filesystem, path inside it) for a local path or a URI."""
    for alias, canonical in _SCHEME_ALIASES.items():
        if uri.startswith(alias):
            uri = canonical + uri[len(alias) :]
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    if uri.startswith("file://"):
        return pafs.LocalFileSystem(), uri[len("file://") :]
    return pafs.FileSystem.from_uri(uri)


def is_local(uri: str) -> bool:
    """Whether a URI is on this machine's filesystem."""
    return isinstance(resolve(uri)[0], pafs.LocalFileSystem)


def exists(uri: str) -> bool:
    """Whether a file or folder exists."""
    return exists_at(*resolve(uri))


def exists_at(fs: pafs.FileSystem, path: str) -> bool:
    """Whether a path exists in a resolved filesystem."""
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def read_text(uri: str) -> str | None:
    """The file's text, or None when it does not exist."""
    return read_text_at(*resolve(uri))


def read_text_at(fs: pafs.FileSystem, path: str) -> str | None:
    """A file's text in a resolved filesystem, or None when it does not exist."""
    try:
        with fs.open_input_stream(path) as stream:
            return stream.read().decode("utf-8")
    except FileNotFoundError:
        return None


def read_json(uri: str) -> dict[str, Any] | None:
    """A JSON file's object, or None when it does not exist."""
    return read_json_at(*resolve(uri))


def read_json_at(fs: pafs.FileSystem, path: str) -> dict[str, Any] | None:
    """A JSON file's object in a resolved filesystem, or None when it does not exist."""
    text = read_text_at(fs, path)
    return None if text is None else json.loads(text)


def write_text_atomic(uri: str, text: str) -> None:
    """Write a whole file so that a reader sees either the old content or the new, never a part."""
    write_text_atomic_at(*resolve(uri), text)


def write_text_atomic_at(fs: pafs.FileSystem, path: str, text: str) -> None:
    """Write a whole file in a resolved filesystem (see write_text_atomic)."""
    write_bytes_atomic_at(fs, path, text.encode("utf-8"))


def write_bytes_atomic_at(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write a whole file's bytes: a reader sees the old content or the new, never a part.

    Locally a hidden temp file renamed over the target (atomic on POSIX); on an object store one
    object upload, atomic already.
    """
    parent, name = path.rsplit("/", 1)
    fs.create_dir(parent, recursive=True)
    if isinstance(fs, pafs.LocalFileSystem):
        tmp = f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"
        with fs.open_output_stream(tmp) as out:
            out.write(data)
        os.replace(tmp, path)
    else:
        with fs.open_output_stream(path) as out:
            out.write(data)


def write_json_atomic(uri: str, payload: dict[str, Any]) -> None:
    """Write a JSON record whole (sorted keys, one-space indent, a final newline)."""
    write_json_atomic_at(*resolve(uri), payload)


def write_json_atomic_at(fs: pafs.FileSystem, path: str, payload: dict[str, Any]) -> None:
    """Write a JSON record whole in a resolved filesystem (see write_json_atomic)."""
    write_text_atomic_at(fs, path, json.dumps(payload, sort_keys=True, indent=1, default=str) + "\n")


def list_dir(uri: str) -> list[str]:
    """Names (not paths) of the entries directly inside a folder; [] when it does not exist."""
    return list_dir_at(*resolve(uri))


def list_dir_at(fs: pafs.FileSystem, path: str) -> list[str]:
    """The names of a folder's entries in a resolved filesystem, sorted."""
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(info.base_name for info in infos)


def list_subdirs(uri: str) -> list[str]:
    """The names of a folder's subfolders, sorted; [] when it does not exist."""
    return list_subdirs_at(*resolve(uri))


def list_subdirs_at(fs: pafs.FileSystem, path: str) -> list[str]:
    """The names of a folder's subfolders in a resolved filesystem, sorted."""
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(info.base_name for info in infos if info.type == pafs.FileType.Directory)


def delete_dir(uri: str) -> None:
    """Remove a folder and what it holds; nothing happens when it does not exist."""
    delete_dir_at(*resolve(uri))


def delete_dir_at(fs: pafs.FileSystem, path: str) -> None:
    """Remove a folder in a resolved filesystem; nothing happens when it does not exist."""
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        fs.delete_dir(path)


def delete_file(uri: str) -> None:
    """Remove a file; nothing happens when it does not exist."""
    delete_file_at(*resolve(uri))


def delete_file_at(fs: pafs.FileSystem, path: str) -> None:
    """Remove a file in a resolved filesystem; nothing happens when it does not exist."""
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)


def data_files(uri: str, suffix: str = ".parquet") -> Iterable[str]:
    """Visible data files (not _markers or .hidden) directly inside a folder, as paths for pyarrow."""
    return data_files_at(*resolve(uri), suffix)


def data_files_at(fs: pafs.FileSystem, path: str, suffix: str = ".parquet") -> Iterable[str]:
    """Visible data files directly inside a folder of a resolved filesystem (see data_files)."""
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    for info in infos:
        if (
            info.type == pafs.FileType.File
            and info.base_name.endswith(suffix)
            and not info.base_name.startswith(("_", "."))
        ):
            yield info.path


def partition_values(names: Iterable[str], key: str, check: Callable[[str], str]) -> list[str]:
    """The values of the `key=value` folder names that `check` (a layout check) accepts, sorted.

    Others (written by hand, or by something else) are skipped, so a stray folder can never
    become a path or a run.
    """
    out = []
    for name in names:
        value = layout.partition_value(name, key)
        if value is None:
            continue
        try:
            out.append(check(value))
        except layout.InvalidPartitionValue:
            continue
    return sorted(out)


def create_text_if_absent(uri: str, text: str, settle_seconds: float = 2.0) -> bool:
    """Create a file with this text unless it exists; True when this call created it.

    On a local disk (and file://) the creation is exclusive and atomic: a complete hidden temp file
    is hard-linked to the name, which fails when the name exists, so of any number of concurrent
    callers exactly one gets True and nobody ever sees a partial file.

    Object stores offer no conditional write through pyarrow: the name is checked, the object
    written, and after `settle_seconds` read back; True only when it still holds exactly this text.
    Two writers can then both get True only if one wrote more than `settle_seconds` after it found
    the name free, so callers on object stores read the file again later (see rules_record).
    """
    return create_text_if_absent_at(*resolve(uri), text, settle_seconds)


def create_text_if_absent_at(fs: pafs.FileSystem, path: str, text: str, settle_seconds: float = 2.0) -> bool:
    """Create a file in a resolved filesystem unless it exists (see create_text_if_absent)."""
    parent, name = path.rsplit("/", 1)
    fs.create_dir(parent, recursive=True)
    if isinstance(fs, pafs.LocalFileSystem):
        tmp = f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.remove(tmp)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        return False
    with fs.open_output_stream(path) as out:
        out.write(text.encode("utf-8"))
    time.sleep(settle_seconds)
    return read_text_at(fs, path) == text
