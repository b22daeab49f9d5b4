"""`tidemark demo`: the local stack on a generated workload landed in waves, then a report.

waves.py   the workload, cut into waves of files in arrival order, and its lateness
wait.py    waiting (with progress) for the stream, the notices, the DAG runs, the versions
report.py  what was written and corrected, step timings, the check against a recomputation
charts.py  PNG charts and an HTML page
"""
