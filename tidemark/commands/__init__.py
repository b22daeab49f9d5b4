"""Subcommands of `tidemark`. Each module has register(subparsers) and sets args.handler.

Modules import their heavy dependencies (pyspark, airflow, pubsub) inside the handler, so that
`tidemark --help` and the pyarrow-only readers start fast.
"""

COMMAND_MODULES = [
    "generate",
    "stream",
    "quarantine",
    "landing",
    "notices",
    "dedup",
    "rules",
    "read",
    "gc",
    "reindex",
    "demo",
    "up",
    "down",
    "status",
    "history",
    "partitions",
    "reconcile",
    "function_bundle",
    "exporter",
    "health",
]
