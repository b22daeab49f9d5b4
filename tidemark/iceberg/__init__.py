"""The deduplicated sessions as an Apache Iceberg table, one module per job.

table (catalog, schema, loading), partitions (event dates as partition values, manifest half
months), run_markers (a dedup run's marker and files), table_versions (what is current), commits
(committing a version), compat (the pyiceberg internals the commits depend on), maintenance (the
table's upkeep), changes (the change feed table) and reader (reading sessions with pyarrow).
"""
