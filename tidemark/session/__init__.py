"""What a session is: the rules record a lake keeps, and THE session row.

The rules record (rules_record: the session rules themselves are tidemark.base.session_rules, which
the store's version records hold too) and the session row, its columns and schema versions
(session_schema).
"""
