"""Keeping the lake healthy, observed and deployed.

Garbage collection of the table (gc), the SLOs (health), metrics on OpenTelemetry (metrics) and
their Prometheus exporter (exporter), summaries of the lake for people (inspect), and the Cloud
Function's deployable bundle (function_bundle).
"""
