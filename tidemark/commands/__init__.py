"""Subcommands of `tidemark`.

Each module has `register(subparsers)`, which adds its parser and sets `args.handler` (tidemark.cli
lists them).

A module imports what its parser needs at the top and its heavy dependencies (pyspark, airflow,
pubsub, and the lake's modules, which pull pyarrow, pyiceberg and jsonschema) inside the handler, so
that `tidemark --help` and the pyarrow-only readers start fast.
"""
