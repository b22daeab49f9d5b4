"""What a session is: its rules, the rules record a lake keeps, and THE session row.

The session rules (sessions), the rules record (rules_record) and the session row, its columns and
schema versions (session_schema).
"""
