"""What a session is: the session rules (sessions), the rules record a lake keeps
(rules_record) and THE session row, its columns and schema versions (session_schema).
"""
