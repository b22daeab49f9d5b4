"""Deduplicating one event date: receipt panes -> a versioned, published partition (dedup),
incremental corrections (incremental), and a deliberate change of session rules that
re-deduplicates every date (rules_migration).
"""
