"""`tidemark demo` and what checks the system.

A seeded sample landing (generate), an independent batch sessionization to check the lake against (batch_reference), the workload
in waves (waves), waiting for each step (wait), the report (report) and its charts (charts,
metrics_charts).
"""
