"""Helpers for stream tests: land crafted files in order, run the real stream, read the lake."""

from __future__ import annotations

import json
import os
import time
from datetime import date

import pyarrow.dataset as ds

from tidemark.base import layout
from tidemark.panes import receipts
from tidemark.store import lake as lake_layout
from tidemark.store.lake import Lake


def event(user: str, event_id: str, ts: str, event_type: str = "play", **extra) -> str:
    return json.dumps({"event_id": event_id, "user_id": user, "event_type": event_type, "event_ts": ts, **extra})


def land(landing: str, files: list[list[str]], start_index: int = 0) -> list[str]:
    """Write each list of lines as one file, in order (strictly increasing modification times)."""
    return land_raw(landing, [[line.encode() for line in lines] for lines in files], start_index)


def panes(lake: Lake) -> list[dict]:
    """Every pane row of every complete receipt partition, with its partition values."""
    rows = []
    for event_date in receipts.list_event_dates(lake):
        for receipt_ts in receipts.list_receipts(lake, event_date):
            folder = lake.receipt_dir(event_date, receipt_ts)
            for row in ds.dataset(folder, format="parquet").to_table().to_pylist():
                row.update(event_date=event_date, receipt_ts=receipt_ts)
                rows.append(row)
    return rows


def partition_snapshot(lake: Lake) -> dict[tuple[date, str], tuple]:
    """(event_date, receipt_ts) -> (marker text, sorted (file name, size, mtime)) of complete partitions."""
    snap = {}
    for event_date in receipts.list_event_dates(lake):
        for receipt_ts in receipts.list_receipts(lake, event_date):
            folder = lake.receipt_dir(event_date, receipt_ts)
            files = tuple(
                sorted(
                    (n, os.path.getsize(os.path.join(folder, n)), os.path.getmtime(os.path.join(folder, n)))
                    for n in os.listdir(folder)
                )
            )
            with open(os.path.join(folder, lake_layout.RECEIPT_MARKER)) as marker:
                snap[(layout.as_event_date(event_date), receipt_ts)] = (marker.read(), files)
    return snap


def land_raw(landing: str, files: list[list[bytes]], start_index: int = 0) -> list[str]:
    """Like land, for lines given as bytes (any bytes: invalid UTF-8, NUL, CR); written under a
    hidden name, then renamed, so the stream never reads a half-written file."""
    os.makedirs(landing, exist_ok=True)
    base = time.time() - 1000 + start_index
    paths = []
    for offset, lines in enumerate(files):
        index = start_index + offset
        path = os.path.join(landing, f"file-{index:05d}.jsonl")
        tmp = os.path.join(landing, f".file-{index:05d}.tmp")
        with open(tmp, "wb") as out:
            out.write(b"\n".join(lines) + b"\n")
        os.utime(tmp, (base + offset * 0.01, base + offset * 0.01))
        os.replace(tmp, path)
        paths.append(path)
    return paths
