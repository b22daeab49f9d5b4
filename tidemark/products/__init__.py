"""What consumers build from the deduplicated table: the example consumer's daily session
metrics (session_metrics).
"""
