"""Summaries of the lake for people: rich tables built from markers (no data files are read)."""
from __future__ import annotations

from rich.table import Table

from streaming_job import receipts


def receipt_table(lake: str) -> Table:
    table = Table(title=f"receipt partitions in {lake}")
    for column in ("event_date", "receipt_ts", "batch", "rows", "events", "pane kinds", "late"):
        table.add_column(column)
    for event_date in receipts.list_event_dates(lake):
        for receipt_ts in receipts.list_receipts(lake, event_date):
            marker = receipts.read_marker(lake, event_date, receipt_ts)
            table.add_row(event_date, receipt_ts, str(marker.batch_id), str(marker.rows), str(marker.events),
                          ",".join(marker.pane_kinds), "yes" if marker.late else "")
    return table
