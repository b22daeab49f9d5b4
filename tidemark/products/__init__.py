"""What consumers build from the deduplicated table.

The example consumers' daily and weekly session metrics (session_metrics), per-user totals kept
from the changesets (user_totals), and what a consumer run works on (consumer_run).
"""
