"""The deduplicated sessions as an Apache Iceberg table: catalog, schema and loading (table),
committing a version and what is current (publish), and reading sessions with pyarrow
(reader).
"""
