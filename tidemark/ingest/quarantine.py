"""Reading the quarantine of refused lines with pyarrow (no JVM).

The quarantine keeps each refused line's exact bytes (`raw`, binary): a landed line may be any
bytes at all (invalid UTF-8, NUL, a multi-megabyte blob), and an operator must be able to see every
one of them. `read_quarantine` returns them as `bytes`; `to_json_record` and `display_raw` are how
the CLI shows them without ever failing. Folders written before raw became binary (a string
column, possibly holding invalid UTF-8) are read as bytes too.
"""

from __future__ import annotations

import base64
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tidemark.base import layout
from tidemark.store.lake import QUARANTINE_MARKER, Lake


def read_quarantine(lake: Lake) -> list[dict[str, Any]]:
    """Every quarantined line of complete quarantine folders.

    Rows: raw (bytes, exactly as landed, without the line's final newline), reason, source_file,
    receipt_ts, batch_id.
    """
    rows: list[dict[str, Any]] = []
    root = lake.quarantine_root()
    for name in root.subfolder_names():
        receipt_ts = layout.partition_value(name, "receipt_ts")
        folder = root.folder(name)
        if receipt_ts is None or not folder.file(QUARANTINE_MARKER).exists():
            continue
        for file_name in folder.data_file_names():
            fs, path = folder.file(file_name).at()
            table = pq.read_table(path, filesystem=fs)
            if "raw" in table.column_names and not pa.types.is_binary(table.schema.field("raw").type):
                # older folders stored raw as a string column; its bytes are not always UTF-8
                table = table.set_column(table.column_names.index("raw"), "raw", table.column("raw").cast(pa.binary()))
            for row in table.to_pylist():
                row["receipt_ts"] = receipt_ts
                rows.append(row)
    return rows


def raw_text(raw: bytes) -> tuple[str, str]:
    """(text, encoding) of a raw line for JSON: the text itself when it is UTF-8, else base64."""
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"


def to_json_record(row: dict[str, Any]) -> dict[str, Any]:
    """A quarantine row as JSON-safe values.

    `raw` as text ("raw_encoding": "utf-8") or as base64 ("raw_encoding": "base64"), with its length
    in bytes.
    """
    record = {k: v for k, v in row.items() if k != "raw"}
    raw = row.get("raw") or b""
    record["raw"], record["raw_encoding"] = raw_text(raw)
    record["raw_bytes"] = len(raw)
    return record


def display_raw(raw: bytes, limit: int = 200) -> str:
    r"""A printable preview of a raw line: invalid bytes and control characters escaped (\xff, \x00)."""
    text = raw[: limit * 4].decode("utf-8", "backslashreplace")
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text[:limit])
    return text + (f"... ({len(raw)} bytes)" if len(raw) > limit else "")
