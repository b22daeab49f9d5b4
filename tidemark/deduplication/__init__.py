"""Deduplicating one event date: receipt panes -> a versioned, published partition.

The run (dedup), incremental corrections (incremental), the layout of a version's files in buckets
of users (buckets), a run's changeset (changeset), the --full recheck (recheck), and a deliberate
change of session rules that re-deduplicates every date (rules_migration).
"""
