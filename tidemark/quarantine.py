"""Reading the quarantine of malformed lines with pyarrow (no JVM)."""
from __future__ import annotations

import pyarrow.parquet as pq

from tidemark import layout, storage


def read_quarantine(lake: str) -> list[dict]:
    """Every quarantined line of complete quarantine folders: raw, reason, source_file, receipt_ts."""
    rows: list[dict] = []
    root = layout.quarantine_root(lake)
    for name in storage.list_subdirs(root):
        receipt_ts = layout.partition_value(name, "receipt_ts")
        folder = layout.join(root, name)
        if receipt_ts is None or not storage.exists(layout.join(folder, layout.QUARANTINE_MARKER)):
            continue
        fs, _ = storage.resolve(folder)
        for path in sorted(storage.data_files(folder)):
            for row in pq.read_table(path, filesystem=fs).to_pylist():
                row["receipt_ts"] = receipt_ts
                rows.append(row)
    return rows
