"""The PySpark Structured Streaming job: landing JSON lines -> session panes in receipt partitions."""
