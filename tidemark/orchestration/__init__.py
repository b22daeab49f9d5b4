"""Airflow and the runs it starts.

The REST client of Airflow's API (airflow_api), the dag_run_id rule (runs), durable rerun
obligations (obligations), reconciliation of stale dates (reconcile), where a run's Spark step runs
(dedup_backends) and the DAGs' run-time settings (settings).
"""
