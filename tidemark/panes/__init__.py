"""Receipt partitions of session panes, the stream's output and the dedup's input.

The partitions and their markers (receipts), their index (receipt_index), which of them one event
date's dedup reads (planning), reading their panes with pyarrow (pane_reader), packs: a rebuildable
copy of many of one date's partitions read as a few files (pack_cache), and the maintenance pass
that packs closed dates ahead (pack_maintenance).
"""
