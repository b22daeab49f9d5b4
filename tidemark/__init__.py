"""tidemark: late, duplicated, out-of-order events into event-time partitions you can trust."""

__version__ = "0.1.0"
